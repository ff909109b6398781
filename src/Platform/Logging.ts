/**
 * Log output (issue 14 §3): JSON lines when stdout is not a terminal or
 * ATTESTD_LOG_FORMAT=json, Effect's pretty logger otherwise
 * (ATTESTD_LOG_FORMAT=pretty forces it); the level from ATTESTD_LOG_LEVEL
 * (trace, debug, info, warning, error, fatal, none; default info).
 *
 * One JSON object per line: `time`, `level`, `message`, then the annotations
 * (request_id, method, route, status, duration_ms, key_id, …) and `cause`
 * for failures. Nothing logs keys, tokens, secrets or claim data; as a last
 * guard, anything shaped like an API key or share token is redacted.
 */
import { Cause, HashMap, Layer, List, Logger, LogLevel } from "effect"

const SECRET = /\b(atk_(?:live|test)_|shr_)[A-Za-z0-9_-]{8,}/g
const redact = (s: string): string => s.replace(SECRET, "$1[redacted]")

const LEVELS: Record<string, LogLevel.LogLevel> = {
  all: LogLevel.All,
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warn: LogLevel.Warning,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  fatal: LogLevel.Fatal,
  none: LogLevel.None
}

export const logLevelOf = (raw: string | undefined): LogLevel.LogLevel => LEVELS[(raw ?? "info").trim().toLowerCase()] ?? LogLevel.Info

export const logFormatOf = (raw: string | undefined, isTty: boolean): "json" | "pretty" =>
  raw === "json" ? "json" : raw === "pretty" ? "pretty" : isTty ? "pretty" : "json"

const textOf = (message: unknown): string => {
  const parts = Array.isArray(message) ? message : [message]
  return parts.map((p) => (typeof p === "string" ? p : p instanceof Error ? p.message : JSON.stringify(p))).join(" ")
}

const plain = (v: unknown): unknown => (typeof v === "string" ? redact(v) : typeof v === "bigint" ? v.toString() : v)

/** One JSON object per line on `out` (stdout for serve; stderr for commands whose stdout is data). */
export const jsonLoggerTo = (out: NodeJS.WritableStream) => Logger.make<unknown, void>(({ annotations, cause, date, logLevel, message, spans }) => {
  const entry: Record<string, unknown> = {
    time: date.toISOString(),
    level: logLevel.label.toLowerCase(),
    message: redact(textOf(message))
  }
  for (const [k, v] of HashMap.toEntries(annotations)) if (!(k in entry)) entry[k] = plain(v)
  if (!Cause.isEmpty(cause)) entry.cause = redact(Cause.pretty(cause, { renderErrorCause: true }))
  const now = date.getTime()
  for (const span of List.toArray(spans)) entry[`span_${span.label}_ms`] = now - span.startTime
  out.write(JSON.stringify(entry) + "\n")
})

/** The logger and minimum level for this process, from the environment. */
export const LoggingLive = (options: { readonly toStderr?: boolean } = {}, env: NodeJS.ProcessEnv = process.env) => {
  const out = options.toStderr ? process.stderr : process.stdout
  return Layer.merge(
    logFormatOf(env.ATTESTD_LOG_FORMAT, out.isTTY === true) === "json"
      ? Logger.replace(Logger.defaultLogger, jsonLoggerTo(out))
      : options.toStderr
      ? Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true }))
      : Logger.pretty,
    Logger.minimumLogLevel(logLevelOf(env.ATTESTD_LOG_LEVEL))
  )
}
