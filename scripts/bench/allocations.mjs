// Bytes allocated per request, by allocating function, inside a running server on
// SQLite (or Postgres, db "pg": BENCH_ALLOCATIONS_DB=pg): the server runs with scripts/bench/heap-sampling.cjs preloaded (V8's
// sampling heap profiler, every 256 bytes on average, counting objects already
// collected). For each scenario it warms the server with BENCH_ALLOCATIONS_REQUESTS
// requests, samples over as many more, and reports the total and the top sites.
// Garbage collection follows allocation: in a verify's CPU profile the collector is
// ~18% of the event loop (README, Performance).
import autocannon from "autocannon"
import { rmSync } from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { SCENARIOS } from "./http.mjs"
import { createApiKey, createPgDatabase, dropPgDatabase, randomHashHex, seedHashes, signalForJson, sleep, startAttestd, table } from "./lib.mjs"

const PRELOAD = path.join(path.dirname(fileURLToPath(import.meta.url)), "heap-sampling.cjs")

export const benchAllocations = async ({ scenarios = ["verify", "attest-new"], db = "sqlite", requests = 20_000, connections = 50, seed = 1000, top = 15, log = console.log }) => {
  const rows = []
  for (const scenario of scenarios) {
    const spec = SCENARIOS[scenario]
    if (spec?.server !== "attestd") throw new Error(`unknown attestd scenario ${scenario}`)
    const out = path.join(process.env.TMPDIR ?? "/tmp", `attestd-allocations-${process.pid}-${scenario}.json`)
    const pgName = db === "pg" ? `attestd_bench_${process.pid}_alloc` : undefined
    const databaseUrl = pgName ? await createPgDatabase(pgName) : undefined
    const server = await startAttestd({ name: "attestd-allocations", databaseUrl, nodeArgs: ["--require", PRELOAD], env: { BENCH_ALLOCATIONS_OUT: out } })
    try {
      const key = await createApiKey({ env: server.env })
      const existing = Array.from({ length: seed }, randomHashHex)
      await seedHashes(server.url, key, existing)
      const request = spec.request({ key, existing })
      await autocannon({ url: server.url, connections, amount: requests, timeout: 10, requests: [request] })
      process.kill(server.pid, "SIGUSR1")
      await sleep(200)
      const r = await autocannon({ url: server.url, connections, amount: requests, timeout: 10, requests: [request] })
      const sites = (await signalForJson(server.pid, "SIGUSR2", out, { what: "allocation tally", timeoutMs: 240_000 }))
        .sort((a, b) => b.bytes - a.bytes)
      const total = r.requests.total
      const bytes = sites.reduce((a, s) => a + s.bytes, 0)
      const what = process.env.BENCH_ALLOCATIONS_SURVIVORS === "1" ? "allocated and surviving a scavenge" : "allocated"
      log(`  ${db} ${scenario}: ${total} requests (${r.non2xx} non-2xx), ~${(bytes / total / 1024).toFixed(1)} KiB ${what} per request`)
      log(table(
        ["allocating function", "B/req", "%"],
        sites.slice(0, top).map((s) => [s.site.slice(0, 110), (s.bytes / total).toFixed(0), (100 * s.bytes / bytes).toFixed(1)]),
        { right: [1, 2] }
      ).split("\n").map((l) => `    ${l}`).join("\n"))
      rows.push({ db, scenario, requests: total, non2xx: r.non2xx, bytesPerRequest: bytes / total, top: sites.slice(0, top).map((s) => ({ site: s.site, bytesPerRequest: s.bytes / total })) })
    } finally {
      await server.stop()
      rmSync(out, { force: true })
      if (pgName) await dropPgDatabase(pgName)
    }
  }
  return { rows }
}
