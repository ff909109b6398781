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
// BENCH_SCENARIOS (attest-new,attest-existing,verify,trivial-get), BENCH_PG_URL
// (postgres://postgres@127.0.0.1:5432; a database is created per round and dropped).
// The servers inherit the environment, so an ATTESTD_* setting can be compared by running twice.
//
// Each server is a child process (`node dist/bin.js serve`, the real CLI; the bare server is this
// script with the argument `bare-server`), so it does not share an event loop with autocannon,
// which runs here. A round starts a fresh server and database per store and stops it after its
// scenarios, so an idle server's workers (the sealer) never run beside another one's load. The
// warm-up is a count of requests, not seconds: a route's first thousand requests cost several
// times its later ones (the JIT), and a busy machine makes fewer of them per second.
// The server's CPU per request is read from /proc/<pid>/stat (Postgres's own CPU is not in it).
// The table shows medians over the rounds; bench-results.json has every round.
import autocannon from "autocannon"
import { execFile, execFileSync, spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs"
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
      console.log(`  ${store} ${scenario}: ${Math.round(result.rps)} req/s, ${Math.round(result.cpuUsPerRequest)} µs CPU/req${flag}`)
    }
    console.log(`round ${round} of ${config.rounds}`)
    if (config.only.includes("baseline")) {
      await withBareServer(async (server) => {
        for (const scenario of ["POST", "GET"]) record("bare", scenario, await load(server, BARE[scenario], config))
      })
    }
    for (const store of ["sqlite", "pg"].filter((s) => config.only.includes(s))) {
      await withAttestd(store, round, async (server, ctx) => {
        for (const scenario of config.scenarios) {
          await ctx.analyze()
          record(store, scenario, await load(server, SCENARIOS[scenario].request(ctx), config))
        }
      })
    }
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
  }
}

// ---------------------------------------------------------------------------
// load

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim())

/** User plus system CPU of a process so far, in µs. */
const cpuUs = (pid) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLK_TCK
}

const load = async (server, request, { connections, duration, warmup }) => {
  const run = (limit) => autocannon({ url: server.url, connections, requests: [request], ...limit })
  if (warmup > 0) await run({ amount: warmup })
  const cpuBefore = cpuUs(server.pid)
  const r = await run({ duration })
  const total = r.requests.total
  return {
    rps: total / r.duration,
    requests: total,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    cpuUsPerRequest: (cpuUs(server.pid) - cpuBefore) / Math.max(1, total),
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts
  }
}

// ---------------------------------------------------------------------------
// servers

/** The baseline: reads a POST's JSON body to the end and parses it; answers a small JSON. */
const bareServer = (port) => {
  const body = JSON.stringify({ exists: true, hash_hex: "0".repeat(64), level: "T0" })
  const headers = { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) }
  createServer((req, res) => {
    if (req.method === "GET") return res.writeHead(200, headers).end(body)
    let text = ""
    req.setEncoding("utf8")
    req.on("data", (chunk) => (text += chunk))
    req.on("end", () => {
      JSON.parse(text)
      res.writeHead(200, headers).end(body)
    })
  }).listen(port, "127.0.0.1")
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
  const port = await freePort()
  const logFile = join(dir, "server.log")
  const proc = startNode([fileURLToPath(import.meta.url), "bare-server", String(port)], process.env, logFile)
  const server = { pid: proc.pid, url: `http://127.0.0.1:${port}` }
  try {
    await waitReady(proc, `${server.url}/`, logFile)
    await use(server)
  } finally {
    await proc.stop()
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
 * attestd on a fresh database of `store`: an API key with scope attest (a rate limit it will not
 * reach), the server, and EXISTING hashes attested; `use(server, { key, existing, analyze })`.
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
    const server = { pid: proc.pid, url: `http://127.0.0.1:${port}` }
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
    await use(server, { key, existing, analyze })
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
 * signature: SHA-256 and ECDSA, DER, low-S), one at a time and SESSIONS at a time; and the
 * binding alone (C_SignInit + C_Sign, synchronous), to show what the pool and Effect add.
 */
