#!/usr/bin/env node
// attestd benchmark harness: one bounded run, a table on stdout, the full result
// in .bench/last.json (and one line appended to .bench/history.jsonl).
//
//   npm run bench                      # build, then every default section
//   BENCH_DURATION=5 node scripts/bench.mjs
//   BENCH_ONLY=sqlite,merkle BENCH_PROFILE=1 node scripts/bench.mjs
//
// Environment:
//   BENCH_DURATION     seconds per measured run (10)      BENCH_WARMUP  seconds of warm-up per run (2)
//   BENCH_CONNECTIONS  autocannon connections (50)        BENCH_SEED    pre-attested hashes (1000)
//   BENCH_ONLY         sections to run: baseline, floor, costs, sqlite, pg, ceiling, profile, instructions, statements, allocations, sqlite-worker, mixed, merkle, seal, anchor, webhooks, tags, scan;
//                      "http" = baseline,sqlite,pg,ceiling; "pipeline" = seal,anchor,webhooks,tags,scan
//                      (default: baseline, floor, costs, sqlite, pg, ceiling, merkle; profile is added by BENCH_PROFILE=1; the
//                      pipeline sections run only when named, each takes ~0.5-3 min)
//   BENCH_FLOOR_HASHES hashes per floor measurement (20000): scripts/bench/floor.mjs measures, in this
//                      process, signing with a parsed key, a group-committed insert of 64 rows per
//                      transaction on each store and an indexed lookup; the report sets each
//                      scenario's server CPU per request beside that floor plus the bare POST's
//   BENCH_COSTS_OPS    operations per cost measurement (5000): scripts/bench/costs.mjs measures, in this
//                      process over the compiled service, what a request's parts cost (a fiber, a
//                      statement through @effect/sql beside the driver, a row decode with and without
//                      its renames, an access-log line), the figures README's performance section cites
//   ceiling            attest-new and verify (those of BENCH_SCENARIOS) against scripts/bench/ceiling-server.mjs,
//                      the same work (the service's schema, statements, durability, signing, key lookup,
//                      limits' counters, answer) written by hand with no framework, on BENCH_CEILING_STORES
//                      (sqlite,pg): what req/s this machine allows that work at all, beside each target
//   BENCH_SCENARIOS    attestd scenarios (trivial-get,attest-new,attest-existing,verify)
//   BENCH_ROUNDS       times the HTTP sections (baseline, sqlite, pg, ceiling: those selected) run, in turn (1).
//                      Each round's ratios are to that round's bare POST; the targets then show each
//                      one's median ratio, its range and how many rounds reached it. The machine's
//                      speed swings within minutes, so one round's verdict says little
//   BENCH_ONLY=instructions  instructions per request counted by callgrind (valgrind), for A/B of code
//                      changes where a load run's ±15% hides a few percent (scripts/bench/instructions.mjs):
//                      BENCH_IR_SCENARIOS (verify,attest-new), BENCH_IR_REQUESTS (3000), BENCH_IR_WARMUP
//                      (3000), BENCH_IR_CONNECTIONS (10); opt-in, a few minutes
//   BENCH_ONLY=statements  SQLite's own share of a request, inside a running server (scripts/bench/statements.mjs):
//                      every better-sqlite3 call timed on the event loop, per statement and per request, and the
//                      COMMITs' percentiles. BENCH_STATEMENTS_SCENARIOS (attest-new,verify), BENCH_STATEMENTS_REQUESTS
//                      (15000); opt-in, under a minute
//   BENCH_ONLY=allocations  bytes allocated per request by allocating function, inside a running server on
//                      SQLite (scripts/bench/allocations.mjs: V8's sampling heap profiler, collected objects
//                      counted). BENCH_ALLOCATIONS_SCENARIOS (verify,attest-new), BENCH_ALLOCATIONS_REQUESTS
//                      (20000 warm-up, then as many sampled); opt-in, under a minute. BENCH_ALLOCATIONS_SURVIVORS=1
//                      counts only what survived a scavenge (what the young generation copies and promotes)
//   BENCH_ONLY=sqlite-worker  what a worker thread owning the SQLite connection would spare the event loop
//                      (scripts/bench/sqlite-worker.mjs): a group-committed batch of attestation inserts on the
//                      loop against the same batch in a worker; BENCH_SQLITE_WORKER_BATCHES (300),
//                      BENCH_SQLITE_WORKER_ROWS (23); opt-in, a few seconds
//   BENCH_ONLY=mixed   attest-new and verify against one server at once (scripts/bench/mixed.mjs), on each
//                      of BENCH_MIXED_STORES (sqlite,pg): BENCH_MIXED_ATTEST (40) and BENCH_MIXED_VERIFY (10)
//                      connections, each workload's req/s and latency; opt-in, ~30 s per store
//   BENCH_PROFILE=1    also run profiled servers (--cpu-prof) for BENCH_PROFILE_SCENARIOS
//                      (attest-new,verify) on BENCH_PROFILE_DB (sqlite), BENCH_PROFILE_DURATION s each
//                      (min(BENCH_DURATION, 5)); prints top self-time functions
//   BENCH_MERKLE_SIZES leaf counts for the Merkle section (10000,100000)
//   BENCH_QUIET_WAIT   before each run, wait up to this many seconds for other processes to go
//                      below 20% of a core (0: do not wait); the "other" CPU column shows what remained
//   BENCH_SERVE_ARGS   extra `attestd serve` flags, e.g. "--no-workers" (default: none, workers run)
//   BENCH_NODE_ARGS    extra node flags for the attestd servers, e.g. "--max-semi-space-size=32" (A/B of V8 settings),
//                      in the load runs and under callgrind (instructions)
//   BENCH_SNAPSHOT=0   run dist/ in place instead of a copy in .bench/build (default: copy, so a
//                      concurrent rebuild of dist/ cannot change the code under test mid-run)
//   BENCH_DIST         compiled tree to benchmark instead of dist/ (e.g. an experimental build)
//   BENCH_PG_SYNC_COMMIT  e.g. "off": synchronous_commit for the benchmark database (diagnosis only)
//   BENCH_PG_URL       Postgres server, without database (postgres://postgres@127.0.0.1:5432)
//
// Pipeline sections (in-process over dist/ via ManagedRuntime + AppLive({ workers: false }); each
// creates and drops its own database attestd_bench_<section>_<pid> or SQLite temp dir):
//   seal      scripts/bench/seal.mjs: Sealer.sealWindow over n bulk-loaded pending T0 attestations on
//             SQLite and Postgres (child process per run): wall time, breakdown read / tree / TSA /
//             write transaction (and its statements), peak RSS growth. BENCH_SEAL_SIZES
//             (10000,100000,1000000; ~2 min), BENCH_SEAL_STORES (sqlite,pg), BENCH_SEAL_MAX_S (120:
//             skip a size whose linear estimate from the previous size is longer)
//   anchor    scripts/bench/anchor.mjs: buildTree over 1,440 batch roots; Anchorer.anchorWindow end to
//             end over 1,440 SQL-inserted batches (SQLite, Postgres; in-process and HTTP simulated
//             calendar); submit/upgrade round trips to startSimulatedCalendarServer (median, p99).
//             BENCH_ANCHOR_BATCHES (1440), BENCH_ANCHOR_RUNS (3), BENCH_ANCHOR_CALLS (200),
//             BENCH_ANCHOR_STORES (sqlite,pg)
//   webhooks  scripts/bench/webhooks.mjs: fanOutOnce + sendDueOnce until done, to a local 204
//             receiver; deliveries/s on SQLite and Postgres. BENCH_WEBHOOK_SIZES (5000),
//             BENCH_WEBHOOK_HOOKS (1), BENCH_WEBHOOK_STORES (sqlite,pg)
//   tags      scripts/bench/tags.mjs: Postgres, 1.2M tags; EXPLAIN (ANALYZE, BUFFERS) + wall time of the
//             SQL TagRepo.query sends for 1-, 2-, 3-condition AND queries. BENCH_TAGS_ATTESTATIONS
//             (100000 → 1,000,000 tags of key A), BENCH_TAGS_RUNS (20), BENCH_TAGS_WHATIF (1)
//   BENCH_QUIET_WAIT also applies before each pipeline measurement.
//
// Servers run as child processes (the load generator, autocannon, runs here), so
// they do not share an event loop. On 2 cores the generator and the server each
// get about one; the per-run CPU columns show which one was saturated.
import { execFileSync } from "node:child_process"
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { ATTESTD_SCENARIOS, BARE_SCENARIOS, benchAttestd, benchBare, profileScenarios } from "./bench/http.mjs"
import * as lib from "./bench/lib.mjs"
import { BENCH_DIR, dropCreatedDatabases, envInt, envList, killAllChildren, ROOT, table } from "./bench/lib.mjs"
import { median } from "./bench/stats.mjs"

