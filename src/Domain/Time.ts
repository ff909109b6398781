/** Timestamps in the wire format: `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (microseconds, literal +00:00). */

export const formatMicros = (micros: bigint): string => {
  const millis = micros / 1000n
  const sub = Number(micros % 1000000n)
  const iso = new Date(Number(millis)).toISOString() // YYYY-MM-DDTHH:MM:SS.mmmZ
  return `${iso.slice(0, 19)}.${String(sub).padStart(6, "0")}+00:00`
}

/**
 * A formatter of whole milliseconds that keeps its last answer: a busy server
 * formats the instant of every request, and requests in the same millisecond
 * share the text.
 */
const keepingLast = (format: (whole: number) => string): (millis: number) => string => {
  let lastMillis = Number.NaN
  let lastText = ""
  return (millis) => {
    const whole = Math.trunc(millis)
    if (whole === lastMillis) return lastText
    const text = format(whole)
    lastMillis = whole
    lastText = text
    return text
  }
}

/**
 * A millisecond instant in the wire format (microseconds 000): no bigint on this
 * path, a response formats one per request (formatting was ~1% of a verify's
 * profile samples before it kept its last text).
 */
export const formatMillis = keepingLast((whole) =>
  whole >= 0 ? `${new Date(whole).toISOString().slice(0, 23)}000+00:00` : formatMicros(BigInt(whole) * 1000n)
)

/** `new Date(millis).toISOString()` (the logs' `time`), the last one kept: ~1.3% of a verify's profile, a line per request. */
export const isoMillis = keepingLast((whole) => new Date(whole).toISOString())

export const nanosToMicros = (nanos: bigint): bigint => nanos / 1000n

const WIRE_TIME = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.(\d{6})\+00:00$/

/** Parses the wire format back to microseconds since the epoch, or undefined. */
export const parseMicros = (s: string): bigint | undefined => {
  const m = WIRE_TIME.exec(s)
  if (!m) return undefined
  const secs = Date.parse(`${m[1]}Z`)
  if (Number.isNaN(secs)) return undefined
  const micros = BigInt(secs) * 1000n + BigInt(m[2]!)
  // Date.parse rolls impossible dates over (Feb 30 → Mar 1); only canonical input round-trips.
  return formatMicros(micros) === s ? micros : undefined
}

/** `YYYY-MM` of a UTC instant. */
export const utcMonth = (millis: number): string => new Date(millis).toISOString().slice(0, 7)

/** Seconds from `millis` to the start of the next UTC month. */
export const secondsToNextUtcMonth = (millis: number): number => {
  const d = new Date(millis)
  const next = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)
  return Math.max(1, Math.ceil((next - millis) / 1000))
}

const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/

/**
 * An ISO 8601 instant with its zone (`Z` or `±hh:mm`) in microseconds since the epoch: the
 * wire format to the microsecond, any other form to the millisecond; undefined otherwise.
 */
export const parseInstantMicros = (s: string): bigint | undefined => {
  const wire = parseMicros(s)
  if (wire !== undefined) return wire
  if (!ISO_INSTANT.test(s)) return undefined
  const millis = Date.parse(s)
  return Number.isNaN(millis) ? undefined : BigInt(millis) * 1000n
}
