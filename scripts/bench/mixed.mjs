// A mixed workload: attest-new and verify against one server at the same time,
// as a service meets them (writers committing batches while readers verify). Two
// load generators run together: BENCH_MIXED_ATTEST connections (40) attesting
// fresh hashes and BENCH_MIXED_VERIFY connections (10) verifying pre-attested
// ones. Reports each workload's req/s and latency, and the server's CPU per
// request of both together. The single-workload scenarios cannot show how one
// workload slows the other: e.g. a COMMIT's fsync on the event loop delays every
// verify behind it, and moving it to a thread (tried: README, Performance) adds
// round trips to every transaction.
import { SCENARIOS, withSeededAttestd } from "./http.mjs"
import { runLoad, table } from "./lib.mjs"

export const benchMixed = async ({ stores = ["sqlite"], attestConnections = 40, verifyConnections = 10, duration = 10, warmup = 2, seed = 1000, quietWaitMs = 0, log = console.log }) => {
  const out = []
  for (const db of stores) {
    out.push(await withSeededAttestd({ db, label: `${db}-mixed`, seed, log }, async (server, ctx) => {
      log(`  ${db}: ${attestConnections} connections attesting fresh hashes and ${verifyConnections} verifying, at once, ${duration} s …`)
      const [attest, verify] = await Promise.all([
        runLoad({ url: server.url, request: SCENARIOS["attest-new"].request(ctx), duration, warmup, connections: attestConnections, serverPid: server.pid, metricsUrl: server.metricsUrl, postgres: db === "pg", title: `${db} mixed attest-new`, quietWaitMs }),
        runLoad({ url: server.url, request: SCENARIOS.verify.request(ctx), duration, warmup, connections: verifyConnections, title: `${db} mixed verify` })
      ])
      const both = attest.rps + verify.rps
      const serverCpuUsPerReq = attest.cpu.server === undefined ? undefined : (attest.cpu.server / 100) * 1e6 / both
      return { db, attest, verify, serverCpuUsPerReq }
    }))
  }
  const bad = out.filter((r) => r.attest.non2xx + r.attest.errors + r.verify.non2xx + r.verify.errors > 0)
  if (bad.length > 0) throw new Error(`mixed: answers that were not 2xx on ${bad.map((r) => r.db).join(", ")}`)
  log(table(
    ["store", "attest-new req/s", "p50 ms", "p99 ms", "verify req/s", "p50 ms", "p99 ms", "srv µs/req (both)", "loop%"],
    out.map((r) => [r.db, r.attest.rps.toFixed(0), r.attest.p50, r.attest.p99, r.verify.rps.toFixed(0), r.verify.p50, r.verify.p99, r.serverCpuUsPerReq?.toFixed(0) ?? "-", r.attest.loopBusy === undefined ? "-" : (100 * r.attest.loopBusy).toFixed(0)]),
    { right: [1, 2, 3, 4, 5, 6, 7, 8] }
  ))
  return out.map(({ db, attest, verify, serverCpuUsPerReq }) => ({
    db,
    serverCpuUsPerReq,
    loopBusy: attest.loopBusy,
    attest: { rps: attest.rps, p50: attest.p50, p99: attest.p99, connections: attestConnections },
    verify: { rps: verify.rps, p50: verify.p50, p99: verify.p99, connections: verifyConnections }
  }))
}