const config = {
  duration: envInt("BENCH_DURATION", 10),
  warmup: Number(process.env.BENCH_WARMUP ?? 2),
  connections: envInt("BENCH_CONNECTIONS", 50),
  seed: envInt("BENCH_SEED", 1000),
  rounds: Math.max(1, envInt("BENCH_ROUNDS", 1)),
  quietWait: Number(process.env.BENCH_QUIET_WAIT ?? 0),
  serveArgs: envList("BENCH_SERVE_ARGS", []).flatMap((a) => a.split(" ")).filter((a) => a.length > 0),
  scenarios: envList("BENCH_SCENARIOS", ATTESTD_SCENARIOS),
  profile: process.env.BENCH_PROFILE === "1",
  profileDb: process.env.BENCH_PROFILE_DB ?? "sqlite",
  profileScenarios: envList("BENCH_PROFILE_SCENARIOS", ["attest-new", "verify"]),
  profileDuration: envInt("BENCH_PROFILE_DURATION", Math.min(envInt("BENCH_DURATION", 10), 5)),
  merkleSizes: envList("BENCH_MERKLE_SIZES", ["10000", "100000"]).map((s) => Number(s.replace(/_/g, "")))
}
const serveArgs = config.serveArgs
const load = { duration: config.duration, warmup: config.warmup, connections: config.connections, quietWaitMs: config.quietWait * 1000 }

