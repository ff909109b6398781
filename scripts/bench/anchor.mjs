// T2 anchoring benchmark (BENCH_ONLY=anchor): the daily root over a day of batch roots,
// and the OpenTimestamps calendar round trip over loopback HTTP.
//
//   BENCH_ONLY=anchor node scripts/bench.mjs        (or: node scripts/bench/anchor.mjs)
//
// 1. tree: buildTree (what Anchorer uses) over BENCH_ANCHOR_BATCHES (1,440 = one per minute)
//    random batch roots; best and median of 50 builds.
// 2. anchorWindow: per store (sqlite, pg) and calendar (the in-process simulated "demo"
//    calendar, and the simulated calendar over HTTP as ATTESTD_OTS_CALENDARS), 1,440 fake
//    batches inserted by SQL into `batches`, then `Anchorer.anchorWindow(dayEnd)` end to end
//    through a ManagedRuntime over AppLive({ workers: false }); BENCH_ANCHOR_RUNS (3) runs,
//    the day reset by SQL in between. Breakdown from an Anchorer built over timed
//    AnchoringRepo / OtsCalendar: read (unanchoredBatches), write (createDailyRoot: one
//    transaction, one UPDATE per batch), reread (dailyRootById + submissions), submit
//    (calendar.submit + recordSubmitted, concurrent per calendar), rest (buildTree + glue).
// 3. calendar: makeHttpCalendar against startSimulatedCalendarServer() on 127.0.0.1,
//    BENCH_ANCHOR_CALLS (200) sequential calls each of submit, upgrade while pending (404)
//    and upgrade after mine() (200 + proof), after 20 warm-up submits; median / p99.
import { build } from "esbuild"
import { randomBytes } from "node:crypto"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { BENCH_DIR, envInt, envList, runAsScript, table } from "./lib.mjs"
import { defaultDist, directDb, distImport, fmt, makeRuntime, openStore, quietWait, timedEffect } from "./seal.mjs"
import { median, quantile } from "./stats.mjs"

const wire = (ms) => new Date(ms).toISOString().slice(0, 19) + "." + String((ms % 1000) * 1000).padStart(6, "0") + "+00:00"

const stats = (xs) => ({
  n: xs.length,
  median: median(xs),
  p99: quantile(xs, 0.99),
  mean: xs.reduce((a, b) => a + b, 0) / xs.length,
  min: Math.min(...xs),
  max: Math.max(...xs)
})

const insertBatches = async (store, count, dayEndMs) => {
  const db = await directDb(store)
  try {
    const rows = []
    for (let i = 0; i < count; i++) {
      const t = dayEndMs - (count - i) * 60_000
      rows.push([wire(t), randomBytes(32).toString("hex"), 1000, randomBytes(16), "bench", wire(t + 1000), wire(t + 2000)])
    }
    if (store.kind === "pg") {
      await db.exec("BEGIN")
      for (const r of rows) {
        await db.query(`INSERT INTO batches (window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at)
          VALUES ($1, $2, $3, $4, $5, $6, $7)`, r)
      }
      await db.exec("COMMIT")
      await db.exec("ANALYZE batches")
    } else {
      const ins = db.db.prepare(`INSERT INTO batches (window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at)
        VALUES (?, ?, ?, ?, ?, ?, ?)`)
      db.db.transaction(() => rows.forEach((r) => ins.run(...r)))()
    }
  } finally {
    await db.close()
  }
}

const resetDay = async (store) => {
  const db = await directDb(store)
  try {
    await db.exec("DELETE FROM calendar_submissions")
    await db.exec("DELETE FROM daily_roots")
    await db.exec("UPDATE batches SET daily_root_id = NULL, daily_leaf_index = NULL")
    if (store.kind === "pg") await db.exec("VACUUM ANALYZE batches")
  } finally {
    await db.close()
  }
}

const benchTree = async ({ dist, count }) => {
  const { buildTree } = await distImport(dist, "Sealing/MerkleBuilder.js")
  const roots = Array.from({ length: count }, () => randomBytes(32).toString("hex"))
  for (let i = 0; i < 10; i++) buildTree(roots)
  const runs = []
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now()
    buildTree(roots)
    runs.push(performance.now() - t0)
  }
  return { count, best: Math.min(...runs), median: median(runs) }
}

/**
 * The simulated calendar's HTTP server is a test helper (test/helpers/simulatedCalendarServer.ts),
 * not part of dist/; it is bundled once into .bench/ (packages stay external).
 */
