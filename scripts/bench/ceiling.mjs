// The ceiling section: attest-new against scripts/bench/ceiling-server.mjs (the work
// attestd must do, by hand, with no framework) on each store, in the same run as the
// bare POST and attestd, so the report can put each attest-new target beside what
// this machine reaches for that work at all.
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { SCENARIOS } from "./http.mjs"
import { attestdEnv, createApiKey, createPgDatabase, dropPgDatabase, freePort, ROOT, runLoad, startNode, waitHealthy } from "./lib.mjs"

export const benchCeiling = async ({ stores = ["sqlite", "pg"], load, log = console.log }) => {
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
      const spec = SCENARIOS["attest-new"]
      log(`  ceiling ${db} attest-new: the same work by a hand-written server (scripts/bench/ceiling-server.mjs) …`)
      const result = await runLoad({ ...load, url, request: spec.request({ key }), serverPid: server.pid, postgres: db === "pg", title: `ceiling ${db} attest-new` })
      log(`    ${Math.round(result.rps)} req/s, p50 ${result.p50} ms, p99 ${result.p99} ms, server ${result.serverCpuUsPerReq?.toFixed(0)} µs CPU/req`)
      out.push({ server: "ceiling", db, scenario: "attest-new", describe: "the same work, hand-written", baseline: spec.baseline, target: null, ...result })
    } finally {
      await server?.stop()
      rmSync(dir, { recursive: true, force: true })
      if (db === "pg") await dropPgDatabase(dbName).catch((e) => log(`  could not drop ${dbName}: ${e.message}`))
    }
  }
  return out
}