const signatureRates = async (token, seconds) => {
  const { Effect, ManagedRuntime, Option } = await import("effect")
  const { KeyCustody } = await import("../dist/Platform/Keys/Custody.js")
  const { layerFileKeys } = await import("../dist/Platform/Keys/FileKeys.js")
  const { layerPkcs11Keys, SESSIONS } = await import("../dist/Platform/Keys/Pkcs11Keys.js")
  process.env.SOFTHSM2_CONF = token.env.SOFTHSM2_CONF
  const message = new TextEncoder().encode(`2.0.0|${randomHashHex()}|2026-01-01T00:00:00.000000+00:00`)
  const custodies = {
    "node:crypto": layerFileKeys(join(token.dir, "files"), Option.none()),
    pkcs11: layerPkcs11Keys({ module: SOFTHSM_MODULE, token: "bench", pinFile: token.env.ATTESTD_PKCS11_PIN_FILE })
  }
  const out = []
  for (const [name, layer] of Object.entries(custodies)) {
    const runtime = ManagedRuntime.make(layer)
    try {
      const key = await runtime.runPromise(Effect.flatMap(KeyCustody, (c) => c.generate("t0", Date.now())))
      for (const concurrency of [1, SESSIONS]) {
        const batch = Effect.forEach(Array.from({ length: 200 }), () => key.sign(message), { concurrency, discard: true })
        await runtime.runPromise(batch) // warm-up
        let n = 0
        const started = performance.now()
        while (performance.now() - started < seconds * 1000) {
          await runtime.runPromise(batch)
          n += 200
        }
        const us = ((performance.now() - started) * 1000) / n
        out.push({ signer: name, concurrency, signaturesPerSecond: 1e6 / us, usPerSignature: us })
      }
    } finally {
      await runtime.dispose()
    }
  }
  out.push(await rawPkcs11Rate(token, message, seconds))
  return out
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
    const started = performance.now()
    while (performance.now() - started < seconds * 1000) {
      for (let i = 0; i < 200; i++) sign()
      n += 200
    }
    const us = ((performance.now() - started) * 1000) / n
    return { signer: "pkcs11js C_Sign (sync, raw)", concurrency: 1, signaturesPerSecond: 1e6 / us, usPerSignature: us }
  } finally {
    pk.C_Finalize()
  }
}

const benchSigners = async (config) => {
  const token = softToken()
  try {
    console.log("signers: signatures per second")
    const rates = await signatureRates(token, config.duration)
    for (const r of rates) console.log(`  ${r.signer} ×${r.concurrency}: ${Math.round(r.signaturesPerSecond)} signatures/s, ${r.usPerSignature.toFixed(1)} µs each`)
    const node = rates.find((r) => r.signer === "node:crypto" && r.concurrency === 1)
    const attest = []
    for (const [signer, env] of [["file", {}], ["pkcs11", token.env]]) {
      await withAttestd("sqlite", `signer-${signer}`, async (server, ctx) => {
        const result = await load(server, SCENARIOS["attest-new"].request(ctx), config)
        attest.push({ signer, ...result })
        console.log(`  sqlite attest-new, signer ${signer}: ${Math.round(result.rps)} req/s, ${Math.round(result.cpuUsPerRequest)} µs CPU/req`)
      }, env)
    }
    console.log("\nsigner                          in flight  signatures/s  µs/signature  × node:crypto")
    for (const r of rates) {
      console.log(`${r.signer.padEnd(32)}${String(r.concurrency).padStart(9)}${Math.round(r.signaturesPerSecond).toString().padStart(14)}${r.usPerSignature.toFixed(1).padStart(14)}${(r.usPerSignature / node.usPerSignature).toFixed(2).padStart(15)}`)
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
      const bare = spec && runs.find((r) => r.store === "bare" && r.scenario === spec.baseline)
      const row = rows.get(key) ?? { store: run.store, scenario: run.scenario, rps: [], cpu: [], ratios: [], failed: 0 }
      row.rps.push(run.rps)
      row.cpu.push(run.cpuUsPerRequest)
      if (bare) row.ratios.push(run.rps / bare.rps)
      row.failed += run.non2xx + run.errors
      rows.set(key, row)
    }
  }
  return [...rows.values()].map(({ cpu, ratios, rps, ...row }) => {
    const spec = SCENARIOS[row.scenario]
    const target = spec?.targets?.[row.store]
    const ratio = ratios.length > 0 ? median(ratios) : undefined
    return {
      ...row,
      baseline: spec?.baseline,
      rps: median(rps),
      cpuUsPerRequest: median(cpu),
      ratio,
      ratios,
      target,
      met: target === undefined || ratio === undefined ? undefined : ratio >= target
    }
  })
}

const printTable = (summary, { rounds, duration, connections }) => {
  console.log(`\nmedians of ${rounds} round(s), ${duration} s per scenario, ${connections} connections\n`)
  const header = ["store", "scenario", "req/s", "× bare", "µs CPU/req", "target", "", "failed"]
  const lines = summary.map((r) => [
    r.store,
    r.scenario,
    Math.round(r.rps).toLocaleString("en-US"),
    r.ratio === undefined ? "" : `${r.ratio.toFixed(3)}× ${r.baseline}`,
    Math.round(r.cpuUsPerRequest).toString(),
    r.target === undefined ? "" : `≥ ${r.target}×`,
    r.met === undefined ? "" : r.met ? "met" : "MISSED",
    r.failed > 0 ? String(r.failed) : ""
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)))
  const right = new Set([2, 4, 7])
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

// Last, so that every constant above is initialised before main() reads it.
if (process.argv[2] === "bare-server") {
  bareServer(Number(process.argv[3]))
} else {
  await main()
}
