/**
 * Clock discipline as an operator meets it (CONTRACT §6): a real `attestd serve`
 * whose ATTESTD_NTP_SERVERS are three SNTP test servers, two of them 10 s ahead,
 * starts, keeps attesting, and says so on GET /v1/healthz (200, `checks.clock`
 * degraded with the offset), /v1/info (`clock: untrusted`) and its metrics; a
 * malformed server list stops `attestd serve` at start with a clear error.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { createKeyCli, freePort, randomHex32, runCli, type ServeEnv, type ServeProcess, startServe, waitFor } from "../helpers/process.js"
import { type SntpTestServer, startSntpServer } from "../helpers/sntpServer.js"

describe("attestd serve with lying NTP servers", () => {
  const dirs: Array<string> = []
  const procs: Array<ServeProcess> = []
  const ntp: Array<SntpTestServer> = []
  afterAll(async () => {
    for (const p of procs) await p.kill("SIGKILL")
    for (const s of ntp) await s.close()
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  const envOf = async (extra: Record<string, string>): Promise<ServeEnv> => {
    const dataDir = mkdtempSync(join(tmpdir(), "attestd-clock-"))
    dirs.push(dataDir)
    return { databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: await freePort(), extra }
  }

  it("two of three servers 10 s ahead: healthz 200 with checks.clock degraded, info untrusted, gauge 0, attests go on", async () => {
    ntp.push(await startSntpServer(), await startSntpServer({ offsetMs: 10_000 }), await startSntpServer({ offsetMs: 10_000 }))
    const metricsPort = await freePort()
    const env = await envOf({
      ATTESTD_NTP_SERVERS: ntp.map((s) => s.address).join(","),
      ATTESTD_NTP_INTERVAL: "1s",
      ATTESTD_METRICS_PORT: String(metricsPort)
    })
    const key = await createKeyCli(env)
    const serve = await startServe(env)
    procs.push(serve)
    const health = await waitFor("a clock verdict", async () => {
      const res = await fetch(`${serve.url}/v1/healthz`)
      const body = await res.json() as { status: string; checks: Record<string, any> }
      return body.checks.clock?.checked_at ? { status: res.status, body } : undefined
    })
    expect(health.status).toBe(200)
    expect(health.body.status).toBe("degraded")
    expect(health.body.checks.clock).toMatchObject({ status: "degraded", tolerance_ms: 1000, reason: /exceeds the tolerance 1000 ms/ })
    expect(Math.abs(health.body.checks.clock.offset_ms - 10_000)).toBeLessThan(500)
    const info = await (await fetch(`${serve.url}/v1/info`)).json() as { clock: string }
    expect(info.clock).toBe("untrusted")
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
    expect(metrics).toMatch(/^attestd_clock_trusted 0$/m)
    expect(Number(/^attestd_clock_offset_seconds (\S+)$/m.exec(metrics)?.[1])).toBeGreaterThan(9.5)
    const attested = await fetch(`${serve.url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: randomHex32() })
    })
    expect(attested.status).toBe(201)
  }, 90_000)

  it("a malformed ATTESTD_NTP_SERVERS stops serve at start, naming the variable, the flag and the entry", async () => {
    const env = await envOf({ ATTESTD_NTP_SERVERS: "time.example,time2.example:123456" })
    const r = await runCli(env, ["serve"])
    expect(r.code).toBe(2)
    expect(r.stderr.trim()).toBe(
      "attestd: invalid configuration: ATTESTD_NTP_SERVERS (--ntp-servers): expected comma-separated host[:port], time2.example:123456: the port must be 1..65535"
    )
  }, 60_000)
})
