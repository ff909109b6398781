/**
 * TsaClient — the Effect port for RFC 3161 time-stamping (tier T1).
 *
 * - `layerHttp({ urls, trustAnchorsPem, timeoutMs })`: POSTs the request to
 *   each URL in order (failover on HTTP error, timeout, malformed / rejected /
 *   invalid reply), validating every reply BEFORE it is returned. `provider`
 *   of a stamp is the URL that answered as redactUrl shows it (no userinfo, no
 *   query): it is stored with the batch and published in evidence.
 * - `layerDemo(dataDir)`: the embedded local demo TSA (see DemoTsa.ts); its
 *   stamps go through the same validation, chained to `demo-tsa/root.pem`.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Context, Data, Duration, Effect, Either, Layer } from "effect"
import { bytesToBase64 } from "../../Domain/Bytes.js"
import * as Outbound from "../Outbound.js"
import { redactUrl } from "../RedactUrl.js"
import { loadOrCreateDemoTsa } from "./DemoTsa.js"
import {
  buildTimeStampRequest,
  parseTimeStampResponse,
  parseTrustAnchors,
  TsaValidationError,
  validateTimeStampToken
} from "./Rfc3161.js"

export interface TsaStamp {
  /** The TimeStampToken (CMS ContentInfo DER). */
  readonly token: Uint8Array
  readonly genTime: Date
  /** Which TSA issued it: the answering URL, or the demo label. */
  readonly provider: string
}

export class TsaError extends Data.TaggedError("TsaError")<{
  readonly message: string
  /** `url`: the TSA as redactUrl shows it. */
  readonly attempts: ReadonlyArray<{ readonly url: string; readonly reason: string }>
}> {}

export interface TsaClientService {
  /** Human description: the URL list, or the demo label. */
  readonly provider: string
  readonly timestamp: (digest: Uint8Array) => Effect.Effect<TsaStamp, TsaError>
  /** The PEM trust anchors every reply is validated against (published by GET /v1/tsa/certificates); undefined: none configured. */
  readonly trustAnchorsPem?: string | undefined
}

export class TsaClient extends Context.Tag("Platform/TsaClient")<TsaClient, TsaClientService>() {}

export const DEFAULT_TSA_TIMEOUT_MS = 10_000
/** Replies larger than this are rejected (real tokens are a few KiB). */
const MAX_REPLY_BYTES = 1024 * 1024

export interface HttpTsaOptions {
  readonly urls: ReadonlyArray<string>
  /** PEM trust anchors; when set every token must chain to one of them. */
  readonly trustAnchorsPem: string | undefined
  /** Per-attempt bound on the HTTP exchange (default 10 s). */
  readonly timeoutMs?: number
}

