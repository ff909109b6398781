#!/usr/bin/env node
// The bench: requests per second of attestd on SQLite and on Postgres against a bare node:http
// server measured in the same run, with the targets of issue 41 beside the medians.
//
//   npm run bench                                   # build, then 3 rounds of 5 s per scenario
//   BENCH_ROUNDS=1 BENCH_DURATION=3 node scripts/bench.mjs
//
// Environment: BENCH_ROUNDS (3), BENCH_DURATION seconds per scenario (5), BENCH_WARMUP requests
// before each, not counted (3000), BENCH_CONNECTIONS (50), BENCH_ONLY (baseline,sqlite,pg;
// `signers` is opt-in: signatures per second through a SoftHSM2 token vs node:crypto, and
// SQLite attest-new with each signer; `BENCH_ONLY=signers` runs only that),
// BENCH_SCENARIOS (attest-new,attest-existing,verify,trivial-get,timestamp), BENCH_PG_URL
// (postgres://postgres@127.0.0.1:5432; a database is created per round and dropped).
// The servers inherit the environment, so an ATTESTD_* setting can be compared by running twice.
//
// BENCH_SCALE=1 runs, instead, the registry at scale (docs/scale.md): per store, attest-new and
// verify on an empty registry and on one of BENCH_SCALE_ROWS attestations (10,000,000) written by
// SQL, as ratios; sealing BENCH_SCALE_SEAL pending attestations (1,000,000) by the real worker;
// bytes on disk per attestation. Heavy (10M rows: ~10 GB per store, minutes to generate): run it
// alone. BENCH_SCALE_ROUNDS (2) alternates the two registries; BENCH_ONLY=sqlite or pg narrows it.
//
// Each server is a child process (`node dist/bin.js serve`, the real CLI; the bare server is this
// script with the argument `bare-server`), so it does not share an event loop with autocannon,
// which runs here. A round starts a fresh server and database per store and stops it after its
// scenarios, so an idle server's workers (the sealer) never run beside another one's load. The
// warm-up is a count of requests, not seconds: a route's first thousand requests cost several
// times its later ones (the JIT), and a busy machine makes fewer of them per second.
// The server's CPU per request is read from /proc/<pid>/stat; on Postgres, the column beside it
// is the local cluster's CPU per request (its processes named `postgres`), which shares the cores.
// The bare server runs through the round: measured first (its row in the table), and again just
// before each attestd scenario, whose ratio is taken to that measurement. Beside it runs the
// platform's floors (`httpapi-server`): an HttpApi app whose GET endpoint answers the trivial GET's
// document and whose POST endpoint decodes a verify's body and encodes the bare server's answer,
// each measured after its bare run: what the HttpApi stack costs before attestd's layers.
// The table shows medians over the rounds; bench-results.json has every round.
import autocannon from "autocannon"
import Database from "better-sqlite3"
import * as asn1js from "asn1js"
import { randomBytes } from "node:crypto"
import * as pkijs from "pkijs"
import { execFile, execFileSync, spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { freePort, randomHashHex, sleep } from "./common.mjs"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const BIN = join(ROOT, "dist/bin.js")
const RESULTS_FILE = join(ROOT, "bench-results.json")

function envList(name, fallback) {
  return (process.env[name] ?? fallback).split(",").map((s) => s.trim()).filter((s) => s !== "")
}

async function main() {
  if (process.env.BENCH_SCALE === "1") return scaleMain()
  const config = {
    rounds: Number(process.env.BENCH_ROUNDS ?? 3),
    duration: Number(process.env.BENCH_DURATION ?? 5),
    warmup: Number(process.env.BENCH_WARMUP ?? 3000),
    connections: Number(process.env.BENCH_CONNECTIONS ?? 50),
    only: envList("BENCH_ONLY", "baseline,sqlite,pg"),
    scenarios: envList("BENCH_SCENARIOS", Object.keys(SCENARIOS).join(","))
  }
  for (const s of config.scenarios) if (!(s in SCENARIOS)) throw new Error(`unknown scenario ${s}`)
  const rounds = []
  for (let round = 1; round <= config.rounds; round++) {
    const runs = []
    const record = (store, scenario, result) => {
      runs.push({ store, scenario, ...result })
      const flag = result.non2xx + result.errors > 0 ? `  (${result.non2xx} non-2xx, ${result.errors} errors)` : ""
      const db = result.dbCpuUsPerRequest === undefined ? "" : `, Postgres ${Math.round(result.dbCpuUsPerRequest)} µs`
      console.log(`  ${store} ${scenario}: ${Math.round(result.rps)} req/s, ${Math.round(result.cpuUsPerRequest)} µs CPU/req${db}${flag}`)
    }
    console.log(`round ${round} of ${config.rounds}`)
    const inRound = async (bare, floor) => {
      if (bare !== undefined) {
        const measured = {}
        for (const scenario of ["POST", "GET"]) record("bare", scenario, measured[scenario] = await load(bare, BARE[scenario], config))
        record("HttpApi", "trivial-get", { ...(await load(floor, BARE.GET, config)), bareRps: measured.GET.rps })
        record("HttpApi", "verify", { ...(await load(floor, BARE.POST, config)), bareRps: measured.POST.rps })
      }
      for (const store of ["sqlite", "pg"].filter((s) => config.only.includes(s))) {
        await withAttestd(store, round, async (server, ctx) => {
          for (const scenario of config.scenarios) {
            await ctx.analyze()
            // The scenario's baseline again, just before it: a shared host drifts within a round,
            // and its ratio is taken to this measurement (see summarize).
            const paired = bare === undefined ? undefined : await load(bare, BARE[SCENARIOS[scenario].baseline], config)
            const result = await ctx.analyzing(load(server, SCENARIOS[scenario].request(ctx), config))
            record(store, scenario, paired === undefined ? result : { ...result, bareRps: paired.rps })
          }
        })
      }
    }
    if (config.only.includes("baseline")) await withBareServer(inRound)
    else await inRound(undefined)
    rounds.push(runs)
  }
  const signers = config.only.includes("signers") ? await benchSigners(config) : undefined
  const summary = summarize(rounds)
  if (rounds.some((runs) => runs.length > 0)) printTable(summary, config)
  writeFileSync(RESULTS_FILE, JSON.stringify({ at: new Date().toISOString(), commit: gitHead(), node: process.version, config, summary, rounds, signers }, null, 2) + "\n")
  console.log(`\nwritten ${RESULTS_FILE}`)
}

// ---------------------------------------------------------------------------
// scenarios

const JSON_HEADERS = { "content-type": "application/json" }

/** A POST of { hash_hex } to `path`, the hash chosen by `next()` for each request. */
const post = (path, next, key) => ({
  method: "POST",
  path,
  headers: key === undefined ? JSON_HEADERS : { ...JSON_HEADERS, authorization: `Bearer ${key}` },
  body: JSON.stringify({ hash_hex: "0".repeat(64) }),
  setupRequest: (req) => {
    req.body = `{"hash_hex":"${next()}"}`
    return req
  }
})

const cycle = (hashes) => {
  let i = 0
  return () => hashes[i++ % hashes.length]
}

/**
 * A DER TimeStampReq as `openssl ts -query -sha256 -cert` sends it (no nonce), built once with
 * pkijs around a marker digest; each request gets a fresh random digest in the marker's place.
 */
const timestampQuery = () => {
  const marker = Buffer.alloc(32, 0xa5)
  const template = Buffer.from(new pkijs.TimeStampReq({
    version: 1,
    messageImprint: new pkijs.MessageImprint({
      hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: "2.16.840.1.101.3.4.2.1", algorithmParams: new asn1js.Null() }),
      hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(marker) })
    }),
    certReq: true
  }).toSchema().toBER())
  const at = template.indexOf(marker)
  return {
    method: "POST",
    path: "/v1/timestamp",
    headers: { "content-type": "application/timestamp-query" },
    body: template,
    setupRequest: (req) => {
      const body = Buffer.from(template)
      randomBytes(32).copy(body, at)
      req.body = body
      return req
    }
  }
}

