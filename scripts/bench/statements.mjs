// What SQLite itself costs a request, measured inside a running server: the server
// runs with scripts/bench/sqlite-statements.cjs preloaded, which times every
// better-sqlite3 call on the event loop. For each scenario (attest-new, verify by
// default) it sends BENCH_STATEMENTS_REQUESTS requests over BENCH_CONNECTIONS and
// reports, per statement, how many each request ran and how long they held the
// event loop, plus the COMMITs' percentiles. better-sqlite3 is synchronous: this time
// is time the event loop serves nothing else, so it bounds what a scenario's req/s
// can be, whatever the rest of the server costs (README, Performance).
import { rmSync } from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { SCENARIOS } from "./http.mjs"
import autocannon from "autocannon"
import { quantile } from "./stats.mjs"
import { createApiKey, randomHashHex, seedHashes, signalForJson, startAttestd, table } from "./lib.mjs"

const PRELOAD = path.join(path.dirname(fileURLToPath(import.meta.url)), "sqlite-statements.cjs")
const snapshot = (server, out) => signalForJson(server.pid, "SIGUSR2", out, { what: "statement tally", timeoutMs: 2_000 })


export const benchStatements = async ({ scenarios = ["attest-new", "verify"], requests = 15_000, connections = 50, seed = 1000, log = console.log }) => {
  const out = path.join(process.env.TMPDIR ?? "/tmp", `attestd-statements-${process.pid}.json`)
  const server = await startAttestd({ name: "attestd-statements", nodeArgs: ["--require", PRELOAD], env: { BENCH_STATEMENTS_OUT: out } })
  const rows = []
  try {
    const key = await createApiKey({ env: server.env })
    const existing = Array.from({ length: seed }, randomHashHex)
    await seedHashes(server.url, key, existing)
    for (const scenario of scenarios) {
      const spec = SCENARIOS[scenario]
      if (spec?.server !== "attestd") throw new Error(`unknown attestd scenario ${scenario}`)
      const before = await snapshot(server, out)
      const r = await autocannon({ url: server.url, connections, amount: requests, timeout: 10, requests: [spec.request({ key, existing })] })
      const after = await snapshot(server, out)
      const was = new Map(before.statements.map((s) => [s.sql, s]))
      const total = r.requests.total
      const statements = after.statements
        .map((s) => ({ sql: s.sql, n: s.n - (was.get(s.sql)?.n ?? 0), us: s.us - (was.get(s.sql)?.us ?? 0) }))
        .filter((s) => s.n > 0)
        .sort((a, b) => b.us - a.us)
      const commits = after.commits.slice(before.commits.length).sort((a, b) => a - b)
      const usPerRequest = statements.reduce((a, s) => a + s.us, 0) / total
      log(`  ${scenario}: ${total} requests (${r.non2xx} non-2xx), SQLite held the event loop ${usPerRequest.toFixed(1)} µs per request`)
      log(table(
        ["statement", "per req", "µs each", "µs/req"],
        statements.slice(0, 8).map((s) => [s.sql.slice(0, 70), (s.n / total).toFixed(3), (s.us / s.n).toFixed(0), (s.us / total).toFixed(1)]),
        { right: [1, 2, 3] }
      ).split("\n").map((l) => `    ${l}`).join("\n"))
      if (commits.length > 0) {
        const q = (x) => quantile(commits, x).toFixed(0)
        log(`    COMMIT µs (${commits.length}): p50 ${q(0.5)}, p90 ${q(0.9)}, p99 ${q(0.99)}, max ${q(1)}; ${(total / commits.length).toFixed(1)} requests per commit`)
      }
      rows.push({ scenario, requests: total, non2xx: r.non2xx, usPerRequest, statements, commitsUs: commits.length > 0 ? { n: commits.length, p50: quantile(commits, 0.5), p90: quantile(commits, 0.9), p99: quantile(commits, 0.99), max: commits.at(-1) } : null })
    }
  } finally {
    await server.stop()
    rmSync(out, { force: true })
  }
  return { rows }
}
