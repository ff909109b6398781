// Webhook delivery benchmark (BENCH_ONLY=webhooks): outbox fan-out and delivery throughput
// to a local receiver, on SQLite and Postgres.
//
//   BENCH_ONLY=webhooks node scripts/bench.mjs        (or: node scripts/bench/webhooks.mjs)
//
// Per store and size N: a fresh database; a node:http receiver in a child process on
// 127.0.0.1 answering 204 (so it does not share the dispatcher's event loop); one API key
// (ApiKeyRepo.create) with BENCH_WEBHOOK_HOOKS (1) webhooks for t1_complete (WebhookRepo.create,
// http://127.0.0.1 is allowed in demo mode); N hashes attested with Attestor.attest (500 per
// call) and sealed with Sealer.sealWindow, which writes N t1_complete outbox rows. Then, timed:
// WebhookDispatcher.fanOutOnce (outbox → N × hooks deliveries), then the production loop
// (WebhookDispatcher.run, which claims free slots again as attempts end, within the fair-claiming
// caps: 16 in flight per webhook and per key) until every delivery is recorded as succeeded.
// Checked: the receiver saw every delivery, and no delivery is left pending/retrying/failed.
// The dispatcher under test is built over a WebhookRepo wrapped in timers: Σ ms per repo call
// (calls overlap on Postgres, whose pool has 10 connections; SQLite has one connection) show
// where the send time goes.
//
// Environment: BENCH_WEBHOOK_SIZES (5000), BENCH_WEBHOOK_HOOKS (1), BENCH_WEBHOOK_STORES (sqlite,pg);
// BENCH_WEBHOOK_EXTRA_SQL (diagnosis only: ;-separated SQL run on the benchmark database before dispatching).
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { envInt, envList, runAsScript, table } from "./lib.mjs"
import { defaultDist, directDb, distImport, fmt, makeRuntime, openStore, quietWait, timedEffect, timedSqlLayer } from "./seal.mjs"

const RECEIVER_SRC = `
const http = require("node:http")
let n = 0
const srv = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/__count") {
    res.writeHead(200, { "content-type": "application/json" })
    return res.end(JSON.stringify({ n }))
  }
  req.resume()
  req.on("end", () => { n++; res.writeHead(204); res.end() })
})
srv.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: srv.address().port })))
process.on("SIGTERM", () => process.exit(0))
`

const startReceiver = () =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["-e", RECEIVER_SRC], { stdio: ["ignore", "pipe", "inherit"] })
    let buf = ""
    const onData = (b) => {
      buf += b
      const line = buf.split("\n").find((l) => l.startsWith("{"))
      if (!line) return
      child.stdout.off("data", onData)
      const { port } = JSON.parse(line)
      const url = `http://127.0.0.1:${port}`
      resolve({
        url,
        pid: child.pid,
        count: async () => (await (await fetch(`${url}/__count`)).json()).n,
        stop: () =>
          new Promise((r) => {
            if (child.exitCode !== null) return r()
            child.once("exit", () => r())
            child.kill("SIGTERM")
          })
      })
    }
    child.stdout.on("data", onData)
    child.once("exit", (code) => reject(new Error(`receiver exited ${code}`)))
    child.once("error", reject)
  })