let calendarServerModule
const loadCalendarServer = async () => {
  if (calendarServerModule) return calendarServerModule
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
  const outfile = path.join(BENCH_DIR, "simulatedCalendarServer.mjs")
  await build({
    entryPoints: [path.join(root, "test/helpers/simulatedCalendarServer.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    outfile,
    logLevel: "warning"
  })
  calendarServerModule = await import(outfile)
  return calendarServerModule
}

const benchAnchorWindow = async ({ dist, kind, calendarMode, count, runs, log }) => {
  const { Effect, Layer } = await import("effect")
  const { Anchorer } = await distImport(dist, "Anchoring/Anchorer.js")
  const { AnchoringRepo } = await distImport(dist, "Anchoring/Repo.js")
  const { OtsCalendar } = await distImport(dist, "Platform/Calendar/OtsCalendar.js")
  const { startSimulatedCalendarServer } = await loadCalendarServer()
  const store = await openStore({ kind, section: "anchor", dist })
  const server = calendarMode === "http" ? await startSimulatedCalendarServer() : undefined
  let runtime
  try {
    const dayEndMs = Math.floor(Date.now() / 86_400_000) * 86_400_000
    await insertBatches(store, count, dayEndMs)
    runtime = await makeRuntime(store, dist, server ? { otsCalendars: [server.url] } : {})
    const out = []
    for (let r = 0; r < runs; r++) {
      if (r > 0) await resetDay(store)
      await quietWait(log)
      const marks = {}
      const T = (name, eff) => timedEffect(Effect, marks, name, eff)
      const repo = Layer.effect(AnchoringRepo, Effect.map(AnchoringRepo, (x) => ({
        ...x,
        unanchoredBatches: (w) => T("read", x.unanchoredBatches(w)),
        createDailyRoot: (i) => T("write", x.createDailyRoot(i)),
        dailyRootById: (id) => T("reread", x.dailyRootById(id)),
        submissions: (id) => T("reread", x.submissions(id)),
        recordSubmitted: (...a) => T("recordSubmitted", x.recordSubmitted(...a))
      })))
      const cal = Layer.effect(OtsCalendar, Effect.map(OtsCalendar, (c) => ({ ...c, submit: (u, d) => T("calendarSubmit", c.submit(u, d)) })))
      const timedAnchorer = Anchorer.DefaultWithoutDependencies.pipe(Layer.provide(Layer.merge(repo, cal)))
      const outcome = await runtime.runPromise(
        Effect.gen(function*() {
          const anchorer = yield* Anchorer
          const t0 = performance.now()
          const o = yield* anchorer.anchorWindow(dayEndMs)
          marks.total = performance.now() - t0
          return o
        }).pipe(Effect.provide(timedAnchorer))
      )
      if (outcome._tag !== "Anchored" || outcome.batches !== count || outcome.submitted !== 1) {
        throw new Error(`anchorWindow outcome ${JSON.stringify(outcome)}`)
      }
      // submit phase = the concurrent calendar calls incl. recordSubmitted; with one calendar that is their sum
      const submit = (marks.calendarSubmit ?? 0) + (marks.recordSubmitted ?? 0)
      out.push({
        total: marks.total,
        read: marks.read,
        write: marks.write,
        reread: marks.reread,
        calendarSubmit: marks.calendarSubmit,
        recordSubmitted: marks.recordSubmitted,
        rest: marks.total - marks.read - marks.write - marks.reread - submit
      })
    }
    const best = out.reduce((a, b) => (b.total < a.total ? b : a))
    return { store: kind, calendar: calendarMode, batches: count, runs: out.map((o) => o.total), best, median: median(out.map((o) => o.total)) }
  } finally {
    await runtime?.dispose()
    await server?.close()
    await store.close()
  }
}

const benchCalendar = async ({ dist, calls }) => {
  const { Effect, ManagedRuntime } = await import("effect")
  const { HttpClient } = await import("@effect/platform")
  const { makeHttpCalendar } = await distImport(dist, "Platform/Calendar/OtsCalendar.js")
  const Outbound = await distImport(dist, "Platform/Outbound.js")
  const { startSimulatedCalendarServer } = await loadCalendarServer()
  const Ots = await distImport(dist, "Domain/Ots.js")
  const server = await startSimulatedCalendarServer()
  const outbound = ManagedRuntime.make(Outbound.layer)
  try {
    const cal = makeHttpCalendar({ urls: [server.url] }, await outbound.runPromise(HttpClient.HttpClient))
    const time = async (eff) => {
      const t0 = performance.now()
      const r = await Effect.runPromise(eff)
      return [performance.now() - t0, r]
    }
    for (let i = 0; i < 20; i++) await Effect.runPromise(cal.submit(server.url, randomBytes(32)))
    const submit = []
    const commitments = []
    for (let i = 0; i < calls; i++) {
      const digest = new Uint8Array(randomBytes(32))
      const [ms, ts] = await time(cal.submit(server.url, digest))
      submit.push(ms)
      const [p] = Ots.pendingAttestations(Ots.parseTimestamp(ts, digest), digest)
      commitments.push(p.commitment)
    }
    const pending = []
    for (const c of commitments) {
      const [ms, r] = await time(cal.upgrade(server.url, c))
      if (r !== null) throw new Error("upgrade answered before mining")
      pending.push(ms)
    }
    server.mine()
    const confirmed = []
    for (const c of commitments) {
      const [ms, r] = await time(cal.upgrade(server.url, c))
      if (r === null) throw new Error("upgrade still pending after mining")
      confirmed.push(ms)
    }
    return [
      { call: "submit (POST /digest)", ...stats(submit) },
      { call: "upgrade, pending (404)", ...stats(pending) },
      { call: "upgrade, mined (200)", ...stats(confirmed) }
    ]
  } finally {
    await outbound.dispose()
    await server.close()
  }
}

/** Runs the anchor benchmark; returns { tree, windows, calendar, text }. */
export async function benchAnchor({
  count = envInt("BENCH_ANCHOR_BATCHES", 1440),
  runs = envInt("BENCH_ANCHOR_RUNS", 3),
  calls = envInt("BENCH_ANCHOR_CALLS", 200),
  stores = envList("BENCH_ANCHOR_STORES", ["sqlite", "pg"]),
  dist = defaultDist(),
  log = console.log
} = {}) {
  await quietWait(log)
  const tree = await benchTree({ dist, count })
  log(`  buildTree ${count} roots: best ${fmt(tree.best, 2)} ms, median ${fmt(tree.median, 2)} ms`)
  const windows = []
  for (const kind of stores) {
    for (const calendarMode of ["demo", "http"]) {
      const w = await benchAnchorWindow({ dist, kind, calendarMode, count, runs, log })
      windows.push(w)
      log(`  anchorWindow ${kind}/${calendarMode}: ${w.runs.map((x) => fmt(x)).join(" / ")} ms`)
    }
  }
  await quietWait(log)
  const calendar = await benchCalendar({ dist, calls })
  for (const c of calendar) log(`  ${c.call}: median ${fmt(c.median, 2)} ms, p99 ${fmt(c.p99, 2)} ms`)
  return { tree, windows, calendar, text: formatAnchor({ tree, windows, calendar }) }
}

export const formatAnchor = ({ tree, windows, calendar }) => {
  const lines = []
  lines.push(`daily-root tree (buildTree, ${tree.count.toLocaleString("en-US")} batch roots): best ${fmt(tree.best, 2)} ms, median ${fmt(tree.median, 2)} ms of 50`)
  lines.push("")
  lines.push(table(
    ["store", "calendar", "batches", "best ms", "median", "read", "write tx", "reread", "cal submit", "record", "tree+rest"],
    windows.map((w) => [
      w.store,
      w.calendar,
      w.batches.toLocaleString("en-US"),
      fmt(w.best.total, 1),
      fmt(w.median, 1),
      fmt(w.best.read, 1),
      fmt(w.best.write, 1),
      fmt(w.best.reread, 1),
      fmt(w.best.calendarSubmit, 1),
      fmt(w.best.recordSubmitted, 1),
      fmt(w.best.rest, 1)
    ]),
    { right: [2, 3, 4, 5, 6, 7, 8, 9, 10] }
  ))
  lines.push("anchorWindow end to end (breakdown of the best run): read = unanchoredBatches, write tx = createDailyRoot,")
  lines.push("reread = dailyRootById + submissions, cal submit = OtsCalendar.submit, record = recordSubmitted, tree+rest = remainder.")
  lines.push("")
  lines.push(table(
    ["calendar call (loopback HTTP)", "calls", "median ms", "p99 ms", "mean", "min", "max"],
    calendar.map((c) => [c.call, c.n, fmt(c.median, 2), fmt(c.p99, 2), fmt(c.mean, 2), fmt(c.min, 2), fmt(c.max, 2)]),
    { right: [1, 2, 3, 4, 5, 6] }
  ))
  return lines.join("\n")
}

runAsScript(import.meta.url, benchAnchor)
