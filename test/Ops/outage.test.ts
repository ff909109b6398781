/**
 * A Postgres outage as clients see it (CONTRACT §7): attestd on a throwaway cluster of
 * its own (`pg_createcluster` on a free port, dropped at the end), the cluster stopped:
 * attest, verify and health answer 503 SERVICE_UNAVAILABLE with Retry-After, at once,
 * never a 500; the cluster started again: the same instance answers again without a
 * restart, an attest acknowledged before is there, and one refused during the outage
 * was not half-written. Under CI=true the cluster tools must be there.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createKeyCli, freePort, postIdempotent, randomHex32, type ServeEnv, type ServeProcess, startServe } from "../helpers/process.js"

const CREATE = "/usr/bin/pg_createcluster"
const available = existsSync(CREATE)
if (!available && process.env.CI === "true") throw new Error(`CI=true but ${CREATE} is missing`)

const version = (): string => execFileSync("pg_config", ["--version"], { encoding: "utf8" }).match(/PostgreSQL (\d+)/)![1]!

describe.skipIf(!available)("Postgres outage (a throwaway cluster)", () => {
  const name = `attestd_outage_${process.pid}`
  let major = ""
  let env: ServeEnv
  let serve: ServeProcess | undefined
  let dataDir = ""
  const cluster = (action: "start" | "stop") =>
    execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", major, name, action, ...(action === "stop" ? ["-m", "fast"] : [])], { stdio: "ignore" })

  beforeAll(async () => {
    major = version()
    const port = await freePort()
    execFileSync(CREATE, [major, name, "-p", String(port), "--", "--auth=trust"], { stdio: "ignore" })
    cluster("start")
    dataDir = mkdtempSync(join(tmpdir(), "attestd-outage-"))
    env = { databaseUrl: `postgres://postgres@127.0.0.1:${port}/postgres`, dataDir, port: await freePort() }
  }, 120_000)

  afterAll(async () => {
    await serve?.kill("SIGKILL")
    try {
      execFileSync("pg_dropcluster", ["--stop", major, name], { stdio: "ignore" })
    } catch {
      // already gone
    }
    rmSync(dataDir, { recursive: true, force: true })
  })

  it("answers 503 with Retry-After while the database is down, and recovers by itself", async () => {
    const key = await createKeyCli(env, "attest")
    serve = await startServe(env)
    const attest = (hash: string) =>
      postIdempotent(`${serve!.url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex: hash }),
        signal: AbortSignal.timeout(15_000)
      })
    const verify = (hash: string) =>
      postIdempotent(`${serve!.url}/v1/verify`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ hash_hex: hash }),
        signal: AbortSignal.timeout(15_000)
      })
    const before = randomHex32()
    expect((await attest(before)).status).toBe(201)

    cluster("stop")
    const during = randomHex32()
    for (const res of [await attest(during), await verify(before)]) {
      expect(res.status).toBe(503)
      expect(res.headers.get("retry-after")).toBe("5")
      expect(await res.json()).toMatchObject({ error: true, code: "SERVICE_UNAVAILABLE" })
    }
    const health = await fetch(`${serve.url}/v1/healthz`, { signal: AbortSignal.timeout(15_000) })
    expect(health.status).toBe(503)

    cluster("start")
    let back = 0
    for (let i = 0; i < 100 && back !== 200; i++) {
      back = (await fetch(`${serve.url}/v1/healthz`, { signal: AbortSignal.timeout(15_000) })).status
      if (back !== 200) await new Promise((r) => setTimeout(r, 100))
    }
    expect(back).toBe(200)
    expect(await (await verify(before)).json()).toMatchObject({ exists: true, hash_hex: before })
    // refused during the outage, so not stored: attesting it now creates it
    expect(await (await verify(during)).json()).toMatchObject({ exists: false })
    expect((await attest(during)).status).toBe(201)
    expect(serve.output()).not.toContain("INTERNAL_ERROR")
  }, 120_000)
})
