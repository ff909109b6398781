/**
 * Log output of a real `attestd serve` with stdout piped (not a terminal):
 * one JSON object per line with time, level and message; one access-log line
 * per request with request id, route template, status, duration and key id;
 * the API key, the claim data and the raw path never appear. Also
 * ATTESTD_LOG_FORMAT=pretty and ATTESTD_LOG_LEVEL, and the unit rules.
 */
import { LogLevel } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { logFormatOf, logLevelOf } from "../../src/Platform/Logging.js"
import { createKeyCli, freePort, randomHex32, requireDist, type ServeEnv, type ServeProcess, sleep, startServe, waitFor } from "../helpers/process.js"

describe("log format and level", () => {
  it("JSON unless a terminal; the env var overrides", () => {
    expect(logFormatOf(undefined, false)).toBe("json")
    expect(logFormatOf(undefined, true)).toBe("pretty")
    expect(logFormatOf("json", true)).toBe("json")
    expect(logFormatOf("pretty", false)).toBe("pretty")
    expect(logLevelOf(undefined)).toBe(LogLevel.Info)
    expect(logLevelOf("WARNING")).toBe(LogLevel.Warning)
    expect(logLevelOf("debug")).toBe(LogLevel.Debug)
    expect(logLevelOf("none")).toBe(LogLevel.None)
  })
})