for (const s of [...config.scenarios, ...config.profileScenarios]) {
  if (!ATTESTD_SCENARIOS.includes(s)) throw new Error(`unknown scenario ${s}; known: ${ATTESTD_SCENARIOS.join(", ")}`)
}

const log = (...a) => console.log(...a)
const results = []
const profiles = {}
let merkle
let floor
let costs
let instructions
let statements
let allocations
let sqliteWorker
let mixed
const pipeline = {}
let buildDir = path.join(ROOT, "dist")

/** The sections, in order. Later stages add theirs here. */
const SECTIONS = [
  {
    name: "baseline",
    run: async () => results.push(...(await benchBare({ scenarios: BARE_SCENARIOS, load, log })))
  },
  {
    name: "floor",
    run: async () => {
      const { benchFloor } = await import(new URL("./bench/floor.mjs", import.meta.url).href)
      floor = await benchFloor({ hashes: envInt("BENCH_FLOOR_HASHES", 20_000), log })
    }
  },
  {
    name: "costs",
    run: async () => {
      const { benchCosts } = await import(new URL("./bench/costs.mjs", import.meta.url).href)
      costs = await benchCosts({ dist: buildDir, ops: envInt("BENCH_COSTS_OPS", 5000), log })
    }
  },
  {
    name: "sqlite",
    run: async () => results.push(...(await benchAttestd({ db: "sqlite", scenarios: config.scenarios, load, seed: config.seed, serveArgs, log })).results)
  },
  {
    name: "pg",
    run: async () => results.push(...(await benchAttestd({ db: "pg", scenarios: config.scenarios, load, seed: config.seed, serveArgs, log })).results)
  },
  {
    name: "ceiling",
    run: async () => {
      const { benchCeiling, CEILING_SCENARIOS } = await import(new URL("./bench/ceiling.mjs", import.meta.url).href)
      const stores = envList("BENCH_CEILING_STORES", ["sqlite", "pg"])
      const scenarios = CEILING_SCENARIOS.filter((s) => config.scenarios.includes(s))
      if (scenarios.length > 0) results.push(...(await benchCeiling({ stores, scenarios, seedCount: config.seed, load, log })))
    }
  },
  {
    name: "profile",
    optIn: true,
    run: async () => Object.assign(profiles, await profileScenarios({
      db: config.profileDb,
      scenarios: config.profileScenarios,
      load: { ...load, duration: config.profileDuration, warmup: Math.min(config.warmup, 1) },
      serveArgs,
      log
    }))
  },
  {
    name: "instructions",
    optIn: true,
    run: async () => {
      const { benchInstructions } = await import(new URL("./bench/instructions.mjs", import.meta.url).href)
      instructions = await benchInstructions({
        scenarios: envList("BENCH_IR_SCENARIOS", ["verify", "attest-new"]),
        requests: envInt("BENCH_IR_REQUESTS", 3000),
        warmup: envInt("BENCH_IR_WARMUP", 3000),
        connections: envInt("BENCH_IR_CONNECTIONS", 10),
        log
      })
    }
  },
  {
    name: "statements",
    optIn: true,
    run: async () => {
      const { benchStatements } = await import(new URL("./bench/statements.mjs", import.meta.url).href)
      statements = await benchStatements({
        scenarios: envList("BENCH_STATEMENTS_SCENARIOS", ["attest-new", "verify"]),
        requests: envInt("BENCH_STATEMENTS_REQUESTS", 15_000),
        connections: config.connections,
        seed: config.seed,
        log
      })
    }
  },
  {
    name: "allocations",
    optIn: true,
    run: async () => {
      const { benchAllocations } = await import(new URL("./bench/allocations.mjs", import.meta.url).href)
      allocations = await benchAllocations({
        scenarios: envList("BENCH_ALLOCATIONS_SCENARIOS", ["verify", "attest-new"]),
        db: process.env.BENCH_ALLOCATIONS_DB ?? "sqlite",
        top: envInt("BENCH_ALLOCATIONS_TOP", 15),
        requests: envInt("BENCH_ALLOCATIONS_REQUESTS", 20_000),
        connections: config.connections,
        seed: config.seed,
        log
      })
    }
  },
  {
    name: "sqlite-worker",
    optIn: true,
    run: async () => {
      const { benchSqliteWorker } = await import(new URL("./bench/sqlite-worker.mjs", import.meta.url).href)
      sqliteWorker = await benchSqliteWorker({
        batches: envInt("BENCH_SQLITE_WORKER_BATCHES", 300),
        rows: envInt("BENCH_SQLITE_WORKER_ROWS", 23),
        log
      })
    }
  },
  {
    name: "mixed",
    optIn: true,
    run: async () => {
      const { benchMixed } = await import(new URL("./bench/mixed.mjs", import.meta.url).href)
      mixed = await benchMixed({
        stores: envList("BENCH_MIXED_STORES", ["sqlite", "pg"]),
        attestConnections: envInt("BENCH_MIXED_ATTEST", 40),
        verifyConnections: envInt("BENCH_MIXED_VERIFY", 10),
        duration: config.duration,
        warmup: config.warmup,
        seed: config.seed,
        quietWaitMs: config.quietWait * 1000,
        log
      })
    }
  },
  {
    name: "merkle",
    run: async () => {
      let mod
      try {
        mod = await import(new URL("./bench-merkle.mjs", import.meta.url).href)
      } catch (e) {
        log(`  skipped: scripts/bench-merkle.mjs not loadable (${e.message})`)
        return
      }
      try {
        merkle = await mod.benchMerkle({
          sizes: config.merkleSizes,
          modulePath: process.env.MERKLE_MODULE ?? path.join(buildDir, "Sealing/MerkleBuilder.js"),
          log: (m) => log(`  ${m}`)
        })
      } catch (e) {
        log(`  merkle bench failed: ${e.stack ?? e}`)
        merkle = { error: String(e?.message ?? e) }
      } finally {
        try {
          const M = await import(pathToFileURL(process.env.MERKLE_MODULE ?? path.join(buildDir, "Sealing/MerkleBuilder.js")).href)
          if (typeof M.terminateMerkleWorker === "function") await M.terminateMerkleWorker()
        } catch {}
      }
    }
  }
]

