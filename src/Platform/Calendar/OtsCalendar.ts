/**
 * Port to OpenTimestamps calendars, speaking the real calendar protocol:
 *
 *   POST {url}/digest              body = raw digest bytes → serialized pending timestamp
 *   GET  {url}/timestamp/{hex}     → serialized upgrade timestamp, or 404 while pending
 *
 * Headers follow the reference client (python-opentimestamps `RemoteCalendar`):
 * `Accept: application/vnd.opentimestamps.v1`, and for the POST
 * `Content-Type: application/x-www-form-urlencoded`.
 *
 * `layerHttp` goes through the outbound client (Platform/Outbound.ts): one
 * timeout covering connect, headers and body; bodies are capped at 64 KiB and must parse as an
 * OTS timestamp for the message asked about, or the call fails with a
 * `CalendarError`. Each call is independent, so a dead or slow calendar never
 * blocks the others when callers run them concurrently.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Context, Data, Duration, Effect, Layer } from "effect"
import { bytesToHex } from "../../Domain/Bytes.js"
import { parseTimestamp } from "../../Domain/Ots.js"
import * as Outbound from "../Outbound.js"
import { redactUrl } from "../RedactUrl.js"

export class CalendarError extends Data.TaggedError("CalendarError")<{
  /** The calendar as redactUrl shows it. */
  readonly url: string
  readonly message: string
}> {}

export interface OtsCalendarService {
  /** The calendars as configured (credentials included: show them through redactUrl). */
  readonly urls: ReadonlyArray<string>
  /** True for the in-process / demo calendar: its Bitcoin attestations point at a simulated chain. */
  readonly simulated: boolean
  /** Submit a digest (1–64 bytes); returns the serialized pending timestamp for that digest. */
  readonly submit: (url: string, digest: Uint8Array) => Effect.Effect<Uint8Array, CalendarError>
  /**
   * Ask for the upgrade of `commitment` (the message at the pending attestation,
   * i.e. the digest replayed through the submitted timestamp's ops). Returns the
   * serialized timestamp for `commitment`, or null while still pending (404).
   */
  readonly upgrade: (url: string, commitment: Uint8Array) => Effect.Effect<Uint8Array | null, CalendarError>
}

export class OtsCalendar extends Context.Tag("Platform/OtsCalendar")<OtsCalendar, OtsCalendarService>() {}

export const DEFAULT_CALENDAR_TIMEOUT_MS = 10_000
export const MAX_CALENDAR_RESPONSE_BYTES = 64 * 1024
export const OTS_ACCEPT = "application/vnd.opentimestamps.v1"
/** Real calendars refuse digests longer than 64 bytes. */
export const MAX_SUBMIT_DIGEST_BYTES = 64

const validate = (url: string, body: Uint8Array, msg: Uint8Array): Effect.Effect<void, CalendarError> =>
  Effect.try({
    try: () => void parseTimestamp(body, msg),
    catch: (e) =>
      new CalendarError({ url: redactUrl(url), message: `calendar returned an invalid timestamp: ${e instanceof Error ? e.message : String(e)}` })
  })

/** The HTTP calendar service over `client` (see layerHttp). */
export const makeHttpCalendar = (opts: {
  readonly urls: ReadonlyArray<string>
  readonly timeoutMs?: number
}, client: HttpClient.HttpClient): OtsCalendarService => {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_CALENDAR_TIMEOUT_MS

  /** One HTTP exchange; `onStatus` maps a non-2xx status to a value (e.g. 404 → null) or undefined for an error. */
  const exchange = <A>(
    url: string,
    request: HttpClientRequest.HttpClientRequest,
    onStatus: (status: number) => { readonly value: A } | undefined
  ): Effect.Effect<Uint8Array | { readonly value: A }, CalendarError> =>
    Outbound.exchange(request.pipe(HttpClientRequest.setHeader("accept", OTS_ACCEPT)), {
      timeout: Duration.millis(timeoutMs),
      maxBytes: MAX_CALENDAR_RESPONSE_BYTES,
      wallClock: true
    }).pipe(
      Effect.provideService(HttpClient.HttpClient, client),
      // a transport error may quote the request URL
      Effect.mapError((e) => new CalendarError({ url: redactUrl(url), message: e.message.split(request.url).join(redactUrl(request.url)) })),
      Effect.flatMap((reply): Effect.Effect<Uint8Array | { readonly value: A }, CalendarError> => {
        if (reply.status >= 200 && reply.status < 300) return Effect.succeed(reply.body)
        const mapped = onStatus(reply.status)
        return mapped !== undefined ? Effect.succeed(mapped) : Effect.fail(new CalendarError({ url: redactUrl(url), message: `HTTP ${reply.status}` }))
      })
    )

  const submit = (url: string, digest: Uint8Array): Effect.Effect<Uint8Array, CalendarError> =>
    digest.length < 1 || digest.length > MAX_SUBMIT_DIGEST_BYTES
      ? Effect.fail(new CalendarError({ url: redactUrl(url), message: `digest must be 1..${MAX_SUBMIT_DIGEST_BYTES} bytes` }))
      : exchange<never>(
          url,
          HttpClientRequest.post(Outbound.appendPath(url, "/digest")).pipe(
            HttpClientRequest.bodyUint8Array(digest, "application/x-www-form-urlencoded")
          ),
          () => undefined
        ).pipe(
          Effect.flatMap((r) =>
            r instanceof Uint8Array
              ? Effect.as(validate(url, r, digest), r)
              : Effect.fail(new CalendarError({ url: redactUrl(url), message: "unexpected response" }))
          ),
          Effect.withSpan("OtsCalendar.submit", { attributes: { url: redactUrl(url) } })
        )

  const upgrade = (url: string, commitment: Uint8Array): Effect.Effect<Uint8Array | null, CalendarError> =>
    exchange<null>(
      url,
      HttpClientRequest.get(Outbound.appendPath(url, `/timestamp/${bytesToHex(commitment)}`)),
      (status) => (status === 404 ? { value: null } : undefined)
    ).pipe(
      Effect.flatMap((r) => (r instanceof Uint8Array ? Effect.as(validate(url, r, commitment), r) : Effect.succeed(r.value))),
      Effect.withSpan("OtsCalendar.upgrade", { attributes: { url: redactUrl(url) } })
    )

  return { urls: opts.urls, simulated: false, submit, upgrade }
}

export const layerHttp = (opts: {
  readonly urls: ReadonlyArray<string>
  readonly timeoutMs?: number
}): Layer.Layer<OtsCalendar> =>
  Layer.effect(OtsCalendar, Effect.map(HttpClient.HttpClient, (client) => makeHttpCalendar(opts, client))).pipe(
    Layer.provide(Outbound.layer)
  )
