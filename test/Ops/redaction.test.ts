/**
 * Credentials in configured URLs stay out of everything the service shows (issue 42,
 * finding 2). A real `attestd serve` with a secret in each of ATTESTD_TSA_URL (userinfo
 * and query), ATTESTD_OTS_CALENDARS (userinfo and query) and ATTESTD_BITCOIN_SOURCES
 * (query), the TSA unreachable so sealing fails and logs: neither /v1/info, /v1/healthz,
 * the log lines nor the /metrics output holds a secret; they show the URLs redacted.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { createKeyCli, freePort, randomHex32, type ServeEnv, type ServeProcess, startServe, waitFor } from "../helpers/process.js"

describe("configured URLs are shown redacted (sqlite)", () => {
  const dirs: Array<string> = []
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    for (const p of procs) await p.kill("SIGKILL")
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  it("info, healthz, logs and metrics hold no secret of the TSA, calendar or Bitcoin source URLs", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "attestd-redact-"))
    dirs.push(dataDir)
    const dead = await freePort() // nothing listens there: every TSA request fails
    const metricsPort = await freePort()
    const secrets = {
      tsaUser: `tsauser${randomHex32().slice(0, 8)}`,
      tsaPass: `tsapass${randomHex32().slice(0, 12)}`,
      tsaKey: `tsakey${randomHex32().slice(0, 12)}`,
      calPass: `calpass${randomHex32().slice(0, 12)}`,
      calKey: `calkey${randomHex32().slice(0, 12)}`,
      btcToken: `btctoken${randomHex32().slice(0, 12)}`
    }
    const env: ServeEnv = {
      databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`,
      dataDir,
      port: await freePort(),
      sealInterval: "1s",
      extra: {
        ATTESTD_TSA_URL: `http://${secrets.tsaUser}:${secrets.tsaPass}@127.0.0.1:${dead}/tsa?apikey=${secrets.tsaKey}`,
        ATTESTD_OTS_CALENDARS: `http://cal:${secrets.calPass}@127.0.0.1:${dead}/cal?key=${secrets.calKey}`,
        ATTESTD_BITCOIN_SOURCES: `http://127.0.0.1:${dead}/api?token=${secrets.btcToken}`,
        ATTESTD_METRICS_PORT: String(metricsPort)
      }
    }
    const key = await createKeyCli(env)
    const serve = await startServe(env)
    procs.push(serve)
    const attested = await fetch(`${serve.url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: randomHex32() })
    })
    expect(attested.status).toBe(201)
    // the sealer asks the dead TSA at the next window and logs the failure
    await waitFor("a failed seal in the log", () => /sealing failed/.test(serve.output()), 20_000)

    const info = await (await fetch(`${serve.url}/v1/info`)).text()
    const healthz = await (await fetch(`${serve.url}/v1/healthz`)).text()
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
    const logs = serve.output()
    for (const [where, text] of Object.entries({ info, healthz, metrics, logs })) {
      for (const [name, secret] of Object.entries(secrets)) {
        expect(text.includes(secret), `${name} in ${where}`).toBe(false)
      }
    }
    // what is shown instead
    const tiers = (JSON.parse(info) as { tiers: { T1: { tsa_provider: string }; T2: { calendars: Array<string>; bitcoin: { sources: Array<string> } } } }).tiers
    expect(tiers.T1.tsa_provider).toBe(`http://127.0.0.1:${dead}/tsa?redacted`)
    expect(tiers.T2.calendars).toEqual([`http://127.0.0.1:${dead}/cal?redacted`])
    expect(tiers.T2.bitcoin.sources).toEqual([`http://127.0.0.1:${dead}/api?redacted`])
    expect(logs).toContain(`http://127.0.0.1:${dead}/tsa?redacted`)
    expect(metrics).toContain(`tsa="http://127.0.0.1:${dead}/tsa?redacted"`)
  }, 90_000)
})