/** Split `ATTESTD_TSA_URL` (comma-separated) into a list of http(s) URLs. */
export const parseTsaUrls = (value: string): Array<string> => {
  const urls = value
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
  for (const u of urls) {
    let parsed: URL
    try {
      parsed = new URL(u)
    } catch {
      throw new Error(`invalid TSA URL: ${redactUrl(u)}`)
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error(`TSA URL must be http(s): ${redactUrl(u)}`)
  }
  return urls
}

interface Target {
  /** URL without userinfo, query kept: what is requested. */
  readonly url: string
  /** What logs, metrics, errors and the stored provider show (redactUrl). */
  readonly label: string
  readonly authorization?: string
}

/** Userinfo in a URL becomes a Basic auth header; the query stays in the request only. */
const toTarget = (raw: string): Target => {
  const label = redactUrl(raw)
  try {
    const u = new URL(raw)
    if (u.username === "" && u.password === "") return { url: raw, label }
    const auth = bytesToBase64(new TextEncoder().encode(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`))
    u.username = ""
    u.password = ""
    return { url: u.toString(), label, authorization: `Basic ${auth}` }
  } catch {
    return { url: raw, label }
  }
}

const reasonOf = (e: unknown): string => {
  if (e instanceof TsaValidationError) return e.reason
  if (e instanceof Error) {
    const cause = e.cause instanceof Error ? `: ${e.cause.message}` : ""
    return `${e.message}${cause}`
  }
  return String(e)
}

const postRequest = (target: Target, body: Uint8Array, timeoutMs: number): Effect.Effect<Uint8Array, string, HttpClient.HttpClient> =>
  Outbound.exchange(
    HttpClientRequest.post(target.url).pipe(
      HttpClientRequest.setHeaders({
        accept: "application/timestamp-reply",
        ...(target.authorization !== undefined ? { authorization: target.authorization } : {})
      }),
      HttpClientRequest.bodyUint8Array(body, "application/timestamp-query")
    ),
    { timeout: Duration.millis(timeoutMs), maxBytes: MAX_REPLY_BYTES, wallClock: true }
  ).pipe(
    // a transport error may quote the request URL
    Effect.mapError((e) => e.message.split(target.url).join(target.label)),
    Effect.flatMap((reply) =>
      reply.status < 200 || reply.status >= 300
        ? Effect.fail(`HTTP ${reply.status}`)
        : reply.body.byteLength === 0
        ? Effect.fail("empty reply")
        : Effect.succeed(reply.body)
    )
  )

const checkReply = (
  replyDer: Uint8Array,
  digest: Uint8Array,
  nonce: Uint8Array,
  trustAnchorsPem: string | undefined
): Effect.Effect<{ token: Uint8Array; genTime: Date }, string> =>
  Effect.tryPromise({
    try: async () => {
      const parsed = parseTimeStampResponse(replyDer)
      if (parsed.status !== 0 && parsed.status !== 1) {
        const extra = [parsed.statusText, parsed.failInfo?.join(",")].filter((s) => s !== undefined && s !== "")
        throw new TsaValidationError(`TSA refused: status ${parsed.status}${extra.length > 0 ? ` (${extra.join("; ")})` : ""}`)
      }
      if (!parsed.token) throw new TsaValidationError("granted reply carries no token")
      const v = await validateTimeStampToken(parsed.token, {
        digest,
        nonce,
        requireChain: trustAnchorsPem !== undefined,
        ...(trustAnchorsPem !== undefined ? { trustAnchorsPem } : {})
      })
      return { token: parsed.token, genTime: v.genTime }
    },
    catch: reasonOf
  })

const buildRequest = (digest: Uint8Array): Effect.Effect<{ der: Uint8Array; nonce: Uint8Array }, TsaError> =>
  Effect.try({
    try: () => buildTimeStampRequest(digest),
    catch: (e) => new TsaError({ message: `cannot build time-stamp request: ${reasonOf(e)}`, attempts: [] })
  })

/** The HTTP TsaClient service over `client` (see layerHttp). */
export const makeHttpTsaClient = (opts: HttpTsaOptions, client: HttpClient.HttpClient): TsaClientService => {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TSA_TIMEOUT_MS
  const targets = opts.urls.map(toTarget)
  const provider = targets.map((t) => t.label).join(", ")
  let anchorsProblem: string | undefined
  if (opts.trustAnchorsPem !== undefined) {
    try {
      parseTrustAnchors(opts.trustAnchorsPem)
    } catch (e) {
      anchorsProblem = reasonOf(e)
    }
  }

  const timestamp = (digest: Uint8Array): Effect.Effect<TsaStamp, TsaError> =>
    Effect.gen(function* () {
      if (targets.length === 0) return yield* new TsaError({ message: "no TSA URL configured", attempts: [] })
      if (anchorsProblem !== undefined) {
        return yield* new TsaError({ message: `TSA trust anchors unusable: ${anchorsProblem}`, attempts: [] })
      }
      const req = yield* buildRequest(digest)
      const attempts: Array<{ url: string; reason: string }> = []
      for (const target of targets) {
        const result = yield* Effect.either(
          postRequest(target, req.der, timeoutMs).pipe(
            Effect.provideService(HttpClient.HttpClient, client),
            Effect.flatMap((reply) => checkReply(reply, digest, req.nonce, opts.trustAnchorsPem))
          )
        )
        if (Either.isRight(result)) {
          return { token: result.right.token, genTime: result.right.genTime, provider: target.label }
        }
        attempts.push({ url: target.label, reason: result.left })
        yield* Effect.logWarning(`TSA ${target.label} failed: ${result.left}`).pipe(
          Effect.annotateLogs({ tsaUrl: target.label, reason: result.left })
        )
      }
      return yield* new TsaError({
        message: `all ${targets.length} TSA(s) failed: ${attempts.map((a) => `${a.url}: ${a.reason}`).join("; ")}`,
        attempts
      })
    }).pipe(Effect.withSpan("TsaClient.timestamp"))

  return { provider, timestamp, trustAnchorsPem: opts.trustAnchorsPem }
}

/** Layer for an RFC 3161 TSA over HTTP(S), URLs tried in order, through the outbound client. */
export const layerHttp = (opts: HttpTsaOptions): Layer.Layer<TsaClient> =>
  Layer.effect(TsaClient, Effect.map(HttpClient.HttpClient, (client) => makeHttpTsaClient(opts, client))).pipe(
    Layer.provide(Outbound.layer)
  )

/** Layer for the embedded demo TSA (`<dataDir>/demo-tsa`, created on first use). */
export const layerDemo = (dataDir: string): Layer.Layer<TsaClient, Error> =>
  Layer.effect(
    TsaClient,
    Effect.gen(function* () {
      const demo = yield* Effect.tryPromise({
        try: () => loadOrCreateDemoTsa(dataDir),
        catch: (e) => (e instanceof Error ? e : new Error(String(e)))
      })
      const timestamp = (digest: Uint8Array): Effect.Effect<TsaStamp, TsaError> =>
        Effect.gen(function* () {
          const req = yield* buildRequest(digest)
          const result = yield* Effect.either(
            Effect.tryPromise({ try: () => demo.reply(req.der), catch: reasonOf }).pipe(
              Effect.flatMap((reply) => checkReply(reply, digest, req.nonce, demo.rootPem))
            )
          )
          if (Either.isLeft(result)) {
            yield* Effect.logWarning(`demo TSA failed: ${result.left}`)
            return yield* new TsaError({
              message: `demo TSA failed: ${result.left}`,
              attempts: [{ url: demo.provider, reason: result.left }]
            })
          }
          return { token: result.right.token, genTime: result.right.genTime, provider: demo.provider }
        })
      return TsaClient.of({ provider: demo.provider, timestamp, trustAnchorsPem: demo.rootPem })
    })
  )

