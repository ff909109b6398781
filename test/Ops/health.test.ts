/**
 * Health that tells the truth (issue 42, finding 5). A real `attestd serve` whose TSA is
 * down for three seal windows (ATTESTD_SEAL_INTERVAL=1s, the TSA URL a closed port):
 * GET /v1/healthz stays 200 but says `degraded`, its `sealing` check names the reason
 * and since when, and the metric attestd_worker_degraded{worker="sealing"} is 1.
 * Production mode refuses to start without ATTESTD_TSA_CA_FILE (T1 tokens must be
 * validated against trust anchors): in the configuration and as a process.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ConfigProvider, Effect, Either } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { appConfig } from "../../src/Platform/Config.js"
import { BIN, createKeyCli, freePort, randomHex32, requireDist, type ServeEnv, type ServeProcess, startServe, waitFor } from "../helpers/process.js"

const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/

describe("healthz degraded while sealing fails (sqlite)", () => {
  const dirs: Array<string> = []
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    for (const p of procs) await p.kill("SIGKILL")
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  it("a TSA down for three seal windows: healthz 200 degraded with reason and since; the gauge is 1", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "attestd-health-"))
    dirs.push(dataDir)
    const metricsPort = await freePort()
    const env: ServeEnv = {
      databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`,
      dataDir,
      port: await freePort(),
      sealInterval: "1s",
      extra: { ATTESTD_TSA_URL: `http://127.0.0.1:${await freePort()}/tsa`, ATTESTD_METRICS_PORT: String(metricsPort) }
    }
    const key = await createKeyCli(env)
    const serve = await startServe(env)
    procs.push(serve)
    const before = await (await fetch(`${serve.url}/v1/healthz`)).json() as { status: string; checks: Record<string, unknown> }
    expect(before).toMatchObject({ status: "ok", checks: { sealing: "ok" } })
    const attested = await fetch(`${serve.url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: randomHex32() })
    })
    expect(attested.status).toBe(201)
    const started = Date.now()

    const degraded = await waitFor("healthz degraded", async () => {
      const res = await fetch(`${serve.url}/v1/healthz`)
      const body = await res.json() as { status: string; checks: Record<string, unknown> }
      return body.status === "degraded" ? { status: res.status, body } : undefined
    }, 20_000, 200)
    // not at the first failure: only once it has lasted past two windows
    expect(Date.now() - started).toBeGreaterThan(2_000)
    expect(degraded.status).toBe(200)
    const sealing = degraded.body.checks.sealing as { status: string; reason: string; since: string }
    expect(sealing.status).toBe("degraded")
    expect(sealing.reason).toMatch(/TSA/)
    expect(sealing.since).toMatch(WIRE_TIME)
    expect(degraded.body.checks).toMatchObject({ database: "ok", signer: "ok" })

    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
    expect(metrics).toMatch(/^attestd_worker_degraded\{worker="sealing"\} 1$/m)
  }, 90_000)
})

describe("production needs TSA trust anchors", () => {
  const dirs: Array<string> = []
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })
  const load = (env: Record<string, string>) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))
  const PRODUCTION = {
    ATTESTD_MODE: "production",
    ATTESTD_TSA_URL: "https://tsa.example/tsr",
    ATTESTD_OTS_CALENDARS: "https://cal.example",
    ATTESTD_BITCOIN_SOURCES: "https://blockstream.info/api"
  }

  it("the configuration is refused without ATTESTD_TSA_CA_FILE and accepted with it", () => {
    const missing = load(PRODUCTION)
    expect(Either.isLeft(missing)).toBe(true)
    expect(String(Either.isLeft(missing) ? missing.left : "")).toMatch(/ATTESTD_TSA_CA_FILE/)
    const ok = load({ ...PRODUCTION, ATTESTD_TSA_CA_FILE: "/etc/attestd/tsa-ca.pem" })
    expect(Either.isRight(ok)).toBe(true)
    expect(Either.isRight(load({}))).toBe(true) // demo: its own TSA and root
  })

  it("`attestd serve` in production without ATTESTD_TSA_CA_FILE exits non-zero naming it", async () => {
    requireDist()
    const dir = mkdtempSync(join(tmpdir(), "attestd-noca-"))
    dirs.push(dir)
    const env: NodeJS.ProcessEnv = { ...process.env }
    for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
    const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile(process.execPath, [BIN, "serve"], {
        cwd: dir,
        env: { ...env, ...PRODUCTION, ATTESTD_DATA_DIR: dir, PORT: "0", NODE_OPTIONS: "" },
        timeout: 60_000
      }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, out: stdout + stderr }))
    })
    expect(result.code).not.toBe(0)
    expect(result.out).toMatch(/ATTESTD_TSA_CA_FILE/)
  }, 90_000)
})
