/**
 * The access log's logger (directLogger): a line written from a node:http
 * callback, without a fiber, must be the line `Effect.log` would write with
 * the same annotations: through the JSON logger's direct path (no HashMap),
 * and through any other logger as Effect's usual record.
 */
import { Effect, HashMap, Layer, Logger, LogLevel, ManagedRuntime } from "effect"
import { Writable } from "node:stream"
import { describe, expect, it } from "vitest"
import { directLogger, JsonLines, jsonLoggingLayer, jsonLoggingTo } from "../../src/Platform/Logging.js"

/** A sink collecting what the JSON logger writes (it batches lines per turn of the event loop). */
const sink = () => {
  const chunks: Array<string> = []
  const out = new Writable({
    write(chunk, _encoding, callback) {
      chunks.push(String(chunk))
      callback()
    }
  })
  const lines = async () => {
    await new Promise((resolve) => setImmediate(resolve))
    return chunks.join("").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l) as Record<string, unknown>)
  }
  return { out, lines }
}

const annotations = {
  request_id: "req-1",
  method: "POST",
  route: "/v1/attest",
  status: 201,
  duration_ms: 1.5,
  key_id: "key_1",
  client_ip: "127.0.0.1"
}

describe("directLogger", () => {
  it("writes the line Effect.log writes, with the runtime's annotations, key-shaped strings redacted", async () => {
    const viaFiber = sink()
    const viaDirect = sink()
    const layer = (out: Writable) => Layer.merge(jsonLoggingLayer(out), Logger.minimumLogLevel(LogLevel.Info))
    const withSecret = { ...annotations, note: "atk_live_ABCDEFGHIJKLMNOP and shr_ABCDEFGHIJKL" }

    const fiberRuntime = ManagedRuntime.make(layer(viaFiber.out))
    await fiberRuntime.runPromise(Effect.log("request").pipe(Effect.annotateLogs(withSecret), Effect.annotateLogs({ service: "attestd" })))
    await fiberRuntime.dispose()

    const directRuntime = ManagedRuntime.make(layer(viaDirect.out))
    // the runtime's own annotations (as a layer would set them) are on every line
    const log = directLogger(await directRuntime.runPromise(Effect.annotateLogs(Effect.runtime<never>(), { service: "attestd" })))
    log(LogLevel.Info, "request", withSecret)
    log(LogLevel.Debug, "below the minimum level", annotations)
    await directRuntime.dispose()

    const [expected] = await viaFiber.lines()
    const direct = await viaDirect.lines()
    expect(direct).toHaveLength(1)
    const [line] = direct
    const { time: t1, ...rest1 } = expected!
    const { time: t2, ...rest2 } = line!
    expect(typeof t1).toBe("string")
    expect(new Date(String(t2)).toISOString()).toBe(t2)
    expect(rest2).toEqual(rest1)
    expect(rest2).toMatchObject({ level: "info", message: "request", service: "attestd", status: 201, key_id: "key_1" })
    expect(JSON.stringify(line)).not.toContain("ABCDEFGHIJ")
    expect(rest2.note).toBe("atk_live_[redacted] and shr_[redacted]")
  })

  it("takes the JSON logger's direct line, built with it, instead of its record", async () => {
    const { out, lines } = sink()
    const json = jsonLoggingTo(out)
    const direct: Array<unknown> = []
    const rt = ManagedRuntime.make(Layer.merge(
      Logger.replace(Logger.defaultLogger, json.logger),
      Layer.succeed(JsonLines, { logger: json.logger, line: (level, message) => direct.push([level.label, message]) })
    ))
    directLogger(await rt.runtime())(LogLevel.Info, "request", annotations)
    await rt.dispose()
    expect(direct).toEqual([["INFO", "request"]])
    expect(await lines()).toEqual([])
  })

  it("gives any other logger Effect's usual record, annotations included", async () => {
    const seen: Array<{ message: unknown; annotations: Record<string, unknown>; level: string }> = []
    const custom = Logger.make(({ annotations, logLevel, message }) => {
      seen.push({ message, level: logLevel.label, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
    })
    const rt = ManagedRuntime.make(Logger.replace(Logger.defaultLogger, custom))
    const log = directLogger(await rt.runtime())
    log(LogLevel.Warning, "request", annotations)
    await rt.dispose()
    expect(seen).toEqual([{ message: "request", level: "WARN", annotations }])
  })
})
