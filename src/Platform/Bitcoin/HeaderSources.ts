/**
 * Port to Bitcoin block-header sources: Esplora-compatible HTTP APIs
 * (ATTESTD_BITCOIN_SOURCES) or, in demo mode, the simulated chain.
 *
 *   GET {base}/block-height/{h}       → block hash (display order, text)
 *   GET {base}/block/{hash}/header    → 80-byte header (hex text)
 *
 * Every source is asked concurrently through the outbound HttpClient
 * (Platform/Outbound.ts) with a timeout per request. Each answer is checked on its own (the header hashes to
 * the hash given for the height); with several sources every one must answer
 * and all must agree, else the call fails with a `HeaderSourceError` naming the
 * disagreement, and the caller retries later.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Context, Data, Duration, Effect, Layer } from "effect"
import { blockHash, headerBytes } from "../../Domain/BitcoinHeader.js"
import * as Outbound from "../Outbound.js"
import { redactUrl, redactUrls } from "../RedactUrl.js"

export class HeaderSourceError extends Data.TaggedError("HeaderSourceError")<{
  readonly message: string
  /** True when the sources answered but did not agree. */
  readonly disagreement: boolean
}> {}

export interface SourcedHeader {
  /** Block hash, display order. */
  readonly hash: string
  /** The 80-byte header, lowercase hex. */
  readonly header: string
}

export interface BitcoinHeaderSourcesService {
  /** Base URLs asked, as redactUrl shows them (or the simulated chain's label). */
  readonly sources: ReadonlyArray<string>
  readonly simulated: boolean
  /** The header of the block at `height`, agreed by every source. */
  readonly header: (height: number) => Effect.Effect<SourcedHeader, HeaderSourceError>
}

export class BitcoinHeaderSources extends Context.Tag("Platform/BitcoinHeaderSources")<
  BitcoinHeaderSources,
  BitcoinHeaderSourcesService
>() {}

export const DEFAULT_SOURCE_TIMEOUT = Duration.seconds(10)
const MAX_ANSWER_BYTES = 1024
const HASH = /^[0-9a-f]{64}$/

/** Agreement of several sources' answers for one height. */
export const agree = (
  height: number,
  answers: ReadonlyArray<{ readonly source: string; readonly answer: SourcedHeader }>
): Effect.Effect<SourcedHeader, HeaderSourceError> => {
  const first = answers[0]
  if (first === undefined) return Effect.fail(new HeaderSourceError({ message: "no Bitcoin header source configured", disagreement: false }))
  const other = answers.find((a) => a.answer.header !== first.answer.header)
  return other === undefined
    ? Effect.succeed(first.answer)
    : Effect.fail(new HeaderSourceError({
      message: `sources disagree on block ${height}: ${redactUrl(first.source)} says ${first.answer.hash}, ${redactUrl(other.source)} says ${other.answer.hash}`,
      disagreement: true
    }))
}

export const makeEsplora = (opts: {
  readonly sources: ReadonlyArray<string>
  readonly timeout?: Duration.DurationInput
}) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const timeout = opts.timeout ?? DEFAULT_SOURCE_TIMEOUT

    const text = (source: string, path: string) =>
      Outbound.exchange(HttpClientRequest.get(Outbound.appendPath(source, path)), { timeout, maxBytes: MAX_ANSWER_BYTES, overflow: "truncate" }).pipe(
        Effect.provideService(HttpClient.HttpClient, client),
        Effect.flatMap((reply) =>
          reply.status === 200
            ? Effect.succeed(new TextDecoder().decode(reply.body).trim().toLowerCase())
            : Effect.fail(new Outbound.OutboundError({ message: `HTTP ${reply.status}` }))
        ),
        Effect.mapError((e) =>
          new HeaderSourceError({
            // a transport error may quote the request URL
            message: `${Outbound.appendPath(redactUrl(source), path)}: ${e.message.split(Outbound.appendPath(source, path)).join(redactUrl(source))}`,
            disagreement: false
          })
        )
      )

    const ask = (source: string, height: number) =>
      Effect.gen(function*() {
        const hash = yield* text(source, `/block-height/${height}`)
        if (!HASH.test(hash)) return yield* new HeaderSourceError({ message: `${redactUrl(source)}: not a block hash for ${height}`, disagreement: false })
        const header = yield* text(source, `/block/${hash}/header`)
        const bytes = yield* Effect.try({
          try: () => headerBytes(header),
          catch: () => new HeaderSourceError({ message: `${redactUrl(source)}: not an 80-byte header for ${hash}`, disagreement: false })
        })
        if (blockHash(bytes) !== hash) {
          return yield* new HeaderSourceError({ message: `${redactUrl(source)}: the header of ${hash} hashes to ${blockHash(bytes)}`, disagreement: true })
        }
        return { source, answer: { hash, header } }
      })

    return {
      sources: redactUrls(opts.sources),
      simulated: false,
      header: (height: number) =>
        Effect.forEach(opts.sources, (s) => ask(s, height), { concurrency: "unbounded" }).pipe(
          Effect.flatMap((answers) => agree(height, answers)),
          Effect.withSpan("BitcoinHeaderSources.header", { attributes: { height } })
        )
    } satisfies BitcoinHeaderSourcesService
  })

/** Esplora-compatible sources through the outbound client (Platform/Outbound.ts). */
export const layerEsplora = (opts: { readonly sources: ReadonlyArray<string>; readonly timeout?: Duration.DurationInput }) =>
  Layer.effect(BitcoinHeaderSources, makeEsplora(opts)).pipe(Layer.provide(Outbound.layer))

/** No source: every Bitcoin attestation stays below T2 (demo mode with external calendars and no sources). */
export const layerNone: Layer.Layer<BitcoinHeaderSources> = Layer.succeed(BitcoinHeaderSources, {
  sources: [],
  simulated: false,
  header: () => Effect.fail(new HeaderSourceError({ message: "no Bitcoin header source configured (ATTESTD_BITCOIN_SOURCES)", disagreement: false }))
})