const BARE = {
  POST: post("/v1/verify", randomHashHex),
  GET: { method: "GET", path: "/v1/test-vectors.json" }
}

/**
 * attestd's scenarios: `baseline` is the bare scenario its ratio is taken to, `targets` the
 * ratios issue 41 asks for per store. The trivial GET is the test vectors, an answer built at
 * start (no database), so it measures the HttpApi stack: /v1/healthz (a query and every health
 * probe) made a third of its req/s here, /v1/keys (a query) about half.
 */
const SCENARIOS = {
  "attest-new": {
    baseline: "POST",
    targets: { sqlite: 0.08, pg: 0.07 },
    request: ({ key }) => post("/v1/attest", randomHashHex, key)
  },
  "attest-existing": {
    baseline: "POST",
    request: ({ key, existing }) => post("/v1/attest", cycle(existing), key)
  },
  verify: {
    baseline: "POST",
    targets: { sqlite: 0.12, pg: 0.12 },
    request: ({ existing }) => post("/v1/verify", cycle(existing))
  },
  "trivial-get": {
    baseline: "GET",
    targets: { sqlite: 0.15, pg: 0.15 },
    request: () => BARE.GET
  },
  // issue 44: RFC 3161 tokens (public access), each signed, registered (two attestations) and stored
  timestamp: {
    baseline: "POST",
    targets: { sqlite: 0.06, pg: 0.06 },
    request: () => timestampQuery()
  }
}

// ---------------------------------------------------------------------------
// load

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim())

/** User plus system CPU in µs of the process whose /proc/<pid>/stat is `stat`. */
const cpuOfStat = (stat) => {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLK_TCK
}

/** User plus system CPU of a process so far, in µs. */
const cpuUs = (pid) => cpuOfStat(readFileSync(`/proc/${pid}/stat`, "utf8"))

/**
 * User plus system CPU so far, in µs, by pid, of this machine's processes named `postgres`: the
 * cluster's backends and its background writers (none when Postgres runs elsewhere). They share
 * the two cores with attestd and the load generator, so they are part of what a scenario costs.
 */
const postgresCpu = () => {
  const byPid = new Map()
  for (const entry of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry)) continue
    let stat
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8")
    } catch {
      continue // it ended meanwhile
    }
    if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) === "postgres") byPid.set(entry, cpuOfStat(stat))
  }
  return byPid
}

/**
 * The CPU Postgres's processes spent since `before` (postgresCpu): of those running now. A
 * connection opened and closed meanwhile (the bench's own ANALYZE) is not counted.
 */
const postgresCpuSince = (before) => {
  let spent = 0
  for (const [pid, cpu] of postgresCpu()) spent += cpu - (before.get(pid) ?? 0)
  return spent
}

const load = async (server, request, { connections, duration, warmup }) => {
  const run = (limit) => autocannon({ url: server.url, connections, requests: [request], ...limit })
  if (warmup > 0) await run({ amount: warmup })
  const cpuBefore = cpuUs(server.pid)
  const dbBefore = server.postgres === true ? postgresCpu() : undefined
  const r = await run({ duration })
  const total = r.requests.total
  const dbCpu = dbBefore === undefined ? 0 : postgresCpuSince(dbBefore)
  return {
    rps: total / r.duration,
    requests: total,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    cpuUsPerRequest: (cpuUs(server.pid) - cpuBefore) / Math.max(1, total),
    dbCpuUsPerRequest: dbCpu > 0 ? dbCpu / Math.max(1, total) : undefined,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts
  }
}

// ---------------------------------------------------------------------------
// servers

/** The trivial GET's document (the test vectors), built by attestd's own function from dist/. */
const trivialGetDocument = async () => {
  const { testVectors } = await import(join(ROOT, "dist/Info/TestVectors.js"))
  return Buffer.from(JSON.stringify(testVectors()))
}

/**
 * The baseline: reads a POST's JSON body to the end and parses it; answers a small JSON (about
 * the size of a verify answer). A GET answers the trivial GET's own document (the test vectors,
 * built by the same function from dist/), so both servers write the same bytes per GET.
 */
const bareServer = async (port) => {
  const body = JSON.stringify({ exists: true, hash_hex: "0".repeat(64), level: "T0" })
  const headers = { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) }
  const document = await trivialGetDocument()
  const getHeaders = { "content-type": "application/json", "content-length": String(document.length) }
  createServer((req, res) => {
    if (req.method === "GET") return res.writeHead(200, getHeaders).end(document)
    let text = ""
    req.setEncoding("utf8")
    req.on("data", (chunk) => (text += chunk))
    req.on("end", () => {
      JSON.parse(text)
      res.writeHead(200, headers).end(body)
    })
  }).listen(port, "127.0.0.1")
}

/**
 * The platform's floors, served by @effect/platform-node with tracing off, as attestd serves: for
 * the trivial GET an endpoint answering the same document's bytes; for the JSON POSTs one that
 * decodes the bare POST's body (`{ hash_hex }`) by its schema and encodes the bare server's answer.
 * Their ratios to the bare runs are what the HttpApi stack costs before any of attestd's own
 * layers (edge, access log, metrics, headers, errors) and work (keys, limits, SQL, signatures).
 */
const httpApiServer = async (port) => {
  const [HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpServerResponse, HttpMiddleware, NodeHttpServer, NodeRuntime, { Effect, Layer, Schema }] = await Promise.all([
    import("@effect/platform/HttpApi"),
    import("@effect/platform/HttpApiBuilder"),
    import("@effect/platform/HttpApiEndpoint"),
    import("@effect/platform/HttpApiGroup"),
    import("@effect/platform/HttpServerResponse"),
    import("@effect/platform/HttpMiddleware"),
    import("@effect/platform-node/NodeHttpServer"),
    import("@effect/platform-node/NodeRuntime"),
    import("effect")
  ])
  const document = await trivialGetDocument()
  const api = HttpApi.make("floor").add(
    HttpApiGroup.make("info")
      .add(HttpApiEndpoint.get("testVectors", "/test-vectors.json").addSuccess(Schema.Unknown))
      .add(
        HttpApiEndpoint.post("verify", "/verify")
          .setPayload(Schema.Struct({ hash_hex: Schema.String }))
          .addSuccess(Schema.Struct({ exists: Schema.Boolean, hash_hex: Schema.String, level: Schema.String }))
      )
  ).prefix("/v1")
  const info = HttpApiBuilder.group(api, "info", (handlers) =>
    handlers
      .handle("testVectors", () => Effect.succeed(HttpServerResponse.uint8Array(document, { contentType: "application/json" })))
      .handle("verify", ({ payload }) => Effect.succeed({ exists: true, hash_hex: payload.hash_hex, level: "T0" })))
  const served = HttpMiddleware.withTracerDisabledWhen(HttpApiBuilder.serve(), () => true).pipe(
    Layer.provide(HttpApiBuilder.api(api).pipe(Layer.provide(info))),
    Layer.provide(NodeHttpServer.layer(createServer, { port, host: "127.0.0.1" })),
    Layer.provide(Layer.setTracerEnabled(false))
  )
  NodeRuntime.runMain(Layer.launch(served))
}