describe("logs of attestd serve (sqlite)", () => {
  const dirs: Array<string> = []
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    for (const p of procs) await p.kill("SIGKILL")
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })
  const envFor = async (extra: Record<string, string>): Promise<ServeEnv> => {
    const dataDir = mkdtempSync(join(tmpdir(), "attestd-logs-"))
    dirs.push(dataDir)
    return { databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: await freePort(), sealInterval: "1h", extra }
  }

  it("writes JSON lines with an access log per request, and never the key or claim data", async () => {
    requireDist()
    const env = await envFor({})
    const key = await createKeyCli(env, "attest,batch,metadata:read")
    const serve = await startServe(env)
    procs.push(serve)
    const secretSource = `source-${randomHex32().slice(0, 16)}`
    const secretExtra = `extra-${randomHex32().slice(0, 16)}`
    const hash = randomHex32()
    const requestId = `log-test-${randomHex32().slice(0, 8)}`
    const res = await fetch(`${serve.url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}`, "x-request-id": requestId },
      body: JSON.stringify({ hash_hex: hash, source: secretSource, extra_data: { note: secretExtra } })
    })
    expect(res.status).toBe(201)
    const created = (await res.json()) as { id: string }
    // Other routes too: a keyed GET of the claim, and a failing request.
    const get = await fetch(`${serve.url}/v1/attestation/${created.id}/metadata`, { headers: { authorization: `Bearer ${key}` } })
    expect(get.status).toBe(200)
    expect(JSON.stringify(await get.json())).toContain(secretExtra)
    const refused = await fetch(`${serve.url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.slice(0, -4)}zzzz` },
      body: JSON.stringify({ hash_hex: hash, source: secretSource })
    })
    expect(refused.status).toBe(401)

    // The access log line is written when the response's connection reports it closed, which can
    // come after the client has read the answer: wait for the three lines this test made.
    const lines = await waitFor("the three access-log lines", async () => {
      const all = serve.output().split("\n").filter((l) => l.length > 0)
      const mine = [requestId, "\"route\":\"/v1/attestation/:id/metadata\"", "\"status\":401"]
      return mine.every((m) => all.some((l) => l.includes(m))) ? all : undefined
    }, 10_000, 50)
    const bad = lines.filter((l) => !l.startsWith("{"))
    expect(bad, bad.join("\n")).toEqual([])
    const entries = lines.map((l) => JSON.parse(l) as Record<string, unknown>)
    for (const e of entries) {
      expect(typeof e.time).toBe("string")
      expect(typeof e.level).toBe("string")
      expect(typeof e.message).toBe("string")
    }
    const access = entries.filter((e) => e.message === "request")
    const attest = access.find((e) => e.request_id === requestId)
    expect(attest).toMatchObject({ level: "info", method: "POST", route: "/v1/attest", status: 201 })
    expect(typeof attest!.duration_ms).toBe("number")
    expect(attest!.key_id).toMatch(/\S+/)
    expect(key).not.toContain(String(attest!.key_id))
    const read = access.find((e) => e.route === "/v1/attestation/:id/metadata")
    expect(read).toMatchObject({ status: 200, key_id: attest!.key_id })
    expect(access.find((e) => e.status === 401)).toMatchObject({ route: "/v1/attest" })

    const everything = serve.output()
    expect(everything).not.toContain(key)
    expect(everything).not.toContain(key.slice(-32))
    expect(everything).not.toContain(secretSource)
    expect(everything).not.toContain(secretExtra)
    expect(everything).not.toContain(created.id) // routes are templates, not raw paths
  })

  it("a request whose client goes away before the answer is logged once, with status 499; an answered one once, with its status", async () => {
    requireDist()
    const env = await envFor({})
    const serve = await startServe(env)
    procs.push(serve)
    const gone = `log-gone-${randomHex32().slice(0, 8)}`
    const answered = `log-answered-${randomHex32().slice(0, 8)}`
    // a body announced at 100 bytes, 10 sent, then the connection closed
    await new Promise<void>((resolve, reject) => {
      const socket = connect(env.port, "127.0.0.1", () => {
        socket.write(`POST /v1/verify HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\nx-request-id: ${gone}\r\n\r\n{"hash_hex`)
        setTimeout(() => socket.destroy(), 200)
      })
      socket.on("close", () => resolve())
      socket.on("error", reject)
    })
    const res = await fetch(`${serve.url}/v1/verify`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": answered },
      body: JSON.stringify({ hash_hex: randomHex32() })
    })
    expect(res.status).toBe(200)
    const lineOf = (id: string) => serve.output().split("\n").filter((l) => l.includes(`"request_id":"${id}"`))
    // a later request's line is the barrier: a second line for either would have been written before it
    const after = `log-after-${randomHex32().slice(0, 8)}`
    await waitFor("the answered request's line", async () => (lineOf(answered).length > 0 ? true : undefined), 10_000, 50)
    expect((await fetch(`${serve.url}/v1/healthz`, { headers: { "x-request-id": after } })).status).toBe(200)
    await waitFor("the later request's line", async () => (lineOf(after).length > 0 ? true : undefined), 10_000, 50)
    expect(lineOf(gone)).toHaveLength(1)
    expect(JSON.parse(lineOf(gone)[0]!)).toMatchObject({ route: "/v1/verify", status: 499 })
    expect(lineOf(answered)).toHaveLength(1)
    expect(JSON.parse(lineOf(answered)[0]!)).toMatchObject({ route: "/v1/verify", status: 200 })
  })

  it("ATTESTD_LOG_FORMAT=pretty is not JSON; ATTESTD_LOG_LEVEL=warning drops info lines", async () => {
    const pretty = await startServe(await envFor({ ATTESTD_LOG_FORMAT: "pretty" }))
    procs.push(pretty)
    await (await fetch(`${pretty.url}/v1/healthz`)).arrayBuffer()
    await waitFor("a pretty access line", async () => (pretty.output().includes("/v1/healthz") ? true : undefined), 10_000, 50)
    expect(pretty.output().split("\n").filter((l) => l.startsWith("{")).length).toBe(0)

    const quiet = await startServe(await envFor({ ATTESTD_LOG_LEVEL: "warning" }))
    procs.push(quiet)
    for (let i = 0; i < 3; i++) await (await fetch(`${quiet.url}/v1/healthz`)).arrayBuffer()
    await sleep(300)
    expect(quiet.output()).not.toContain("\"level\":\"info\"")
  })
})