/** The pipeline sections: scripts/bench/<name>.mjs exporting bench<Name>({ dist, log }) → { text, ... }. */
for (const [name, fn] of [["seal", "benchSeal"], ["anchor", "benchAnchor"], ["webhooks", "benchWebhooks"], ["tags", "benchTags"]]) {
  SECTIONS.push({
    name,
    optIn: true,
    run: async () => {
      const mod = await import(new URL(`./bench/${name}.mjs`, import.meta.url).href)
      const t0 = performance.now()
      try {
        pipeline[name] = await mod[fn]({ dist: buildDir, log })
      } catch (e) {
        log(`  ${name} bench failed: ${e.stack ?? e}`)
        pipeline[name] = { error: String(e?.message ?? e) }
        await dropCreatedDatabases()
      }
      pipeline[name].seconds = (performance.now() - t0) / 1000
    }
  })
}

/** scan: a 50,000-hash POST /v1/scan against a 1M-claim Postgres inventory (scripts/bench/scan.mjs). */
SECTIONS.push({
  name: "scan",
  optIn: true,
  run: async () => {
    const { benchScan } = await import(new URL("./bench/scan.mjs", import.meta.url).href)
    const t0 = performance.now()
    try {
      const r = await benchScan({
        claims: envInt("BENCH_SCAN_CLAIMS", 1_000_000),
        hashes: envInt("BENCH_SCAN_HASHES", 50_000),
        quiet: false
      })
      pipeline.scan = { text: "", ...r }
    } catch (e) {
      log(`  scan bench failed: ${e.stack ?? e}`)
      pipeline.scan = { error: String(e?.message ?? e) }
    }
    pipeline.scan.seconds = (performance.now() - t0) / 1000
  }
})