const benchOne = async ({ dist, kind, events, hooks, log }) => {
  const { Effect, Fiber, Layer } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const { ApiKeyRepo } = await distImport(dist, "Auth/ApiKeyRepo.js")
  const { Attestor } = await distImport(dist, "Attestations/Attestor.js")
  const { Sealer } = await distImport(dist, "Sealing/Sealer.js")
  const { WebhookRepo } = await distImport(dist, "Webhooks/Repo.js")
  const { WebhookDispatcher } = await distImport(dist, "Webhooks/Dispatcher.js")
  const { newSigningSecret, newWebhookId } = await distImport(dist, "Webhooks/Domain.js")
  const { cpuMeter } = await import("./lib.mjs")

  const store = await openStore({ kind, section: "webhooks", dist })
  const receiver = await startReceiver()
  let runtime
  try {
    runtime = await makeRuntime(store, dist, {})
    const run = (eff) => runtime.runPromise(eff)

    // key, webhooks, attestations, seal
    const created = await run(Effect.flatMap(ApiKeyRepo, (r) =>
      r.create({ label: "bench-webhooks", scopes: ["attest", "webhook"], orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })))
    const key = {
      id: created.id,
      label: "bench-webhooks",
      scopes: ["attest", "webhook"],
      orgId: null,
      env: null,
      allowIps: null,
      rateLimit: null,
      monthlyQuota: null,
      createdAt: created.createdAt,
      revokedAt: null,
      keyHash: ""
    }
    for (let h = 0; h < hooks; h++) {
      await run(Effect.flatMap(WebhookRepo, (r) =>
        r.create({
          id: newWebhookId(),
          apiKeyId: key.id,
          url: `${receiver.url}/hook/${h}`,
          events: ["t1_complete"],
          label: `bench ${h}`,
          failureCount: 0,
          createdAt: created.createdAt,
          signingSecret: newSigningSecret()
        })))
    }
    let t0 = performance.now()
    for (let i = 0; i < events; i += 500) {
      const hashes = Array.from({ length: Math.min(500, events - i) }, () => randomBytes(32).toString("hex"))
      await run(Effect.flatMap(Attestor, (a) => a.attest({ key, hashes, source: null, extraData: null, clientEncrypted: false })))
    }
    const attestMs = performance.now() - t0
    const sealed = await run(Effect.flatMap(Sealer, (s) => s.sealWindow(Date.now() + 1)))
    if (sealed._tag !== "Sealed" || sealed.leaves !== events) throw new Error(`seal: ${JSON.stringify(sealed)}`)
    log(`  ${kind} ${events.toLocaleString("en-US")}: attested in ${(attestMs / 1000).toFixed(1)} s and sealed; dispatching`)

    // the dispatcher under test, over a timed repo
    const marks = {}
    const calls = {}
    const items = {}
    const T = (name, eff, n = 1) => {
      calls[name] = (calls[name] ?? 0) + 1
      items[name] = (items[name] ?? 0) + n
      return timedEffect(Effect, marks, name, eff)
    }
    const repo = Layer.effect(WebhookRepo, Effect.map(WebhookRepo, (r) => ({
      ...r,
      fanOut: (...a) => T("fanOut", r.fanOut(...a)),
      claimDue: (...a) => T("claimDue", r.claimDue(...a)),
      attestationFacts: (seqs) => T("attestationFacts", r.attestationFacts(seqs), seqs.length),
      setBodies: (bodies) => T("setBodies", r.setBodies(bodies), bodies.length),
      recordAttempts: (records) => T("recordAttempts", r.recordAttempts(records), records.length)
    })))
    // the repo itself over a SqlClient proxy timing each statement (recordAttempts = UPDATEs + DELETE history per attempt)
    const stmts = {}
    const dispatcherLayer = WebhookDispatcher.DefaultWithoutDependencies.pipe(Layer.provide(repo.pipe(Layer.provide(WebhookRepo.Default.pipe(Layer.provide(await timedSqlLayer(stmts, 2)))))))

    // What-if knob (diagnosis only): extra SQL on the benchmark database before dispatching, e.g. an index.
    if (process.env.BENCH_WEBHOOK_EXTRA_SQL) {
      const db = await directDb(store)
      try {
        for (const q of process.env.BENCH_WEBHOOK_EXTRA_SQL.split(";").map((x) => x.trim()).filter(Boolean)) await db.exec(q)
      } finally {
        await db.close()
      }
    }
    await quietWait(log)
    const cpu = cpuMeter({ serverPid: receiver.pid, postgres: kind === "pg" })
    const result = await run(
      Effect.gen(function*() {
        const d = yield* WebhookDispatcher
        const t1 = performance.now()
        const fanned = yield* d.fanOutOnce
        const fanOutMs = performance.now() - t1
        // the production loop, until no delivery is left unsucceeded (polled on the store's own
        // client, outside the timed layer)
        const sql = yield* SqlClient.SqlClient
        const t2 = performance.now()
        const loop = yield* Effect.fork(d.run)
        for (;;) {
          const [left] = yield* sql`SELECT COUNT(*) AS n FROM webhook_deliveries WHERE status <> 'succeeded'`
          if (Number(left.n) === 0) break
          yield* Effect.sleep("20 millis")
        }
        const sendMs = performance.now() - t2
        yield* Fiber.interrupt(loop)
        return { fanned, fanOutMs, sendMs, sent: items.recordAttempts ?? 0 }
      }).pipe(Effect.provide(dispatcherLayer))
    )
    const cpuUse = cpu()
    const received = await receiver.count()
    const db = await directDb(store)
    let left
    try {
      left = await db.query(`SELECT status, COUNT(*) AS n FROM webhook_deliveries GROUP BY status ORDER BY status`)
    } finally {
      await db.close()
    }
    const notDone = left.filter((r) => r.status !== "succeeded").reduce((a, r) => a + Number(r.n), 0)
    const expected = events * hooks
    if (result.fanned !== events) throw new Error(`fanOutOnce handled ${result.fanned} events, expected ${events}`)
    if (received !== expected || result.sent !== expected || notDone !== 0) {
      throw new Error(`deliveries: receiver saw ${received}, attempts ${result.sent}, expected ${expected}; left ${JSON.stringify(left)}`)
    }
    return {
      store: kind,
      events,
      hooks,
      deliveries: expected,
      ...result,
      totalMs: result.fanOutMs + result.sendMs,
      perSecond: expected / (result.sendMs / 1000),
      perSecondWithFanOut: expected / ((result.fanOutMs + result.sendMs) / 1000),
      repoMs: marks,
      statements: stmts,
      repoCalls: calls,
      cpu: cpuUse
    }
  } finally {
    await runtime?.dispose()
    await receiver.stop()
    await store.close()
  }
}

