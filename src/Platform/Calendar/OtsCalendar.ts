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
 * `layerHttp` uses Node's global fetch with an abort timer covering
 * connect, headers and body; bodies are capped at 64 KiB and must parse as an
 * OTS timestamp for the message asked about, or the call fails with a
 * `CalendarError`. Each call is independent, so a dead or slow calendar never
 * blocks the others when callers run them concurrently.
 */
import { Context, Data, Effect, Layer } from "effect"
import { bytesToHex, parseTimestamp } from "../../Domain/Ots.js"

export class CalendarError extends Data.TaggedError("CalendarError")<{
  readonly url: string
  readonly message: string
}> {}

export interface OtsCalendarService {
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
const USER_AGENT = "attestd"
/** Real calendars refuse digests longer than 64 bytes. */
export const MAX_SUBMIT_DIGEST_BYTES = 64

const trimSlash = (url: string): string => url.replace(/\/+$/, "")

const readCapped = async (res: Response, cap: number): Promise<Uint8Array> => {
  const declared = res.headers.get("content-length")
  if (declared !== null && Number(declared) > cap) {
    throw new Error(`response too large (${declared} bytes > ${cap})`)
  }
  if (res.body === null) return new Uint8Array(0)
  const reader = res.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > cap) {
      await reader.cancel().catch(() => undefined)
      throw new Error(`response too large (> ${cap} bytes)`)
    }
    chunks.push(value)
  }
  const out = new Uint8Array(total)
  let off = 0
  for (const c of chunks) {
    out.set(c, off)
    off += c.byteLength
  }
  return out
}

const describe = (e: unknown, timeoutMs: number): string => {
  if (e instanceof Error) {
    if (e.name === "TimeoutError") return `timed out after ${timeoutMs} ms`
    if (e.name === "AbortError") return "request aborted"
    const cause = (e as { cause?: unknown }).cause
    const detail = cause instanceof Error ? `: ${cause.message}` : ""
    return `${e.message}${detail}`
  }
  return String(e)
}

const validate = (url: string, body: Uint8Array, msg: Uint8Array): Effect.Effect<void, CalendarError> =>
  Effect.try({
    try: () => void parseTimestamp(body, msg),
    catch: (e) =>
      new CalendarError({ url, message: `calendar returned an invalid timestamp: ${e instanceof Error ? e.message : String(e)}` })
  })

export const makeHttpCalendar = (opts: {
  readonly urls: ReadonlyArray<string>
  readonly timeoutMs?: number
}): OtsCalendarService => {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_CALENDAR_TIMEOUT_MS

  /** One HTTP exchange; `onStatus` maps a non-2xx status to a value (e.g. 404 → null) or undefined for an error. */
  const exchange = <A>(
    url: string,
    path: string,
    init: RequestInit,
    onStatus: (status: number) => { readonly value: A } | undefined
  ): Effect.Effect<Uint8Array | { readonly value: A }, CalendarError> =>
    Effect.tryPromise({
      try: async (signal) => {
        // An explicit timer, not AbortSignal.timeout inside AbortSignal.any: that pair can be
        // garbage-collected before it fires (seen here as a 5 s wait for a 400 ms timeout).
        const controller = new AbortController()
        const onAbort = () => controller.abort(signal.reason)
        signal.addEventListener("abort", onAbort, { once: true })
        const timer = setTimeout(
          () => controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError")),
          timeoutMs
        )
        try {
          const res = await fetch(`${trimSlash(url)}${path}`, { ...init, signal: controller.signal })
          if (res.status >= 200 && res.status < 300) return await readCapped(res, MAX_CALENDAR_RESPONSE_BYTES)
          const mapped = onStatus(res.status)
          await res.body?.cancel().catch(() => undefined)
          if (mapped !== undefined) return mapped
          throw new Error(`HTTP ${res.status} ${res.statusText}`.trim())
        } finally {
          clearTimeout(timer)
          signal.removeEventListener("abort", onAbort)
        }
      },
      catch: (e) => new CalendarError({ url, message: describe(e, timeoutMs) })
    })

  const submit = (url: string, digest: Uint8Array): Effect.Effect<Uint8Array, CalendarError> =>
    digest.length < 1 || digest.length > MAX_SUBMIT_DIGEST_BYTES
      ? Effect.fail(new CalendarError({ url, message: `digest must be 1..${MAX_SUBMIT_DIGEST_BYTES} bytes` }))
      : exchange<never>(
          url,
          "/digest",
          {
            method: "POST",
            headers: {
              Accept: OTS_ACCEPT,
              "Content-Type": "application/x-www-form-urlencoded",
              "User-Agent": USER_AGENT
            },
            body: digest
          },
          () => undefined
        ).pipe(
          Effect.flatMap((r) =>
            r instanceof Uint8Array
              ? Effect.as(validate(url, r, digest), r)
              : Effect.fail(new CalendarError({ url, message: "unexpected response" }))
          ),
          Effect.withSpan("OtsCalendar.submit", { attributes: { url } })
        )

  const upgrade = (url: string, commitment: Uint8Array): Effect.Effect<Uint8Array | null, CalendarError> =>
    exchange<null>(
      url,
      `/timestamp/${bytesToHex(commitment)}`,
      { method: "GET", headers: { Accept: OTS_ACCEPT, "User-Agent": USER_AGENT } },
      (status) => (status === 404 ? { value: null } : undefined)
    ).pipe(
      Effect.flatMap((r) => (r instanceof Uint8Array ? Effect.as(validate(url, r, commitment), r) : Effect.succeed(r.value))),
      Effect.withSpan("OtsCalendar.upgrade", { attributes: { url } })
    )

  return { urls: opts.urls, simulated: false, submit, upgrade }
}

export const layerHttp = (opts: {
  readonly urls: ReadonlyArray<string>
  readonly timeoutMs?: number
}): Layer.Layer<OtsCalendar> => Layer.sync(OtsCalendar, () => makeHttpCalendar(opts))