const ALIASES = { http: ["baseline", "sqlite", "pg", "ceiling"], pipeline: ["seal", "anchor", "webhooks", "tags", "scan"] }

const selected = () => {
  const only = envList("BENCH_ONLY", undefined)
  const names = only === undefined ? SECTIONS.filter((s) => !s.optIn).map((s) => s.name) : only.flatMap((n) => ALIASES[n] ?? [n])
  if (config.profile && !names.includes("profile")) names.push("profile")
  for (const n of names) {
    if (!SECTIONS.some((s) => s.name === n)) throw new Error(`unknown section ${n}; known: ${SECTIONS.map((s) => s.name).join(", ")}, http, pipeline`)
  }
  return SECTIONS.filter((s) => names.includes(s.name))
}

// ---------------------------------------------------------------------------
// report

const fmt = (n, digits = 0) => (n === undefined || n === null || Number.isNaN(n) ? "" : n.toFixed(digits))

/** The HTTP sections, which BENCH_ROUNDS repeats; `round` tags their results (1 for the first). */
const HTTP_SECTIONS = ["baseline", "sqlite", "pg", "ceiling"]
let round = 1

const baselineOf = (r) => (r.baseline ? results.find((b) => b.scenario === r.baseline && b.round === r.round) : undefined)

/**
 * The least server CPU a scenario could cost on this machine: the bare server's µs per request
 * plus, per hash, what the store must do (sign + a group-committed insert for attest-new, an
 * indexed lookup for verify and attest-existing), as measured by the floor section.
 */
const floorOf = (r) => {
  const base = baselineOf(r)
  if (!base?.serverCpuUsPerReq) return undefined
  if (r.server === "bare" || r.scenario === "trivial-get") return base.serverCpuUsPerReq
  const store = floor?.[r.db]
  if (!store) return undefined
  return base.serverCpuUsPerReq + (r.scenario === "attest-new" ? store.write.cpuUs : store.lookup.cpuUs)
}

