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
import { Cause, Clock, Context, DefaultServices, FiberId, FiberRef, FiberRefs, HashMap, Layer, List, Logger, LogLevel, Option, type Runtime, Tracer } from "effect"
import { isoMillis } from "../Domain/Time.js"

const SECRET = /\b(atk_(?:live|test)_|shr_)[A-Za-z0-9_-]{8,}/g
/** Redacts anything shaped like an API key or a share token (a line per request: most strings have neither prefix). */
const redact = (s: string): string => s.includes("atk_") || s.includes("shr_") ? s.replace(SECRET, "$1[redacted]") : s

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

/**
 * Lines written to `out` at most once per turn of the event loop (or at 64 KiB):
 * on a pipe each write is a system call, and a busy server logs a line per
 * request. Whatever is pending goes out synchronously when the process exits.
 */
export const batchedLines = (out: NodeJS.WritableStream): (line: string) => void => {
  let pending = ""
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending === "") return
    const text = pending
    pending = ""
    out.write(text)
  }
  process.on("exit", flush)
  return (line) => {
    pending += line
    if (pending.length >= 65_536) flush()
    else if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  }
}

/** A JSON line from level, message and plain annotations, without Effect's logger record. */
export type DirectLine = (logLevel: LogLevel.LogLevel, message: string, annotations: ReadonlyArray<Record<string, unknown>>, millis: number) => void

/**
 * A JSON logger and its direct line, built together: the line writes what the
 * logger writes, from level, message and plain annotations, so `directLogger`
 * (the access log, a line per request) need not build a HashMap of
 * annotations, an ISO date and a spans list only to take them apart again.
 */
export interface JsonLogging {
  readonly logger: Logger.Logger<unknown, void>
  readonly line: DirectLine
}

/** The JSON logging a runtime logs through, when it does (LoggingLive provides it with the logger). */
export class JsonLines extends Context.Tag("Platform/JsonLines")<JsonLines, JsonLogging>() {}

/** The fields every JSON line starts with; annotations follow, never overwriting them. */
const entryOf = (millis: number, logLevel: LogLevel.LogLevel, text: string): Record<string, unknown> => ({
  time: isoMillis(millis),
  level: logLevel.label.toLowerCase(),
  message: redact(text)
})

/** One JSON object per line on `out` (stdout for serve; stderr for commands whose stdout is data). */
export const jsonLoggingTo = (out: NodeJS.WritableStream): JsonLogging => {
  const write = batchedLines(out)
  const logger = Logger.make<unknown, void>(({ annotations, cause, date, logLevel, message, spans }) => {
    const now = date.getTime()
    const entry = entryOf(now, logLevel, textOf(message))
    for (const [k, v] of HashMap.toEntries(annotations)) if (!(k in entry)) entry[k] = plain(v)
    if (!Cause.isEmpty(cause)) entry.cause = redact(Cause.pretty(cause, { renderErrorCause: true }))
    for (const span of List.toArray(spans)) entry[`span_${span.label}_ms`] = now - span.startTime
    write(JSON.stringify(entry) + "\n")
  })
  const line: DirectLine = (logLevel, message, annotations, millis) => {
    const entry = entryOf(millis, logLevel, message)
    for (const record of annotations) for (const k in record) if (!(k in entry)) entry[k] = plain(record[k])
    write(JSON.stringify(entry) + "\n")
  }
  return { logger, line }
}

/** The JSON logger on `out` in place of the default one, and its direct line for `directLogger`. */
export const jsonLoggingLayer = (out: NodeJS.WritableStream): Layer.Layer<JsonLines> => {
  const json = jsonLoggingTo(out)
  return Layer.merge(Logger.replace(Logger.defaultLogger, json.logger), Layer.succeed(JsonLines, json))
}

/**
 * Logs through a runtime's loggers and minimum level without running a fiber
 * (what `Effect.log` does inside one): for the access log, a line per request
 * written from a node:http callback. The JSON logger of the runtime's
 * JsonLines takes its direct line;
 * the tracer's logger is skipped when the runtime has no span (it would
 * return at once); any other logger gets the usual record.
 */
export const directLogger = (runtime: Runtime.Runtime<never>) => {
  const refs = runtime.fiberRefs
  const minimum = FiberRefs.getOrDefault(refs, FiberRef.currentMinimumLogLevel)
  const base = FiberRefs.getOrDefault(refs, FiberRef.currentLogAnnotations)
  const baseRecord: Record<string, unknown> = Object.fromEntries(HashMap.toEntries(base))
  const clock = Context.get(FiberRefs.getOrDefault(refs, DefaultServices.currentServices), Clock.Clock)
  const context = FiberRefs.getOrDefault(refs, FiberRef.currentContext)
  const hasSpan = Option.isSome(Context.getOption(context, Tracer.ParentSpan))
  const json = Option.getOrUndefined(Context.getOption(context, JsonLines))
  const direct: Array<DirectLine> = []
  const others: Array<Logger.Logger<unknown, unknown>> = []
  for (const logger of FiberRefs.getOrDefault(refs, FiberRef.currentLoggers)) {
    if (logger === json?.logger) direct.push(json.line)
    else if (logger !== Logger.tracerLogger || hasSpan) others.push(logger)
  }
  return (logLevel: LogLevel.LogLevel, message: string, annotations: Record<string, unknown>): void => {
    if (LogLevel.greaterThan(minimum, logLevel)) return
    const millis = clock.unsafeCurrentTimeMillis()
    for (const line of direct) line(logLevel, message, [annotations, baseRecord], millis)
    if (others.length === 0) return
    const date = new Date(millis)
    let all = base
    for (const k in annotations) all = HashMap.set(all, k, annotations[k])
    for (const logger of others) {
      logger.log({ fiberId: FiberId.none, logLevel, message, cause: Cause.empty, context: refs, spans: List.empty(), annotations: all, date })
    }
  }
}

/** The logger and minimum level for this process, from the environment. */
export const LoggingLive = (options: { readonly toStderr?: boolean } = {}, env: NodeJS.ProcessEnv = process.env) => {
  const out = options.toStderr ? process.stderr : process.stdout
  return Layer.merge(
    logFormatOf(env.ATTESTD_LOG_FORMAT, out.isTTY === true) === "json"
      ? jsonLoggingLayer(out)
      : options.toStderr
      ? Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true }))
      : Logger.pretty,
    Logger.minimumLogLevel(logLevelOf(env.ATTESTD_LOG_LEVEL))
  )
}