/** `node args…` with its output in `logFile`; stop() ends it with SIGTERM and waits. */
const startNode = (args, env, logFile) => {
  const out = openSync(logFile, "a")
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ["ignore", out, out] })
  const exited = new Promise((resolve) => child.once("exit", resolve))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM")
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000)
    await exited
    clearTimeout(timer)
  }
  return { pid: child.pid, exited, stop }
}

const waitReady = async (proc, url, logFile) => {
  let exited = false
  proc.exited.then(() => (exited = true))
  for (const deadline = Date.now() + 60_000; Date.now() < deadline && !exited;) {
    const ok = await fetch(url).then((res) => res.arrayBuffer().then(() => res.ok), () => false)
    if (ok) return
    await sleep(100)
  }
  throw new Error(`${url} did not answer${exited ? " (the server exited)" : ""}; log:\n${readFileSync(logFile, "utf8").slice(-3000)}`)
}

const withBareServer = async (use) => {
  const dir = mkdtempSync(join(tmpdir(), "attestd-bench-bare-"))
  const started = []
  const start = async (mode) => {
    const port = await freePort()
    const logFile = join(dir, `${mode}.log`)
    const proc = startNode([fileURLToPath(import.meta.url), mode, String(port)], process.env, logFile)
    started.push(proc)
    const server = { pid: proc.pid, url: `http://127.0.0.1:${port}` }
    await waitReady(proc, `${server.url}${BARE.GET.path}`, logFile)
    return server
  }
  try {
    await use(await start("bare-server"), await start("httpapi-server"))
  } finally {
    for (const proc of started) await proc.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

const PG_URL = (process.env.BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432").replace(/\/+$/, "")

const pgQuery = async (url, text) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(text)
  } finally {
    await client.end()
  }
}

/** Runs the CLI (`keys create` …) against the server's database; resolves with its stdout. */
const cli = (args, env) =>
  new Promise((resolve, reject) =>
    execFile(process.execPath, [BIN, ...args], { cwd: ROOT, env, timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`attestd ${args.join(" ")}: ${err.message}\n${stderr}`)) : resolve(stdout)))

const EXISTING = 100

/**
 * Runs `load` while the tables attest-new grows are analyzed every second. In production
 * autovacuum keeps the statistics within ~10% of a table (docs/operations.md), but the
 * Postgres the bench runs on has it off and attest-new takes the registry from 100 rows to
 * ~20,000 in seconds: planned on the statistics of 100 rows, the group's read by digest
 * scanned the whole registry, ~300 times a second (0.056–0.060× against 0.067–0.075× analyzed).
 */
const analyzingDuring = (databaseUrl) => async (load) => {
  let stopped = false
  // settles with its error, if any, so a failed ANALYZE is thrown after the load, not unhandled
  const analyzing = (async () => {
    while (!stopped) {
      await pgQuery(databaseUrl, "ANALYZE registry, claims, pending_seals")
      await sleep(1000)
    }
  })().then(() => undefined, (error) => error)
  try {
    return await load
  } finally {
    stopped = true
    const error = await analyzing
    if (error !== undefined) throw error
  }
}

/**
 * attestd on a fresh database of `store`: an API key with scope attest (a rate limit it will not
 * reach), the server, and EXISTING hashes attested; `use(server, { key, existing, analyze, analyzing })`.
 */
const withAttestd = async (store, round, use, extraEnv = {}) => {
  const dir = mkdtempSync(join(tmpdir(), `attestd-bench-${store}-`))
  const dbName = `attestd_bench_${process.pid}_${round}`
  const databaseUrl = store === "pg" ? `${PG_URL}/${dbName}` : undefined
  const port = await freePort()
  // The sealer seals, at each wall-clock boundary of its interval (a minute by default), all that
  // was attested since: in a run of seconds that lands on one scenario at random and charges it
  // the whole window. A day keeps it out of the figures; ATTESTD_SEAL_INTERVAL set here wins.
  const env = {
    ATTESTD_SEAL_INTERVAL: "24h",
    ...process.env,
    PORT: String(port),
    HOST: "127.0.0.1",
    ATTESTD_DATA_DIR: dir,
    ATTESTD_MODE: "demo",
    ATTESTD_PUBLIC_RATE_LIMIT: "0",
    ...extraEnv
  }
  delete env.DATABASE_URL
  if (databaseUrl !== undefined) env.DATABASE_URL = databaseUrl
  const logFile = join(dir, "server.log")
  let proc
  try {
    if (store === "pg") await pgQuery(`${PG_URL}/postgres`, `CREATE DATABASE ${dbName}`)
    const created = await cli(["keys", "create", "--label", "bench", "--scopes", "attest", "--rate-limit", "1000000000"], env)
    const key = JSON.parse(created.trim().split("\n").pop()).key
    proc = startNode([BIN, "serve"], env, logFile)
    const server = { pid: proc.pid, url: `http://127.0.0.1:${port}`, postgres: store === "pg" }
    await waitReady(proc, `${server.url}/v1/healthz`, logFile)
    const existing = Array.from({ length: EXISTING }, randomHashHex)
    for (const hash of existing) {
      const res = await fetch(`${server.url}/v1/attest`, {
        method: "POST",
        headers: { ...JSON_HEADERS, authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex: hash })
      })
      if (!res.ok) throw new Error(`attesting a seed hash: HTTP ${res.status} ${await res.text()}`)
      await res.arrayBuffer()
    }
    // Postgres here runs with autovacuum off: without fresh statistics the planner plans keyed
    // reads on the empty tables of the start, which attest-new has since filled.
    const analyze = store === "pg" ? () => pgQuery(databaseUrl, "ANALYZE") : async () => {}
    await use(server, { key, existing, analyze, analyzing: store === "pg" ? analyzingDuring(databaseUrl) : (load) => load })
  } finally {
    await proc?.stop()
    if (store === "pg") await pgQuery(`${PG_URL}/postgres`, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    rmSync(dir, { recursive: true, force: true })
  }
}

// ---------------------------------------------------------------------------
// signers (opt-in): the PKCS#11 custody over SoftHSM2 against node:crypto's

const SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"

/** A SoftHSM2 token in a temporary directory; its settings as attestd reads them. */
const softToken = () => {
  const dir = mkdtempSync(join(tmpdir(), "attestd-bench-softhsm-"))
  const conf = join(dir, "softhsm2.conf")
  mkdirSync(join(dir, "tokens"), { mode: 0o700 })
  writeFileSync(conf, `directories.tokendir = ${join(dir, "tokens")}\nobjectstore.backend = file\nlog.level = ERROR\n`)
  execFileSync("softhsm2-util", ["--init-token", "--free", "--label", "bench", "--pin", "1234", "--so-pin", "5678"], { env: { ...process.env, SOFTHSM2_CONF: conf }, stdio: "ignore" })
  writeFileSync(join(dir, "pin"), "1234\n", { mode: 0o600 })
  return {
    dir,
    env: { SOFTHSM2_CONF: conf, ATTESTD_SIGNER: "pkcs11", ATTESTD_PKCS11_MODULE: SOFTHSM_MODULE, ATTESTD_PKCS11_TOKEN: "bench", ATTESTD_PKCS11_PIN_FILE: join(dir, "pin") }
  }
}

/**
 * Signatures per second of one key of each custody, as the Signer calls it (an Effect per
 * signature: SHA-256 and ECDSA, DER, low-S), with 1, 4, 16 and 64 in flight (the token's signing
 * threads: ATTESTD_PKCS11_WORKERS, default 2); and the binding alone (C_SignInit + C_Sign,
 * synchronous, on the event loop), to show what the threads and Effect add.
 */
