// HTTP scenarios: what each load run sends, and the runners that start a server
// (bare baseline or attestd on SQLite/Postgres), prepare it (API key, seeded
// hashes) and drive every scenario against it.
import * as path from "node:path"
import {
  analyzePg,
  attestationStats,
  BENCH_DIR,
  createApiKey,
  createPgDatabase,
  dropPgDatabase,
  newestProfile,
  randomHashHex,
  runLoad,
  seedHashes,
  startAttestd,
  startBareServer,
  summarizeProfile
} from "./lib.mjs"

const JSON_HEADERS = { "content-type": "application/json" }
const FIXED_HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

/** Cycles through `hashes`, one per request, across all connections. */
const cycling = (hashes) => {
  let i = 0
  return (req) => {
    req.body = `{"hash_hex":"${hashes[i++ % hashes.length]}"}`
    return req
  }
}

/** A POST of the `existing` hashes in turn to `path`, with `key` as its bearer credential when given. */
const cycledPost = (path, existing, key) => ({
  method: "POST",
  path,
  headers: key === undefined ? JSON_HEADERS : { ...JSON_HEADERS, authorization: `Bearer ${key}` },
  body: JSON.stringify({ hash_hex: existing[0] }),
  setupRequest: cycling(existing)
})

/**
 * Scenario name → { server, baseline, describe, request(ctx) } where ctx is
 * { key, existing } for attestd. `baseline` is the bare scenario it is compared to.
 */
export const SCENARIOS = {
  "bare-post": {
    server: "bare",
    describe: "POST fixed JSON to bare node:http",
    request: () => ({ method: "POST", path: "/v1/verify", headers: JSON_HEADERS, body: JSON.stringify({ hash_hex: FIXED_HASH }) })
  },
  "bare-get": {
    server: "bare",
    describe: "GET from bare node:http",
    request: () => ({ method: "GET", path: "/v1/test-vectors.json" })
  },
  "trivial-get": {
    server: "attestd",
    baseline: "bare-get",
    describe: "GET /v1/test-vectors.json (precomputed, no DB)",
    request: () => ({ method: "GET", path: "/v1/test-vectors.json" })
  },
  "attest-new": {
    server: "attestd",
    baseline: "bare-post",
    // issue 12's targets: req/s ratio to the bare POST in the same run, per store
    target: { sqlite: 0.15, pg: 0.1 },
    batchStats: true,
    describe: "POST /v1/attest, fresh random hash each request",
    request: ({ key }) => ({
      method: "POST",
      path: "/v1/attest",
      headers: { ...JSON_HEADERS, authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: FIXED_HASH }),
      setupRequest: (req) => {
        req.body = `{"hash_hex":"${randomHashHex()}"}`
        return req
      }
    })
  },
  "attest-existing": {
    server: "attestd",
    baseline: "bare-post",
    describe: "POST /v1/attest, 1000 pre-attested hashes cycled (same key)",
    request: ({ key, existing }) => cycledPost("/v1/attest", existing, key)
  },
  verify: {
    server: "attestd",
    baseline: "bare-post",
    target: { sqlite: 0.25, pg: 0.2 },
    describe: "POST /v1/verify (public, no key), 1000 existing hashes cycled",
    request: ({ existing }) => cycledPost("/v1/verify", existing)
  },
  "verify-keyed": {
    server: "attestd",
    baseline: "bare-post",
    describe: "POST /v1/verify with the key that attested them (its claim's source in the answer), 1000 existing hashes cycled",
    request: ({ key, existing }) => cycledPost("/v1/verify", existing, key)
  }
}

export const BARE_SCENARIOS = Object.keys(SCENARIOS).filter((s) => SCENARIOS[s].server === "bare")
export const ATTESTD_SCENARIOS = Object.keys(SCENARIOS).filter((s) => SCENARIOS[s].server === "attestd")

