// The ceiling section: attest-new and verify against scripts/bench/ceiling-server.mjs
// (the work attestd must do, by hand, with no framework) on each store, in the same
// run as the bare POST and attestd, so the report can put each target beside what
// this machine reaches for that work at all.
import { createPublicKey, verify } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { SCENARIOS } from "./http.mjs"
import { analyzePg, attestdEnv, createApiKey, createPgDatabase, dropPgDatabase, freePort, randomHashHex, ROOT, runLoad, startNode, waitHealthy } from "./lib.mjs"

/**
 * The ceiling server's own attests of `hashes` (it has no batch route), 50 at a time, each
 * signature checked against its public key: a wrong signer must not be timed.
 */
const seed = async (url, key, hashes) => {
  const publicKey = createPublicKey({ key: await (await fetch(`${url}/v1/public-key`)).json(), format: "jwk" })
  for (let i = 0; i < hashes.length; i += 50) {
    await Promise.all(hashes.slice(i, i + 50).map(async (hash_hex) => {
      const res = await fetch(`${url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex })
      })
      if (res.status !== 201) throw new Error(`ceiling seed: ${res.status} ${await res.text()}`)
      const a = await res.json()
      const payload = Buffer.from(`2.0.0|${hash_hex}|${a.timestamp}`)
      if (!verify("sha256", payload, { key: publicKey, dsaEncoding: "der" }, Buffer.from(a.signature, "base64"))) {
        throw new Error(`ceiling seed: the signature of ${hash_hex} does not verify`)
      }
    }))
  }
}

export const CEILING_SCENARIOS = ["attest-new", "verify"]

export const benchCeiling = async ({ stores = ["sqlite", "pg"], scenarios = CEILING_SCENARIOS, seedCount = 1000, load, log = console.log }) => {
  const out = []
  for (const db of stores) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "attestd-ceiling-"))
    const dbName = `attestd_bench_ceiling_${process.pid}`
    const databaseUrl = db === "pg" ? await createPgDatabase(dbName) : `sqlite:${path.join(dir, "attestd.db")}`
    let server
    try {
      // the service's schema and an API key: `attestd keys create` migrates the database first
      const key = await createApiKey({ env: attestdEnv({ databaseUrl, dataDir: dir }) })
      const port = await freePort()
      server = startNode({
        name: `ceiling-${db}`,
        script: path.join(ROOT, "scripts/bench/ceiling-server.mjs"),
        env: { PORT: String(port), HOST: "127.0.0.1", DATABASE_URL: databaseUrl }
      })
      const url = `http://127.0.0.1:${port}`
      await waitHealthy(server, `${url}/v1/healthz`)
      const existing = Array.from({ length: seedCount }, randomHashHex)
      await seed(url, key, existing)
      for (const scenario of scenarios) {
        if (db === "pg") await analyzePg(databaseUrl)
        const spec = SCENARIOS[scenario]
        log(`  ceiling ${db} ${scenario}: the same work by a hand-written server (scripts/bench/ceiling-server.mjs) …`)
        const result = await runLoad({ ...load, url, request: spec.request({ key, existing }), serverPid: server.pid, postgres: db === "pg", title: `ceiling ${db} ${scenario}` })
        log(`    ${Math.round(result.rps)} req/s, p50 ${result.p50} ms, p99 ${result.p99} ms, server ${result.serverCpuUsPerReq?.toFixed(0)} µs CPU/req`)
        out.push({ server: `ceiling-${db}`, db, scenario, describe: "the same work, hand-written", baseline: spec.baseline, target: null, ...result })
      }
    } finally {
      await server?.stop()
      rmSync(dir, { recursive: true, force: true })
      if (db === "pg") await dropPgDatabase(dbName).catch((e) => log(`  could not drop ${dbName}: ${e.message}`))
    }
  }
  return out
}