/** Runs the webhooks benchmark; returns { rows, text }. */
export async function benchWebhooks({
  sizes = envList("BENCH_WEBHOOK_SIZES", ["5000"]).map((s) => Number(s.replace(/_/g, ""))),
  hooks = envInt("BENCH_WEBHOOK_HOOKS", 1),
  stores = envList("BENCH_WEBHOOK_STORES", ["sqlite", "pg"]),
  dist = defaultDist(),
  log = console.log
} = {}) {
  const rows = []
  for (const kind of stores) {
    for (const events of sizes) {
      const r = await benchOne({ dist, kind, events, hooks, log })
      rows.push(r)
      log(`  ${kind} ${events.toLocaleString("en-US")}: fan-out ${fmt(r.fanOutMs)} ms, send ${fmt(r.sendMs)} ms → ${fmt(r.perSecond)} deliveries/s`)
    }
  }
  // the seals above may have started the Merkle worker thread in this process
  await (await distImport(dist, "Sealing/MerkleBuilder.js")).terminateMerkleWorker?.()
  return { rows, text: formatWebhooks(rows) }
}

export const formatWebhooks = (rows) => {
  const ops = ["claimDue", "attestationFacts", "setBodies", "recordAttempts"]
  const lines = [
    table(
      ["store", "deliveries", "fan-out ms", "send ms", "deliv/s", "incl. fan-out", "claims", "body txns", "attempt txns", ...ops.map((o) => `Σ ${o}`), "cpu% self/recv/pg/other"],
      rows.map((r) => [
        r.store,
        `${r.deliveries.toLocaleString("en-US")}${r.hooks > 1 ? ` (${r.hooks} hooks)` : ""}`,
        fmt(r.fanOutMs),
        fmt(r.sendMs),
        fmt(r.perSecond),
        fmt(r.perSecondWithFanOut),
        r.repoCalls.claimDue ?? 0,
        r.repoCalls.setBodies ?? 0,
        r.repoCalls.recordAttempts ?? 0,
        ...ops.map((o) => fmt(r.repoMs[o])),
        `${r.cpu.loadgen}/${r.cpu.server}/${r.cpu.postgres ?? "-"}/${r.cpu.others}`
      ]),
      { right: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] }
    ),
    "",
    "deliv/s = deliveries ÷ send ms (WebhookDispatcher.run until every delivery succeeded); incl. fan-out also counts fanOutOnce; claims = claimDue calls;",
    "body txns / attempt txns = transactions of setBodies / recordAttempts (attempts that start or end together share one).",
    "Σ op: summed duration of that WebhookRepo call over the run (up to 16 in flight, so on Postgres the sums overlap)."
  ]
  // statements by their first two words; claimDue runs its candidates query itself on SQLite
  // ("WITH busy") and as the subquery of a locking SELECT on Postgres ("SELECT d.*")
  const S = [
    [["UPDATE webhook_deliveries"], "UPDATE (body, lease, attempt)"],
    [["DELETE FROM"], "DELETE history (recordAttempts)"],
    [["WITH busy", "SELECT d.*"], "SELECT due (claimDue)"],
    [["SELECT a.seq,"], "SELECT facts"]
  ]
  const msOf = (statements, labels) => labels.reduce((sum, l) => sum + (statements[l] ?? 0), 0)
  lines.push("")
  lines.push("by statement, Σ ms over the run (mean µs per delivery):")
  lines.push(table(
    ["store", "deliveries", ...S.map(([, h]) => h)],
    rows.map((r) => [r.store, r.deliveries.toLocaleString("en-US"), ...S.map(([labels]) => `${fmt(msOf(r.statements, labels))} (${fmt((1000 * msOf(r.statements, labels)) / r.deliveries)})`)]),
    { right: [1, 2, 3, 4, 5] }
  ))
  return lines.join("\n")
}

runAsScript(import.meta.url, benchWebhooks)