const runScenario = async ({ server, label, scenario, ctx, load, postgres = false, log }) => {
  const spec = SCENARIOS[scenario]
  log(`  ${label} ${scenario}: ${spec.describe} …`)
  const statsBefore = spec.batchStats ? await attestationStats(server).catch(() => undefined) : undefined
  const result = await runLoad({
    ...load,
    url: server.url,
    request: spec.request(ctx),
    serverPid: server.pid,
    metricsUrl: server.metricsUrl,
    postgres,
    title: `${label} ${scenario}`
  })
  if (statsBefore) {
    const after = await attestationStats(server).catch(() => undefined)
    if (after) {
      // includes the warm-up's requests: a mean over the whole scenario
      const rows = after.rows - statsBefore.rows
      const batches = after.batches - statsBefore.batches
      result.groupCommit = { rows, batches, meanBatch: batches > 0 ? rows / batches : undefined }
    }
  }
  const flag = result.non2xx > 0 || result.errors > 0 ? `  <-- ${result.non2xx} non-2xx, ${result.errors} errors!` : ""
  const loop = result.loopBusy === undefined ? "" : `, event loop ${(100 * result.loopBusy).toFixed(0)}% busy`
  const gc = result.groupCommit?.meanBatch ? `, group commit ${result.groupCommit.meanBatch.toFixed(1)} hashes/transaction` : ""
  log(`    ${Math.round(result.rps)} req/s, p50 ${result.p50} ms, p99 ${result.p99} ms, server ${result.serverCpuUsPerReq?.toFixed(0)} µs CPU/req${loop}${gc}${flag}`)
  return { server: label, db: server.db ?? null, scenario, describe: spec.describe, baseline: spec.baseline ?? null, target: spec.target?.[server.db] ?? null, ...result }
}

/** Bare baseline: one server process, every bare scenario. */
export const benchBare = async ({ scenarios = BARE_SCENARIOS, load, log = console.log }) => {
  const server = await startBareServer()
  try {
    const out = []
    for (const s of scenarios) out.push(await runScenario({ server, label: "bare", scenario: s, ctx: {}, load, log }))
    return out
  } finally {
    await server.stop()
  }
}

/**
 * A fresh database on `db` ("sqlite" | "pg"), one attestd server on it, an API key and
 * `seed` pre-attested hashes; runs `use(server, { key, existing })`, then stops the
 * server (so a --cpu-prof profile is written) and drops the database.
 */
export const withSeededAttestd = async ({ db, label = db, seed = 1000, profileDir, serveArgs = [], log = console.log }, use) => {
  const dbName = `attestd_bench_${process.pid}_${label.replace(/[^a-z0-9]/g, "")}`
  const pgSettings = process.env.BENCH_PG_SYNC_COMMIT ? { synchronous_commit: process.env.BENCH_PG_SYNC_COMMIT } : {}
  const databaseUrl = db === "pg" ? await createPgDatabase(dbName, pgSettings) : undefined
  let server
  try {
    server = await startAttestd({ name: `attestd-${label}`, databaseUrl, profileDir, serveArgs })
    log(`  ${label}: attestd up in ${server.startMs.toFixed(0)} ms (${server.url}, ${databaseUrl ?? `sqlite in ${server.dataDir}`})`)
    const key = await createApiKey({ env: server.env })
    const existing = Array.from({ length: seed }, randomHashHex)
    const created = await seedHashes(server.url, key, existing)
    if (created !== seed) throw new Error(`seeded ${created} of ${seed} hashes`)
    // before each scenario on Postgres: the statistics autovacuum would keep (lib.mjs analyzePg)
    const analyze = db === "pg" ? () => analyzePg(databaseUrl) : async () => {}
    const result = await use(server, { key, existing, analyze })
    await server.stop()
    server = undefined
    return result
  } finally {
    if (server) await server.stop()
    if (db === "pg") await dropPgDatabase(dbName).catch((e) => log(`  could not drop ${dbName}: ${e.message}`))
  }
}

/**
 * attestd on `db` ("sqlite" | "pg"): fresh database, one server, an API key,
 * `seed` pre-attested hashes, then each scenario. With profileDir the server
 * runs under --cpu-prof and the summary of its profile is returned too.
 */
export const benchAttestd = async ({ db, scenarios = ATTESTD_SCENARIOS, load, seed = 1000, profileDir, serveArgs = [], label = db, log = console.log }) => {
  const out = await withSeededAttestd({ db, label, seed, profileDir, serveArgs, log }, async (server, ctx) => {
    const results = []
    for (const s of scenarios) {
      await ctx.analyze()
      results.push(await runScenario({ server, label, scenario: s, ctx, load, postgres: db === "pg", log }))
    }
    return results
  })
  if (!profileDir) return { results: out }
  const profile = summarizeProfile(newestProfile(profileDir), {
    window: { startUs: Math.min(...out.map((r) => r.window.startUs)), endUs: Math.max(...out.map((r) => r.window.endUs)) }
  })
  return { results: out, profile }
}

/** One profiled server per scenario, so each profile shows one workload. */
export const profileScenarios = async ({ db, scenarios, load, serveArgs = [], log = console.log }) => {
  const out = {}
  for (const s of scenarios) {
    const profileDir = path.join(BENCH_DIR, "prof", `${db}-${s}-${Date.now()}`)
    const { results, profile } = await benchAttestd({ db, scenarios: [s], load, profileDir, serveArgs, label: `${db}-prof`, log })
    out[`${db} ${s}`] = { result: results[0], profile }
  }
  return out
}