const signatureRates = async (token, seconds) => {
  const { Effect, ManagedRuntime, Option } = await import("effect")
  const { KeyCustody } = await import("../dist/Platform/Keys/Custody.js")
  const { layerFileKeys } = await import("../dist/Platform/Keys/FileKeys.js")
  const { layerPkcs11Keys } = await import("../dist/Platform/Keys/Pkcs11Keys.js")
  const { DEFAULT_PKCS11_WORKERS } = await import("../dist/Platform/Config.js")
  process.env.SOFTHSM2_CONF = token.env.SOFTHSM2_CONF
  const workers = Number(process.env.ATTESTD_PKCS11_WORKERS ?? DEFAULT_PKCS11_WORKERS)
  const message = new TextEncoder().encode(`2.0.0|${randomHashHex()}|2026-01-01T00:00:00.000000+00:00`)
  const custodies = {
    "node:crypto": layerFileKeys(join(token.dir, "files"), Option.none()),
    [`pkcs11, ${workers} threads`]: layerPkcs11Keys({ module: SOFTHSM_MODULE, token: "bench", pinFile: token.env.ATTESTD_PKCS11_PIN_FILE, workers })
  }
  const out = []
  for (const [name, layer] of Object.entries(custodies)) {
    const runtime = ManagedRuntime.make(layer)
    try {
      const key = await runtime.runPromise(Effect.flatMap(KeyCustody, (c) => c.generate("t0", Date.now())))
      for (const concurrency of [1, 4, 16, 64]) {
        // Rounds of SIGN_ROUND signatures: a round's tail has fewer in flight, a small share of a long one.
        const batch = Effect.forEach(Array.from({ length: SIGN_ROUND }), () => key.sign(message), { concurrency, discard: true })
        await runtime.runPromise(batch) // warm-up
        let n = 0
        const cpu = process.cpuUsage()
        const started = performance.now()
        while (performance.now() - started < seconds * 1000) {
          await runtime.runPromise(batch)
          n += SIGN_ROUND
        }
        const us = ((performance.now() - started) * 1000) / n
        out.push({ signer: name, concurrency, signaturesPerSecond: 1e6 / us, usPerSignature: us, cpuUsPerSignature: cpuOf(cpu) / n })
      }
    } finally {
      await runtime.dispose()
    }
  }
  out.push(await rawPkcs11Rate(token, message, seconds))
  return out
}

/** Signatures per round of the signer rates, each round waited for to its end. */
const SIGN_ROUND = 2000

/** The process's CPU (every thread, user and system) since `since`, in µs. */
const cpuOf = (since) => {
  const { user, system } = process.cpuUsage(since)
  return user + system
}

/** pkcs11js alone: C_SignInit + C_Sign (synchronous, on the event loop) with a token key, one at a time. */
const rawPkcs11Rate = async (token, message, seconds) => {
  const { createRequire } = await import("node:module")
  const { createHash } = await import("node:crypto")
  const p11 = createRequire(import.meta.url)("pkcs11js")
  const pk = new p11.PKCS11()
  pk.load(SOFTHSM_MODULE)
  pk.C_Initialize({ flags: p11.CKF_OS_LOCKING_OK })
  try {
    const slot = pk.C_GetSlotList(true).find((s) => pk.C_GetTokenInfo(s).label.trim() === "bench")
    const session = pk.C_OpenSession(slot, p11.CKF_SERIAL_SESSION)
    pk.C_Login(session, p11.CKU_USER, "1234")
    pk.C_FindObjectsInit(session, [{ type: p11.CKA_CLASS, value: p11.CKO_PRIVATE_KEY }])
    const [handle] = pk.C_FindObjects(session, 1)
    pk.C_FindObjectsFinal(session)
    const digest = createHash("sha256").update(message).digest()
    const sign = () => {
      pk.C_SignInit(session, { mechanism: p11.CKM_ECDSA }, handle)
      pk.C_Sign(session, digest, Buffer.alloc(64))
    }
    for (let i = 0; i < 200; i++) sign()
    let n = 0
    const cpu = process.cpuUsage()
    const started = performance.now()
    while (performance.now() - started < seconds * 1000) {
      for (let i = 0; i < 200; i++) sign()
      n += 200
    }
    const us = ((performance.now() - started) * 1000) / n
    return { signer: "pkcs11js C_Sign (sync, raw)", concurrency: 1, signaturesPerSecond: 1e6 / us, usPerSignature: us, cpuUsPerSignature: cpuOf(cpu) / n }
  } finally {
    pk.C_Finalize()
  }
}

const benchSigners = async (config) => {
  const token = softToken()
  try {
    console.log("signers: signatures per second")
    const rates = await signatureRates(token, config.duration)
    for (const r of rates) console.log(`  ${r.signer} ×${r.concurrency}: ${Math.round(r.signaturesPerSecond)} signatures/s, ${r.usPerSignature.toFixed(1)} µs each, ${r.cpuUsPerSignature.toFixed(1)} µs CPU`)
    const node = rates.find((r) => r.signer === "node:crypto" && r.concurrency === 1)
    const attest = []
    for (const [signer, env] of [["file", {}], ["pkcs11", token.env]]) {
      await withAttestd("sqlite", `signer-${signer}`, async (server, ctx) => {
        const result = await load(server, SCENARIOS["attest-new"].request(ctx), config)
        attest.push({ signer, ...result })
        console.log(`  sqlite attest-new, signer ${signer}: ${Math.round(result.rps)} req/s, ${Math.round(result.cpuUsPerRequest)} µs CPU/req`)
      }, env)
    }
    console.log("\nsigner                          in flight  signatures/s  µs/signature  × node:crypto  µs CPU/signature")
    for (const r of rates) {
      console.log(`${r.signer.padEnd(32)}${String(r.concurrency).padStart(9)}${Math.round(r.signaturesPerSecond).toString().padStart(14)}${r.usPerSignature.toFixed(1).padStart(14)}${(r.usPerSignature / node.usPerSignature).toFixed(2).padStart(15)}${r.cpuUsPerSignature.toFixed(1).padStart(18)}`)
    }
    for (const a of attest) console.log(`sqlite attest-new, signer ${a.signer}: ${Math.round(a.rps)} req/s`)
    return { rates, attest }
  } finally {
    rmSync(token.dir, { recursive: true, force: true })
  }
}

// ---------------------------------------------------------------------------
// report

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** Per store and scenario: medians over the rounds; each round's ratio is to that round's bare run. */
const summarize = (rounds) => {
  const rows = new Map()
  for (const runs of rounds) {
    for (const run of runs) {
      const key = `${run.store} ${run.scenario}`
      const spec = SCENARIOS[run.scenario]
      // the baseline measured just before the scenario, else the round's first
      const bareRps = run.bareRps ?? (spec && runs.find((r) => r.store === "bare" && r.scenario === spec.baseline))?.rps
      const row = rows.get(key) ?? { store: run.store, scenario: run.scenario, rps: [], cpu: [], dbCpu: [], ratios: [], failed: 0 }
      row.rps.push(run.rps)
      row.cpu.push(run.cpuUsPerRequest)
      if (run.dbCpuUsPerRequest !== undefined) row.dbCpu.push(run.dbCpuUsPerRequest)
      if (bareRps !== undefined) row.ratios.push(run.rps / bareRps)
      row.failed += run.non2xx + run.errors
      rows.set(key, row)
    }
  }
  return [...rows.values()].map(({ cpu, dbCpu, ratios, rps, ...row }) => {
    const spec = SCENARIOS[row.scenario]
    const target = spec?.targets?.[row.store]
    const ratio = ratios.length > 0 ? median(ratios) : undefined
    return {
      ...row,
      baseline: spec?.baseline,
      rps: median(rps),
      cpuUsPerRequest: median(cpu),
      dbCpuUsPerRequest: dbCpu.length > 0 ? median(dbCpu) : undefined,
      ratio,
      ratios,
      target,
      met: target === undefined || ratio === undefined ? undefined : ratio >= target
    }
  })
}