const report = () => {
  const lines = []
  if (results.length > 0) {
    const body = results.map((r) => {
      const base = baselineOf(r)
      r.floorUs = floorOf(r)
      const ratio = base ? r.rps / base.rps : undefined
      r.ratio = ratio
      const cpu = [r.cpu.server, r.cpu.loadgen, r.cpu.postgres, r.cpu.others].map((x) => (x === undefined ? "-" : `${x}`)).join("/")
      const bad = r.non2xx > 0 || r.errors > 0
      return [
        ...(config.rounds > 1 ? [String(r.round)] : []),
        r.server,
        r.scenario,
        fmt(r.rps),
        fmt(r.p50, 1),
        fmt(r.p99, 1),
        base ? `${fmt(ratio, 3)}× ${r.baseline}` : "",
        bad ? `${r.non2xx}/${r.errors} !!` : `${r.non2xx}/${r.errors}`,
        r.serverCpuUsPerReq === undefined ? "" : fmt(r.serverCpuUsPerReq),
        base && r.serverCpuUsPerReq ? fmt((r.costRatio = base.serverCpuUsPerReq / r.serverCpuUsPerReq), 3) : "",
        r.floorUs === undefined ? "" : fmt(r.floorUs),
        r.floorUs && r.serverCpuUsPerReq ? `${fmt(r.serverCpuUsPerReq / r.floorUs, 1)}×` : "",
        cpu,
        r.loopBusy === undefined ? "" : fmt(100 * r.loopBusy)
      ]
    })
    // with several rounds, a round column comes first and every other column moves one right
    const rounds = config.rounds > 1
    const header = ["server", "scenario", "req/s", "p50 ms", "p99 ms", "vs bare", "non2xx/err", "srv µs/req", "cost ratio", "floor µs", "× floor", "cpu% srv/gen/pg/other", "loop%"]
    const right = [2, 3, 4, 7, 8, 9, 10, 12].map((i) => i + (rounds ? 1 : 0))
    lines.push(table(rounds ? ["round", ...header] : header, body, { right: rounds ? [0, ...right] : right }))
    lines.push("")
    lines.push("loop%: how much of the run the server's event loop was running code (attestd_event_loop_busy_seconds_total);")
    lines.push("near 100 it is saturated, and only less CPU per request can raise req/s.")
    lines.push("srv µs/req: server CPU time per request (robust to other load on the machine); cost ratio: the")
    lines.push("baseline's µs/req ÷ this one's. The bare server shares the cores with the load generator, attestd")
    lines.push("mostly does not, so on a quiet machine the req/s ratio comes out ~1.5-2× the cost ratio.")
    lines.push("floor µs: the bare server's µs/req plus the store's per-hash floor (sign + insert ×64/tx for")
    lines.push("attest-new, an indexed lookup otherwise); × floor: how far above it attestd's server CPU is.")
    if (floor) {
      const f = (x) => (x ? `${fmt(x.cpuUs, 1)} µs CPU (${fmt(x.wallUs, 1)} wall)` : "-")
      lines.push(`floor per hash: sign ${f(floor.sign)}; sqlite write ${f(floor.sqlite?.write)}, lookup ${f(floor.sqlite?.lookup)}; pg write ${f(floor.pg?.write)}, lookup ${f(floor.pg?.lookup)}`)
    }
    const gcs = results.filter((r) => r.groupCommit?.meanBatch !== undefined)
    if (gcs.length > 0) {
      lines.push("")
      lines.push(`group commit (attestations per transaction): ${gcs.map((r) => `${r.server} ${r.scenario}${config.rounds > 1 ? ` (${r.round})` : ""} ${r.groupCommit.meanBatch.toFixed(1)}`).join(", ")}`)
    }
    const noisy = results.filter((r) => (r.cpu.others ?? 0) >= 20)
    if (noisy.length > 0) {
      lines.push("")
      lines.push(`note: other processes on this machine used CPU during ${noisy.map((r) => `${r.server} ${r.scenario}${config.rounds > 1 ? ` (round ${r.round})` : ""} (${r.cpu.others}% of a core)`).join(", ")}; those figures are noisy`)
    }
    const bad = results.filter((r) => r.non2xx > 0 || r.errors > 0)
    if (bad.length > 0) {
      lines.push("")
      lines.push("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!")
      for (const r of bad) {
        lines.push(`!! ${r.server} ${r.scenario}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts; status codes ${JSON.stringify(r.statusCodes)}`)
      }
      lines.push("!! figures for these runs are NOT valid")
      lines.push("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!")
    }
  }
  const ceilingOf = (r) => results.find((c) => c.server === `ceiling-${r.db}` && c.scenario === r.scenario && c.round === r.round)
  const targets = results.filter((r) => r.target !== null && r.ratio !== undefined).map((r) => ({
    ceiling: ceilingOf(r)?.ratio,
    server: r.server,
    scenario: r.scenario,
    target: r.target,
    ratio: r.ratio,
    usPerReq: r.serverCpuUsPerReq,
    costRatio: r.costRatio,
    pass: r.ratio >= r.target && r.non2xx === 0 && r.errors === 0
  }))
  // The req/s ratio moves with the load generator's share of the cores; the server's CPU per
  // request and the cost ratio (the bare server's CPU per request ÷ this one's) do not.
  const cpuOf = (ts) => {
    const us = ts.map((t) => t.usPerReq).filter((x) => x !== undefined)
    const cost = ts.map((t) => t.costRatio).filter((x) => x !== undefined)
    return us.length === 0 ? "" : `; server ${fmt(median(us))} µs/req, cost ratio ${fmt(median(cost), 3)}`
  }
  // what the hand-written server (the ceiling section) reached for the same scenario and store
  const ceilingText = (ts) => {
    const cs = ts.map((t) => t.ceiling).filter((x) => x !== undefined)
    if (cs.length === 0) return ""
    const ours = median(ts.map((t) => t.ratio))
    return `; the ceiling server ${fmt(median(cs), 3)}×${cs.length > 1 ? ` (${fmt(Math.min(...cs), 3)}–${fmt(Math.max(...cs), 3)}×)` : ""}, attestd at ${fmt(100 * ours / median(cs))}% of it`
  }
  if (targets.length > 0 && config.rounds === 1) {
    lines.push("")
    lines.push("targets (× bare POST):")
    for (const t of targets) {
      lines.push(`  ${t.pass ? "PASS" : "MISS"}  ${t.server} ${t.scenario}: ${fmt(t.ratio, 3)}× (target ≥ ${t.target.toFixed(2)}×${cpuOf([t])}${ceilingText([t])})`)
    }
  } else if (targets.length > 0) {
    // one verdict per target: the median of the rounds' ratios (a round with errors counts as a miss)
    lines.push("")
    lines.push(`targets (× bare POST, over ${config.rounds} rounds, each ratio to its own round's bare POST):`)
    const groups = new Map()
    for (const t of targets) {
      const k = `${t.server} ${t.scenario}`
      groups.set(k, [...(groups.get(k) ?? []), t])
    }
    for (const [k, ts] of groups) {
      const ratios = ts.map((t) => t.ratio)
      const passed = ts.filter((t) => t.pass).length
      const mid = median(ts.map((t) => (t.pass || t.ratio < t.target ? t.ratio : 0)))
      lines.push(
        `  ${mid >= ts[0].target ? "PASS" : "MISS"}  ${k}: median ${fmt(mid, 3)}× (${fmt(Math.min(...ratios), 3)}–${fmt(Math.max(...ratios), 3)}×; ${passed} of ${ts.length} rounds ≥ ${ts[0].target.toFixed(2)}×${cpuOf(ts)}${ceilingText(ts)})`
      )
    }
  }
  for (const [name, { result, profile }] of Object.entries(profiles)) {
    lines.push("")
    lines.push(`profile ${name} (under --cpu-prof: ${fmt(result.rps)} req/s; ${fmt(profile.busyMs)} ms sampled busy (${profile.intervalUs} µs samples) in ${fmt(profile.wallMs)} ms${profile.windowed ? " of the measured run" : " INCLUDING start-up and warm-up"}; ${path.relative(ROOT, profile.file)})`)
    lines.push(table(["self ms", "% busy", "function"], profile.topSelf.map((f) => [fmt(f.ms), fmt(f.pctOfBusy, 1), f.name]), { right: [0, 1] }))
    lines.push("  self time by package:")
    lines.push(table(["self ms", "% busy", "package"], profile.byPackage.map((f) => [fmt(f.ms), fmt(f.pctOfBusy, 1), f.name]), { right: [0, 1] }).replace(/^/gm, "  "))
    lines.push("  inclusive time of attestd's own functions (dist/):")
    lines.push(table(["incl ms", "% busy", "function"], profile.ownInclusive.map((f) => [fmt(f.ms), fmt(f.pctOfBusy, 1), f.name]), { right: [0, 1] }).replace(/^/gm, "  "))
  }
  if (instructions?.rows?.length > 0) {
    lines.push("")
    lines.push(`instructions per request (callgrind, SQLite, ${instructions.requests} requests after ${instructions.warmup}, ${instructions.connections} connections; every thread of the server):`)
    lines.push(table(["scenario", "requests", "non2xx", "k instr/req"], instructions.rows.map((r) => [r.scenario, String(r.requests), String(r.non2xx), fmt(r.irPerRequest / 1000)]), { right: [1, 2, 3] }))
  }
  if (Array.isArray(merkle)) {
    lines.push("")
    lines.push("merkle:")
    lines.push(table(["case", "leaves", "best ms", "note"], merkle.map((r) => [r.name, r.leaves.toLocaleString("en-US"), fmt(r.bestMs, 1), r.note]), { right: [1, 2] }))
  }
  for (const [name, r] of Object.entries(pipeline)) {
    lines.push("")
    lines.push(`${name} (${fmt(r.seconds)} s):`)
    lines.push(r.error ? `  FAILED: ${r.error}` : r.text)
  }
  return { text: lines.join("\n"), targets }
}

const gitInfo = () => {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], { cwd: ROOT, encoding: "utf8" }).trim() !== ""
    return { commit, srcDirty: dirty }
  } catch {
    return {}
  }
}

// ---------------------------------------------------------------------------

const main = async () => {
  if (!existsSync(lib.BIN)) throw new Error(`${lib.BIN} missing: run npm run build first (or npm run bench)`)
  mkdirSync(BENCH_DIR, { recursive: true })
  if (process.env.BENCH_SNAPSHOT !== "0") buildDir = lib.snapshotBuild(process.env.BENCH_DIST ? path.resolve(process.env.BENCH_DIST) : undefined)
  const sections = selected()
  const startedAt = new Date()
  const cpus = os.cpus()
  log(`attestd bench: node ${process.version}, ${cpus.length} CPUs (${cpus[0]?.model ?? "?"}), load ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`)
  log(`sections ${sections.map((s) => s.name).join(", ")}; ${config.connections} connections, ${config.warmup} s warm-up + ${config.duration} s per run`)
  const t0 = performance.now()
  const runTagged = async (section) => {
    const before = results.length
    await section.run()
    for (const r of results.slice(before)) r.round = round
  }
  for (const section of sections) {
    log(`[${section.name}]`)
    await runTagged(section)
  }
  const http = sections.filter((s) => HTTP_SECTIONS.includes(s.name))
  for (round = 2; round <= config.rounds && http.length > 0; round++) {
    for (const section of http) {
      log(`[${section.name}, round ${round} of ${config.rounds}]`)
      await runTagged(section)
    }
  }
  const { text, targets } = report()
  log("")
  log(text)
  const elapsed = (performance.now() - t0) / 1000
  log(`\ntotal ${elapsed.toFixed(0)} s`)
  const out = {
    startedAt: startedAt.toISOString(),
    elapsedSeconds: elapsed,
    node: process.version,
    cpus: cpus.length,
    cpuModel: cpus[0]?.model,
    ...gitInfo(),
    config,
    sections: sections.map((s) => s.name),
    build: path.relative(ROOT, buildDir),
    source: process.env.BENCH_DIST ?? "dist",
    results: results.map(({ raw, ...r }) => ({ ...r, raw })),
    targets,
    profiles,
    merkle: merkle ?? null,
    floor: floor ?? null,
    costs: costs ?? null,
    instructions: instructions ?? null,
    statements: statements ?? null,
    allocations: allocations ?? null,
    sqliteWorker: sqliteWorker ?? null,
    mixed: mixed ?? null,
    ...Object.fromEntries(Object.entries(pipeline).map(([k, { text, ...v }]) => [k, v]))
  }
  writeFileSync(path.join(BENCH_DIR, "last.json"), JSON.stringify(out, null, 2))
  const { results: rs, ...rest } = out
  appendFileSync(
    path.join(BENCH_DIR, "history.jsonl"),
    JSON.stringify({ ...rest, profiles: undefined, results: rs.map(({ raw, ...r }) => r) }) + "\n"
  )
  log(`wrote ${path.relative(ROOT, path.join(BENCH_DIR, "last.json"))}`)
}

const onSignal = (signal) => {
  console.error(`\n${signal}: stopping servers`)
  killAllChildren()
  dropCreatedDatabases().finally(() => process.exit(130))
}
process.on("SIGINT", onSignal)
process.on("SIGTERM", onSignal)

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e?.stack ?? e)
    killAllChildren()
    dropCreatedDatabases().finally(() => process.exit(1))
  }
)