const printTable = (summary, { rounds, duration, connections }) => {
  console.log(`\nmedians of ${rounds} round(s), ${duration} s per scenario, ${connections} connections\n`)
  const header = ["store", "scenario", "req/s", "× bare", "µs CPU/req", "Postgres µs", "target", "", "failed"]
  const lines = summary.map((r) => [
    r.store,
    r.scenario,
    Math.round(r.rps).toLocaleString("en-US"),
    r.ratio === undefined ? "" : `${r.ratio.toFixed(3)}× ${r.baseline}`,
    Math.round(r.cpuUsPerRequest).toString(),
    r.dbCpuUsPerRequest === undefined ? "" : Math.round(r.dbCpuUsPerRequest).toString(),
    r.target === undefined ? "" : `≥ ${r.target}×`,
    r.met === undefined ? "" : r.met ? "met" : "MISSED",
    r.failed > 0 ? String(r.failed) : ""
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)))
  const right = new Set([2, 4, 5, 8])
  for (const line of [header, ...lines]) {
    console.log(line.map((c, i) => (right.has(i) ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd())
  }
}

const gitHead = () => {
  try {
    return execFileSync("git", ["rev-parse", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------
// the registry at scale (BENCH_SCALE=1; docs/scale.md)

const HOURS = 365 * 24
const DAYS = 365
/** Bytes of a demo TSA token (a sealed batch's tsa_token), for the generated batches. */
const TSA_TOKEN_BYTES = 1536
const VERIFY_SAMPLE = 10_000

const scaleMain = async () => {
  const config = {
    rows: Number(process.env.BENCH_SCALE_ROWS ?? 10_000_000),
    seal: Number(process.env.BENCH_SCALE_SEAL ?? 1_000_000),
    rounds: Number(process.env.BENCH_SCALE_ROUNDS ?? 2),
    duration: Number(process.env.BENCH_DURATION ?? 5),
    warmup: Number(process.env.BENCH_WARMUP ?? 3000),
    connections: Number(process.env.BENCH_CONNECTIONS ?? 50),
    only: envList("BENCH_ONLY", "sqlite,pg").filter((s) => s === "sqlite" || s === "pg")
  }
  console.log(`registry at scale: ${config.rows.toLocaleString("en-US")} rows, sealing ${config.seal.toLocaleString("en-US")}`)
  const results = []
  for (const store of config.only) results.push(await scaleStore(store, config))
  printScale(results, config)
  // one file per set of stores: a run per store can go in parallel
  const file = join(ROOT, `bench-scale-results-${config.only.join("-")}.json`)
  writeFileSync(file, JSON.stringify({ at: new Date().toISOString(), commit: gitHead(), node: process.version, config, results }, null, 2) + "\n")
  console.log(`\nwritten ${file}`)
}

const scaleStore = async (store, config) => {
  const empty = await prepareRegistry(store, "empty")
  const full = await prepareRegistry(store, "full")
  try {
    const started = performance.now()
    await generateRegistry(full, config.rows)
    const generateSeconds = (performance.now() - started) / 1000
    console.log(`${store}: ${config.rows.toLocaleString("en-US")} attestations generated in ${generateSeconds.toFixed(0)} s`)
    await settle(full)
    const bytes = await bytesOnDisk(full)
    console.log(`${store}: ${Math.round(bytes.perAttestation.all)} bytes per attestation (attestations ${Math.round(bytes.perAttestation.attestations)})`)
    const plans = await explainHot(full)
    const runs = { empty: [], full: [] }
    for (let round = 1; round <= config.rounds; round++) {
      for (const registry of [empty, full]) {
        const r = await measureRates(registry, config)
        runs[registry.name].push(r)
        console.log(`  ${store} ${registry.name} round ${round}: attest-new ${Math.round(r["attest-new"].rps)} req/s, verify ${Math.round(r.verify.rps)} req/s`)
      }
    }
    const seal = await sealPending(full, config.seal)
    console.log(`${store}: sealed ${seal.leaves.toLocaleString("en-US")} pending in ${seal.seconds.toFixed(1)} s`)
    const rates = {}
    for (const scenario of ["attest-new", "verify"]) {
      const e = median(runs.empty.map((r) => r[scenario].rps))
      const f = median(runs.full.map((r) => r[scenario].rps))
      // CPU per request moves less than req/s on a busy machine (the database's own CPU is not in it)
      const cpuE = median(runs.empty.map((r) => r[scenario].cpuUsPerRequest))
      const cpuF = median(runs.full.map((r) => r[scenario].cpuUsPerRequest))
      rates[scenario] = { empty: e, full: f, ratio: f / e, cpuUsEmpty: cpuE, cpuUsFull: cpuF, cpuRatio: cpuE / cpuF }
    }
    return { store, rows: config.rows, generateSeconds, bytes, plans, rates, runs, seal }
  } finally {
    await empty.drop()
    await full.drop()
  }
}

/** A fresh registry of `store` (database, data dir, an API key with scope attest); `drop()` removes it. */
const prepareRegistry = async (store, name) => {
  const dir = mkdtempSync(join(tmpdir(), `attestd-scale-${store}-${name}-`))
  const dbName = `attestd_scale_${process.pid}_${name}`
  const databaseUrl = store === "pg" ? `${PG_URL}/${dbName}` : `sqlite:${join(dir, "attestd.db")}`
  const env = { ATTESTD_SEAL_INTERVAL: "24h", ...process.env, HOST: "127.0.0.1", ATTESTD_DATA_DIR: dir, ATTESTD_MODE: "demo", ATTESTD_PUBLIC_RATE_LIMIT: "0", DATABASE_URL: databaseUrl }
  if (store === "pg") await pgQuery(`${PG_URL}/postgres`, `CREATE DATABASE ${dbName}`)
  const created = JSON.parse((await cli(["keys", "create", "--label", "bench", "--scopes", "attest", "--rate-limit", "1000000000"], env)).trim().split("\n").pop())
  const drop = async () => {
    if (store === "pg") await pgQuery(`${PG_URL}/postgres`, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    rmSync(dir, { recursive: true, force: true })
  }
  return { store, name, dir, env, databaseUrl, key: created.key, keyId: created.id, rows: 0, drop }
}

/** Runs `f(query)` on the registry's database: `query(text, params?)` resolves with the rows. */
const withRegistryDb = async (registry, f) => {
  if (registry.store === "pg") {
    const client = new pg.Client({ connectionString: registry.databaseUrl })
    await client.connect()
    try {
      return await f(async (text, params = []) => (await client.query(text, params)).rows)
    } finally {
      await client.end()
    }
  }
  const db = new Database(registry.databaseUrl.slice("sqlite:".length))
  try {
    db.pragma("busy_timeout = 60000")
    // the generation's random index inserts stay in memory until the commit
    db.pragma("cache_size = -2000000")
    return await f(async (text, params = []) => {
      const statement = db.prepare(text)
      return statement.reader ? statement.all(...params) : (statement.run(...params), [])
    })
  } finally {
    db.close()
  }
}

/**
 * `rows` attestations over the year before this hour, written by SQL in one transaction, every
 * column as the service would have written it: distinct digests, times spread evenly, one
 * sealed batch per hour (batch_id, leaf_index, t1_at; the batch row with a TSA token of a demo
 * token's size) and one daily root per day, confirmed with a Bitcoin height for every day but
 * the last (whose attestations are T1), the bench key's claim on each, and the dispatched
 * t1_complete/t2_complete events of the outbox. Not written: the Merkle nodes of the generated
 * batches (merkle_chunks; measured on the real seal below) and the calendar submissions
 * (365 rows a year). Signatures have a real signature's size but are not valid.
 */
const generateRegistry = async (registry, rows) => {
  registry.rows = rows
  const startSeconds = Math.floor(Date.now() / 3_600_000) * 3600 - DAYS * 86_400
  const step = (DAYS * 86_400) / rows
  await withRegistryDb(registry, async (query) => {
    const [signing] = await query("SELECT kid FROM signing_keys ORDER BY created_at LIMIT 1")
    const kid = signing?.kid ?? "bench0000000000000000"
    const statements = registry.store === "pg" ? pgGeneration(rows, startSeconds, step, kid, registry.keyId) : sqliteGeneration(rows, startSeconds, step, kid, registry.keyId)
    for (const text of statements) await query(text)
  })
}

const pgTime = (t) => `to_char((${t}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')`
const sqliteTime = (t) => `strftime('%Y-%m-%dT%H:%M:%S', ${t}, 'unixepoch') || '.' || printf('%06d', CAST(((${t}) - CAST((${t}) AS INTEGER)) * 1000000 AS INTEGER)) || '+00:00'`

/**
 * The generated rows' places in the hourly batches (the n rows in seq order, spread evenly over
 * the hours), and none of them pending: the registry's trigger made each one pending.
 */
const sealedLeaves = (n) => [
  `INSERT INTO batch_leaves (attestation_seq, batch_id, leaf_index)
    SELECT seq, h, g - 1 - ((h - 1) * ${n} + ${HOURS} - 1) / ${HOURS}
    FROM (SELECT seq, g, (g - 1) * ${HOURS} / ${n} + 1 AS h FROM (SELECT seq, ROW_NUMBER() OVER (ORDER BY seq) AS g FROM registry) r) x
    ORDER BY seq`,
  "DELETE FROM pending_seals"
]

const pgGeneration = (n, start, step, kid, keyId) => {
  const at = (seconds) => `to_timestamp(${start}) + (${seconds}) * interval '1 second'`
  return [
    "BEGIN",
    `INSERT INTO daily_roots (id, window_end, root, leaves, batch_count, created_at, status, bitcoin_height, bitcoin_merkle_root, confirmed_at)
      SELECT d, ${pgTime(at("d * 86400"))}, encode(sha256(('day' || d)::bytea), 'hex'),
        (SELECT string_agg(sha256(('leaf' || d || '-' || i)::bytea), ''::bytea ORDER BY i) FROM generate_series(1, 24) i), 24,
        ${pgTime(at("d * 86400 + 60"))}, CASE WHEN d < ${DAYS} THEN 'confirmed' ELSE 'pending' END,
        CASE WHEN d < ${DAYS} THEN 800000 + d END, CASE WHEN d < ${DAYS} THEN encode(sha256(('block' || d)::bytea), 'hex') END,
        CASE WHEN d < ${DAYS} THEN ${pgTime(at("d * 86400 + 7200"))} END
      FROM generate_series(1, ${DAYS}) d`,
    `SELECT setval(pg_get_serial_sequence('daily_roots', 'id'), ${DAYS})`,
    `INSERT INTO batches (id, window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at, daily_root_id, daily_leaf_index, t1_at)
      SELECT h, ${pgTime(at("h * 3600"))}, encode(sha256(('root' || h)::bytea), 'hex'),
        (h::bigint * ${n} + ${HOURS} - 1) / ${HOURS} - ((h - 1)::bigint * ${n} + ${HOURS} - 1) / ${HOURS},
        (SELECT string_agg(sha256(('token' || h || '-' || i)::bytea), ''::bytea ORDER BY i) FROM generate_series(1, ${TSA_TOKEN_BYTES / 32}) i),
        'demo', ${pgTime(at("h * 3600 + 1"))}, ${pgTime(at("h * 3600 + 1"))}, (h - 1) / 24 + 1, (h - 1) % 24, ${pgTime(at("h * 3600 + 1"))}
      FROM generate_series(1, ${HOURS}) h`,
    `SELECT setval(pg_get_serial_sequence('batches', 'id'), ${HOURS})`,
    `INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
      SELECT 'att_' || translate(encode(substr(sha256(('id' || g)::bytea), 1, 18), 'base64'), '+/', '-_'),
        encode(sha256(('bench' || g)::bytea), 'hex'), ${pgTime(at(`(g - 1) * ${step}`))},
        translate(encode(sha256(('r' || g)::bytea) || sha256(('s' || g)::bytea) || substr(sha256(('t' || g)::bytea), 1, 8), 'base64'), E'\\n', ''),
        '${kid}', '2.0.0'
      FROM generate_series(1::bigint, ${n}::bigint) g`,
    ...sealedLeaves(n),
    `INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
      SELECT seq, '${keyId}', NULL, NULL, NULL, FALSE, substr(md5('etag' || seq), 1, 24), registered_at, registered_at FROM registry ORDER BY seq`,
    `INSERT INTO outbox (event_type, attestation_seq, created_at, dispatched_at)
      SELECT e, seq, at, at FROM (
        SELECT 't1_complete' AS e, seq, t1_at AS at, 1 AS o FROM attestations
        UNION ALL SELECT 't2_complete', seq, t2_at, 2 FROM attestations WHERE level = 'T2') o ORDER BY at, o, seq`,
    "COMMIT",
    // the generated rows passed through the pending set: give back the space, as a set that
    // only ever held a backlog would not have it (SQLite's freed pages are not the table's)
    "VACUUM FULL pending_seals"
  ]
}

const sqliteGeneration = (n, start, step, kid, keyId) => {
  const series = (name, count) => `WITH RECURSIVE ${name}(${name}) AS (SELECT 1 UNION ALL SELECT ${name} + 1 FROM ${name} WHERE ${name} < ${count})`
  const at = (seconds) => `(${start} + (${seconds}))`
  return [
    "BEGIN",
    `${series("d", DAYS)}
      INSERT INTO daily_roots (id, window_end, root, leaves, batch_count, created_at, status, bitcoin_height, bitcoin_merkle_root, confirmed_at)
      SELECT d, ${sqliteTime(at("d * 86400"))}, lower(hex(randomblob(32))), randomblob(24 * 32), 24, ${sqliteTime(at("d * 86400 + 60"))},
        CASE WHEN d < ${DAYS} THEN 'confirmed' ELSE 'pending' END, CASE WHEN d < ${DAYS} THEN 800000 + d END,
        CASE WHEN d < ${DAYS} THEN lower(hex(randomblob(32))) END, CASE WHEN d < ${DAYS} THEN ${sqliteTime(at("d * 86400 + 7200"))} END
      FROM d`,
    `${series("h", HOURS)}
      INSERT INTO batches (id, window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at, daily_root_id, daily_leaf_index, t1_at)
      SELECT h, ${sqliteTime(at("h * 3600"))}, lower(hex(randomblob(32))),
        (h * ${n} + ${HOURS} - 1) / ${HOURS} - ((h - 1) * ${n} + ${HOURS} - 1) / ${HOURS},
        randomblob(${TSA_TOKEN_BYTES}), 'demo', ${sqliteTime(at("h * 3600 + 1"))}, ${sqliteTime(at("h * 3600 + 1"))}, (h - 1) / 24 + 1, (h - 1) % 24,
        ${sqliteTime(at("h * 3600 + 1"))}
      FROM h`,
    `${series("g", n)}
      INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
      SELECT 'att_' || lower(hex(randomblob(12))), lower(hex(randomblob(32))), ${sqliteTime(at(`(g - 1) * ${step}`))},
        substr(hex(randomblob(48)), 1, 96), '${kid}', '2.0.0'
      FROM g`,
    ...sealedLeaves(n),
    `INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
      SELECT seq, '${keyId}', NULL, NULL, NULL, 0, lower(hex(randomblob(12))), registered_at, registered_at FROM registry ORDER BY seq`,
    `INSERT INTO outbox (event_type, attestation_seq, created_at, dispatched_at)
      SELECT e, seq, at, at FROM (
        SELECT 't1_complete' AS e, seq, t1_at AS at, 1 AS o FROM attestations
        UNION ALL SELECT 't2_complete', seq, t2_at, 2 FROM attestations WHERE level = 'T2') ORDER BY at, o, seq`,
    "COMMIT"
  ]
}

/** Statistics and the visibility map, as autovacuum would have them (the shared bench cluster runs without it). */
const settle = (registry) =>
  withRegistryDb(registry, async (query) => {
    if (registry.store === "pg") await query("VACUUM ANALYZE")
    else {
      await query("ANALYZE")
      // a registry that has run a while has its pages in the database file, not in a WAL of gigabytes
      await query("PRAGMA wal_checkpoint(TRUNCATE)")
    }
  })

const REGISTRY_TABLES = ["registry", "batch_leaves", "pending_seals", "claims", "outbox", "batches", "daily_roots", "merkle_chunks"]

/** Bytes per stored attestation, table and indexes: the attestations alone, with claims and outbox, and everything. */
const bytesOnDisk = (registry) =>
  withRegistryDb(registry, async (query) => {
    const byTable = {}
    const indexes = {}
    if (registry.store === "pg") {
      for (const table of REGISTRY_TABLES) {
        const [r] = await query("SELECT pg_total_relation_size($1::regclass)::bigint AS total, pg_relation_size($1::regclass)::bigint AS heap", [table])
        byTable[table] = Number(r.total)
      }
      for (const r of await query("SELECT indexrelname AS name, pg_relation_size(indexrelid)::bigint AS bytes FROM pg_stat_user_indexes WHERE relname IN ('registry', 'batch_leaves')")) {
        indexes[r.name] = Number(r.bytes)
      }
    } else {
      const rows = await query("SELECT m.tbl_name AS tbl, s.name AS name, sum(s.pgsize) AS bytes FROM dbstat s JOIN sqlite_master m ON m.name = s.name GROUP BY s.name")
      for (const r of rows) {
        if (REGISTRY_TABLES.includes(r.tbl)) byTable[r.tbl] = (byTable[r.tbl] ?? 0) + r.bytes
        if ((r.tbl === "registry" || r.tbl === "batch_leaves") && r.name !== r.tbl) indexes[r.name] = r.bytes
      }
    }
    const per = (n) => n / registry.rows
    const sum = (tables) => tables.reduce((a, t) => a + (byTable[t] ?? 0), 0)
    return {
      byTable,
      attestationIndexes: indexes,
      perAttestation: {
        attestations: per(sum(["registry", "batch_leaves", "pending_seals"])),
        withClaimsAndOutbox: per(sum(["registry", "batch_leaves", "pending_seals", "claims", "outbox"])),
        all: per(sum(REGISTRY_TABLES))
      }
    }
  })

/** A key's listing as Attestations/ListRepo.ts reads it (each row's level from the view). */
const LISTING = `SELECT r.seq, r.id, r.hash_hex, (SELECT v.level FROM attestations v WHERE v.seq = r.seq) AS level, r.registered_at, c.source
  FROM claims c JOIN registry r ON r.seq = c.attestation_seq`

/** The plans (and one timed run) of the registry's hot queries on the generated data. */
const explainHot = (registry) =>
  withRegistryDb(registry, async (query) => {
    const [sample] = await query(`SELECT hash_hex, registered_at FROM attestations WHERE seq = ${Math.ceil(registry.rows / 2)}`)
    const pg = registry.store === "pg"
    const p = (i) => (pg ? `$${i}` : "?")
    const hot = {
      "lookup by hash": [`SELECT seq, id, hash_hex, registered_at, level FROM attestations WHERE hash_hex = ${p(1)}`, [sample.hash_hex]],
      "pending for seal": [
        `SELECT seq, hash_hex FROM pending_seals WHERE registered_at < ${p(1)} ORDER BY seq`,
        [new Date().toISOString()]
      ],
      "attestations of a batch": [`SELECT attestation_seq FROM batch_leaves WHERE batch_id = ${p(1)}`, [HOURS / 2]],
      "listing (newest 50 of a key)": [
        `${LISTING}
          WHERE c.api_key_id = ${p(1)} AND c.deleted_at IS NULL ORDER BY r.registered_at DESC, r.seq DESC LIMIT 51`,
        [registry.keyId]
      ],
      "listing (newest 50 of a key holding nothing)": [
        `${LISTING}
          WHERE c.api_key_id = ${p(1)} AND c.deleted_at IS NULL ORDER BY r.registered_at DESC, r.seq DESC LIMIT 51`,
        ["key_holds_nothing"]
      ],
      "listing (a past month of a key)": [
        `${LISTING}
          WHERE c.api_key_id = ${p(1)} AND c.deleted_at IS NULL AND r.registered_at >= ${p(2)} AND r.registered_at < ${p(3)}
          ORDER BY r.registered_at DESC, r.seq DESC LIMIT 51`,
        [registry.keyId, sample.registered_at, new Date(Date.parse(sample.registered_at) + 30 * 86_400_000).toISOString()]
      ]
    }
    const out = {}
    for (const [name, [text, params]] of Object.entries(hot)) {
      const plan = pg
        ? (await query(`EXPLAIN (ANALYZE, BUFFERS) ${text}`, params)).map((r) => r["QUERY PLAN"])
        : (await query(`EXPLAIN QUERY PLAN ${text}`, params)).map((r) => r.detail)
      const started = performance.now()
      await query(text, params)
      out[name] = { ms: performance.now() - started, plan }
    }
    return out
  })

/** attest-new and verify against a server on the registry; verify asks digests it holds (random ones of a full registry). */
const measureRates = async (registry, config) => {
  const port = await freePort()
  const env = { ...registry.env, PORT: String(port) }
  const logFile = join(registry.dir, "server.log")
  const proc = startNode([BIN, "serve"], env, logFile)
  try {
    const server = { pid: proc.pid, url: `http://127.0.0.1:${port}` }
    await waitReady(proc, `${server.url}/v1/healthz`, logFile)
    let existing
    if (registry.rows > 0) {
      const seqs = Array.from({ length: VERIFY_SAMPLE }, () => 1 + Math.floor(Math.random() * registry.rows))
      existing = await withRegistryDb(registry, async (query) =>
        (registry.store === "pg"
          ? await query("SELECT hash_hex FROM attestations WHERE seq = ANY($1::bigint[])", [seqs])
          : await query("SELECT hash_hex FROM attestations WHERE seq IN (SELECT value FROM json_each(?))", [JSON.stringify(seqs)])).map((r) => r.hash_hex))
    } else {
      existing = Array.from({ length: EXISTING }, randomHashHex)
      for (const hash of existing) {
        const res = await fetch(`${server.url}/v1/attest`, { method: "POST", headers: { ...JSON_HEADERS, authorization: `Bearer ${registry.key}` }, body: JSON.stringify({ hash_hex: hash }) })
        if (!res.ok) throw new Error(`attesting a seed hash: HTTP ${res.status}`)
        await res.arrayBuffer()
      }
    }
    const out = {}
    for (const scenario of ["attest-new", "verify"]) {
      if (registry.store === "pg") await pgQuery(registry.databaseUrl, "ANALYZE registry, batch_leaves, pending_seals, claims")
      out[scenario] = await load(server, SCENARIOS[scenario].request({ key: registry.key, existing }), config)
    }
    return out
  } finally {
    await proc.stop()
  }
}

/**
 * `count` attestations at T0, registered in the half hour before now (with the key's claims),
 * sealed by the real worker (`attestd worker`, the demo TSA) at its next window boundary: the
 * time from that boundary until the batch is committed, polled every 100 ms.
 */
const sealPending = async (registry, count) => {
  const now = Math.floor(Date.now() / 1000)
  const start = now - 1800
  const step = 1740 / count
  await withRegistryDb(registry, async (query) => {
    const pg = registry.store === "pg"
    const [{ max }] = await query("SELECT max(seq) AS max FROM attestations")
    const statements = pg
      ? [
        "BEGIN",
        `INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
          SELECT 'att_' || translate(encode(substr(sha256(('pid' || g)::bytea), 1, 18), 'base64'), '+/', '-_'), encode(sha256(('pending' || g)::bytea), 'hex'),
            ${pgTime(`to_timestamp(${start}) + (g - 1) * ${step} * interval '1 second'`)},
            translate(encode(sha256(('r' || g)::bytea) || sha256(('s' || g)::bytea) || substr(sha256(('t' || g)::bytea), 1, 8), 'base64'), E'\\n', ''),
            (SELECT signing_key_id FROM registry LIMIT 1), '2.0.0'
          FROM generate_series(1, ${count}) g`,
        `INSERT INTO claims (attestation_seq, api_key_id, client_encrypted, etag, created_at, updated_at)
          SELECT seq, '${registry.keyId}', FALSE, substr(md5('etag' || seq), 1, 24), registered_at, registered_at FROM registry WHERE seq > ${max} ORDER BY seq`,
        "COMMIT",
        "VACUUM ANALYZE registry, pending_seals, claims"
      ]
      : [
        "BEGIN",
        `WITH RECURSIVE g(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM g WHERE g < ${count})
          INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
          SELECT 'att_' || lower(hex(randomblob(12))), lower(hex(randomblob(32))), ${sqliteTime(`(${start} + (g - 1) * ${step})`)},
            substr(hex(randomblob(48)), 1, 96), (SELECT signing_key_id FROM registry LIMIT 1), '2.0.0' FROM g`,
        `INSERT INTO claims (attestation_seq, api_key_id, client_encrypted, etag, created_at, updated_at)
          SELECT seq, '${registry.keyId}', 0, lower(hex(randomblob(12))), registered_at, registered_at FROM registry WHERE seq > ${max} ORDER BY seq`,
        "COMMIT",
        "PRAGMA wal_checkpoint(TRUNCATE)"
      ]
    for (const text of statements) await query(text)
  })
  const chunksBefore = await withRegistryDb(registry, (query) => query("SELECT count(*) AS n FROM merkle_chunks"))
  if (Number(chunksBefore[0].n) !== 0) throw new Error("merkle_chunks is not empty before the seal")
  const logFile = join(registry.dir, "worker.log")
  const interval = 5
  const proc = startNode([BIN, "worker"], { ...registry.env, ATTESTD_SEAL_INTERVAL: `${interval}s` }, logFile)
  try {
    const deadline = Date.now() + 15 * 60_000
    while (Date.now() < deadline) {
      const [batch] = await withRegistryDb(registry, (query) =>
        query(`SELECT id, window_end, leaf_count FROM batches WHERE leaf_count >= ${count} ORDER BY id DESC LIMIT 1`))
      if (batch !== undefined) {
        const seconds = (Date.now() - Date.parse(batch.window_end)) / 1000
        const chunks = await merkleBytesPerLeaf(registry, Number(batch.id), Number(batch.leaf_count))
        return { leaves: Number(batch.leaf_count), seconds, merkleChunkBytesPerLeaf: chunks, log: sealLog(logFile) }
      }
      await sleep(100)
    }
    throw new Error(`no batch of ${count} leaves after 15 minutes; log:\n${readFileSync(logFile, "utf8").slice(-3000)}`)
  } finally {
    await proc.stop()
  }
}

/** Bytes the sealed batch's Merkle nodes (merkle_chunks, with its index) take per leaf. */
const merkleBytesPerLeaf = (registry, batchId, leaves) =>
  withRegistryDb(registry, async (query) => {
    if (registry.store === "pg") {
      await query("VACUUM merkle_chunks")
      const [r] = await query("SELECT pg_total_relation_size('merkle_chunks')::bigint AS bytes")
      return Number(r.bytes) / leaves
    }
    const [r] = await query("SELECT sum(s.pgsize) AS bytes FROM dbstat s JOIN sqlite_master m ON m.name = s.name WHERE m.tbl_name = 'merkle_chunks'")
    return r.bytes / leaves
  })

/** The sealer's own lines about the big window (read, tree built, sealed), for where the time went. */
const sealLog = (logFile) =>
  readFileSync(logFile, "utf8").split("\n").filter((l) => /sealing window|sealed batch/.test(l)).slice(-3)

const printScale = (results, config) => {
  const n = (x, digits = 0) => Number(x).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })
  console.log(`\nregistry at scale: ${n(config.rows)} attestations; medians of ${config.rounds} round(s), ${config.duration} s each\n`)
  console.log("| store | scenario | empty req/s | at N req/s | ratio | goal | µs CPU/req empty → at N | CPU ratio |")
  console.log("|---|---|---|---|---|---|---|---|")
  for (const r of results) {
    for (const [scenario, v] of Object.entries(r.rates)) {
      console.log(
        `| ${r.store} | ${scenario} | ${n(v.empty)} | ${n(v.full)} | ${v.ratio.toFixed(2)}× | ≥ 0.8× ${v.ratio >= 0.8 ? "met" : "MISSED"} | ${n(v.cpuUsEmpty)} → ${n(v.cpuUsFull)} | ${v.cpuRatio.toFixed(2)}× |`
      )
    }
  }
  console.log("\n| store | generated in | seal of pending | bytes/attestation: attestations | + claims, outbox | all (+ batches, roots, Merkle nodes) |")
  console.log("|---|---|---|---|---|---|")
  for (const r of results) {
    const all = r.bytes.perAttestation.all + r.seal.merkleChunkBytesPerLeaf
    console.log(
      `| ${r.store} | ${n(r.generateSeconds)} s | ${n(r.seal.leaves)} in ${n(r.seal.seconds, 1)} s (goal < 20 s ${r.seal.seconds < 20 ? "met" : "MISSED"}) | ${n(r.bytes.perAttestation.attestations)} | ${n(r.bytes.perAttestation.withClaimsAndOutbox)} | ${n(all)} |`
    )
  }
  for (const r of results) {
    console.log(`\n${r.store}: hot queries at ${n(r.rows)} rows`)
    for (const [name, { ms, plan }] of Object.entries(r.plans)) console.log(`  ${name} (${n(ms, 2)} ms): ${plan.join(" / ").replace(/\s+/g, " ").slice(0, 400)}`)
  }
}

// Last, so that every constant above is initialised before main() reads it.
if (process.argv[2] === "bare-server") {
  await bareServer(Number(process.argv[3]))
} else if (process.argv[2] === "httpapi-server") {
  await httpApiServer(Number(process.argv[3]))
} else {
  await main()
}
