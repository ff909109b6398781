// Building blocks of the benchmark harness (scripts/bench.mjs): child servers,
// API keys, Postgres databases, seeding, autocannon runs, CPU accounting and
// .cpuprofile summaries. Every helper is usable on its own by later stages.
import autocannon from "autocannon"
import { Runtime } from "effect"
import { spawn, execFile } from "node:child_process"
import { cpSync, createWriteStream, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { freePort, randomHashHex, sleep } from "../common.mjs"
import { median } from "./stats.mjs"

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
export const BENCH_DIR = path.join(ROOT, ".bench")
/** The attestd CLI the servers run; see snapshotBuild. */
export let BIN = path.join(ROOT, "dist/bin.js")

/**
 * Copies dist/ (and package.json, for the version) to .bench/build/ and runs
 * servers from there, so a rebuild of dist/ by someone else mid-run does not
 * change the code under test. node_modules still resolves from the repository.
 */
export const snapshotBuild = (from = path.join(ROOT, "dist")) => {
  const dir = path.join(BENCH_DIR, "build")
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  cpSync(from, path.join(dir, "dist"), { recursive: true })
  cpSync(path.join(ROOT, "package.json"), path.join(dir, "package.json"))
  BIN = path.join(dir, "dist/bin.js")
  return path.join(dir, "dist")
}
export const PG_ADMIN_URL = process.env.BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432"


export const envInt = (name, fallback) => {
  const raw = process.env[name]
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got ${raw}`)
  return n
}

export const envList = (name, fallback) => {
  const raw = process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  return raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
}

export { freePort, randomHashHex, sleep }

/** Extra node flags for the attestd servers (BENCH_NODE_ARGS, space-separated), e.g. "--max-semi-space-size=32". */
export const benchNodeArgs = () => (process.env.BENCH_NODE_ARGS ?? "").split(/\s+/).filter((a) => a.length > 0)

// ---------------------------------------------------------------------------
// child processes

const children = new Set()

const tempDirs = new Set()

/** Kills (SIGKILL) every child this module started that is still running, and removes their temp data dirs; for crash paths. */
export const killAllChildren = () => {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, "SIGKILL")
      } catch {}
    }
  }
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true })
  tempDirs.clear()
}

const tail = (file, lines = 30) => {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n")
  } catch {
    return ""
  }
}

/**
 * Spawns `node [nodeArgs] script [args]` with output to .bench/logs/<name>.log.
 * Returns { name, child, pid, logFile, exited (promise), stop(signal, timeoutMs) }.
 */
export const startNode = ({ name, script, args = [], nodeArgs = [], env = {}, cwd = ROOT }) => {
  const logDir = path.join(BENCH_DIR, "logs")
  mkdirSync(logDir, { recursive: true })
  const logFile = path.join(logDir, `${name}.log`)
  const log = createWriteStream(logFile)
  const childEnv = { ...process.env, ...env }
  for (const [k, v] of Object.entries(childEnv)) if (v === undefined) delete childEnv[k]
  const child = spawn(process.execPath, [...nodeArgs, script, ...args], { cwd, env: childEnv, stdio: ["ignore", "pipe", "pipe"] })
  children.add(child)
  child.stdout.pipe(log, { end: false })
  child.stderr.pipe(log, { end: false })
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child)
      resolve({ code, signal })
    })
  )
  const stop = async (signal = "SIGINT", timeoutMs = 10_000) => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, signal)
      } catch {}
      const t = setTimeout(() => {
        try {
          process.kill(child.pid, "SIGKILL")
        } catch {}
      }, timeoutMs)
      await exited
      clearTimeout(t)
    }
    log.end()
  }
  return { name, child, pid: child.pid, logFile, exited, stop, tail: (n) => tail(logFile, n) }
}

/** Polls GET url until it answers 200; fails early if the process exits. */
export const waitHealthy = async (proc, url, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  let exited = false
  proc.exited.then(() => (exited = true))
  let last = ""
  while (Date.now() < deadline) {
    if (exited) throw new Error(`${proc.name} exited before becoming healthy; log ${proc.logFile}:\n${proc.tail()}`)
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) })
      if (res.status === 200) {
        await res.arrayBuffer()
        return
      }
      last = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`
    } catch (e) {
      last = String(e?.cause?.code ?? e?.message ?? e)
    }
    await sleep(100)
  }
  throw new Error(`${proc.name} not healthy at ${url} after ${timeoutMs} ms (${last}); log ${proc.logFile}:\n${proc.tail()}`)
}

/**
 * Sends `signal` to a server whose preloaded probe answers by writing JSON to `file`
 * (statements.mjs, allocations.mjs), and returns that JSON once it is complete.
 */
export const signalForJson = async (pid, signal, file, { what, timeoutMs }) => {
  rmSync(file, { force: true })
  process.kill(pid, signal)
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    try {
      return JSON.parse(readFileSync(file, "utf8"))
    } catch {
      await sleep(20)
    }
  }
  throw new Error(`the server wrote no ${what} within ${timeoutMs} ms`)
}

/** The bare node:http baseline server. */
export const startBareServer = async ({ name = "bare" } = {}) => {
  const port = await freePort()
  const proc = startNode({
    name,
    script: path.join(ROOT, "scripts/bench/bare-server.mjs"),
    env: { PORT: String(port), HOST: "127.0.0.1" }
  })
  const url = `http://127.0.0.1:${port}`
  await waitHealthy(proc, `${url}/v1/healthz`)
  return { ...proc, url, port, kind: "bare" }
}

/**
 * The environment attestd gets in the benchmark: a fresh data dir, the rate
 * limits out of the way, and DATABASE_URL only for Postgres (never inherited).
 */
export const attestdEnv = ({ databaseUrl, dataDir, port, extra = {} }) => ({
  PORT: port === undefined ? undefined : String(port),
  HOST: "127.0.0.1",
  ATTESTD_DATA_DIR: dataDir,
  ATTESTD_DEFAULT_RATE_LIMIT: "100000000",
  // the load generator speaks from 127.0.0.1 alone: no public limit or connection cap per address
  ATTESTD_PUBLIC_RATE_LIMIT: "0",
  ATTESTD_MAX_CONNECTIONS_PER_ADDRESS: "0",
  ATTESTD_MODE: "demo",
  ATTESTD_TRACING: undefined,
  DATABASE_URL: databaseUrl,
  ...extra
})

/**
 * `node dist/bin.js serve` on SQLite (databaseUrl undefined) or Postgres.
 * profileDir: run under --cpu-prof, profile written there on stop().
 */
export const startAttestd = async ({ name, databaseUrl, dataDir, profileDir, serveArgs = [], env = {}, nodeArgs = [] }) => {
  const port = await freePort()
  const dir = dataDir ?? mkdtempSync(path.join(os.tmpdir(), "attestd-bench-"))
  if (!dataDir) tempDirs.add(dir)
  const profArgs = profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : []
  if (profileDir) mkdirSync(profileDir, { recursive: true })
  // the metrics listener: the bench reads the event loop's busy time from it around each run
  const metricsPort = await freePort()
  const fullEnv = attestdEnv({ databaseUrl, dataDir: dir, port, extra: { ATTESTD_METRICS_PORT: String(metricsPort), ...env } })
  const proc = startNode({ name, script: BIN, args: ["serve", ...serveArgs], nodeArgs: [...benchNodeArgs(), ...nodeArgs, ...profArgs], env: fullEnv })
  const url = `http://127.0.0.1:${port}`
  const startedAt = performance.now()
  await waitHealthy(proc, `${url}/v1/healthz`)
  const startMs = performance.now() - startedAt
  return {
    ...proc,
    url,
    port,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    kind: "attestd",
    db: databaseUrl ? "pg" : "sqlite",
    dataDir: dir,
    env: fullEnv,
    startMs,
    profileDir,
    /** Stops the server (SIGINT, so --cpu-prof writes its profile) and removes a data dir we created. */
    stop: async () => {
      await proc.stop("SIGINT")
      if (!dataDir) {
        rmSync(dir, { recursive: true, force: true })
        tempDirs.delete(dir)
      }
    }
  }
}

/** `attestd keys create` against the server's database; returns the secret. */
export const createApiKey = ({ env, label = "bench", scopes = "attest,batch" }) =>
  new Promise((resolve, reject) => {
    const childEnv = { ...process.env, ...env }
    for (const [k, v] of Object.entries(childEnv)) if (v === undefined) delete childEnv[k]
    delete childEnv.PORT
    execFile(process.execPath, [BIN, "keys", "create", "--label", label, "--scopes", scopes], { cwd: ROOT, env: childEnv, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`keys create failed: ${err.message}\n${stderr}`))
      const line = stdout.trim().split("\n").reverse().find((l) => l.startsWith("{"))
      try {
        const parsed = JSON.parse(line ?? "")
        if (typeof parsed.key !== "string") throw new Error("no key field")
        resolve(parsed.key)
      } catch (e) {
        reject(new Error(`keys create printed no JSON key (${e.message}):\n${stdout}\n${stderr}`))
      }
    })
  })

/** Attests `hashes` through /v1/attest/batch (100 per call); returns how many were created. */
export const seedHashes = async (url, key, hashes) => {
  let created = 0
  for (let i = 0; i < hashes.length; i += 100) {
    const res = await fetch(`${url}/v1/attest/batch`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hashes: hashes.slice(i, i + 100) })
    })
    const text = await res.text()
    if (res.status !== 200) throw new Error(`seeding failed: HTTP ${res.status} ${text.slice(0, 300)}`)
    created += JSON.parse(text).created
  }
  return created
}

// ---------------------------------------------------------------------------
// Postgres

const pgClient = async (url) => {
  const { default: pg } = await import("pg")
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return client
}

const createdDatabases = new Set()

/**
 * ANALYZE on the database at `url`: what autovacuum would have done by now. This machine's
 * Postgres runs with autovacuum off, and a bench database lives a minute, so without it the
 * planner plans on the sizes the tables had when they were empty (a keyed read of claims
 * then scans a whole index: 7.9 ms against 0.8 after ANALYZE at 30,000 claims).
 * BENCH_PG_ANALYZE=0 leaves the statistics as they are.
 */
export const analyzePg = async (url) => {
  if (process.env.BENCH_PG_ANALYZE === "0") return
  const client = await pgClient(url)
  try {
    await client.query("ANALYZE")
  } finally {
    await client.end()
  }
}

/** settings: per-database GUCs, e.g. { synchronous_commit: "off" } to take WAL fsync out of the picture. */
export const createPgDatabase = async (name, settings = {}) => {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`bad database name ${name}`)
  createdDatabases.add(name)
  const client = await pgClient(`${PG_ADMIN_URL}/postgres`)
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await client.query(`CREATE DATABASE ${name}`)
    for (const [k, v] of Object.entries(settings)) {
      if (!/^[a-z_]+$/.test(k) || !/^[A-Za-z0-9_.]+$/.test(String(v))) throw new Error(`bad setting ${k}=${v}`)
      await client.query(`ALTER DATABASE ${name} SET ${k} = '${v}'`)
    }
  } finally {
    await client.end()
  }
  return `${PG_ADMIN_URL}/${name}`
}

export const dropPgDatabase = async (name) => {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`bad database name ${name}`)
  const client = await pgClient(`${PG_ADMIN_URL}/postgres`)
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    createdDatabases.delete(name)
  } finally {
    await client.end()
  }
}

/** Drops every database createPgDatabase made that is still there (crash and signal paths). */
export const dropCreatedDatabases = async () => {
  for (const name of [...createdDatabases]) await dropPgDatabase(name).catch(() => {})
}

/**
 * When the module at `moduleUrl` is the script node was started with (`node scripts/bench/tags.mjs`),
 * runs its section and prints the report; on failure, prints the error and its cause, drops the
 * databases it created and sets a failing exit code. Imported by bench.mjs instead, the module runs nothing.
 */
export const runAsScript = (moduleUrl, section) => {
  if (process.argv[1] === undefined || path.resolve(process.argv[1]) !== fileURLToPath(moduleUrl)) return
  section().then(
    (r) => console.log(r.text),
    async (e) => {
      console.error(e?.stack ?? e)
      // An SqlError's message ("Failed to execute statement") says little; the driver's error, its
      // cause, says what failed (for Postgres: code, routine, which parameter). Effect's runPromise
      // rejects with a FiberFailure, which holds the whole cause.
      if (Runtime.isFiberFailure(e)) console.error("cause:", JSON.stringify(e[Runtime.FiberFailureCauseId]))
      else if (e?.cause !== undefined) console.error("cause:", e.cause?.stack ?? e.cause)
      await dropCreatedDatabases()
      process.exitCode = 1
    }
  )
}

/**
 * Attestation counts straight from the server's database: rows, and distinct
 * registered_at values (the Attestor stamps one per group-commit transaction,
 * so rows / batches is the mean group-commit batch size).
 */
export const attestationStats = async (server) => {
  const q = "SELECT COUNT(*) AS n, COUNT(DISTINCT registered_at) AS batches FROM attestations"
  if (server.db === "pg") {
    const client = await pgClient(server.env.DATABASE_URL)
    try {
      const { rows } = await client.query(q)
      return { rows: Number(rows[0].n), batches: Number(rows[0].batches) }
    } finally {
      await client.end()
    }
  }
  const { default: Database } = await import("better-sqlite3")
  const db = new Database(path.join(server.dataDir, "attestd.db"), { readonly: true, fileMustExist: true })
  try {
    const row = db.prepare(q).get()
    return { rows: Number(row.n), batches: Number(row.batches) }
  } finally {
    db.close()
  }
}

// ---------------------------------------------------------------------------
// CPU accounting (Linux /proc): how busy the server, the load generator and
// Postgres were during a run, to tell which one saturated a core.

const CLK_TCK = 100

/** utime+stime of every live process, by pid, with its command name. */
const allTicks = () => {
  const out = new Map()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"))
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      out.set(Number(entry), { comm, ticks: Number(fields[11]) + Number(fields[12]) })
    } catch {}
  }
  return out
}

const machineTicks = () => {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number)
    return { total: f.reduce((a, b) => a + b, 0), idle: f[3] + (f[4] ?? 0) }
  } catch {
    return { total: 0, idle: 0 }
  }
}

/**
 * Starts a CPU meter; stop() returns CPU use in % of one core: the load
 * generator (this process), the server, Postgres backends, and every other
 * process on the machine (noise from whatever else runs here), plus the
 * machine's idle share in % of all cores.
 */
export const cpuMeter = ({ serverPid, postgres = false }) => {
  const t0 = performance.now()
  const self0 = process.cpuUsage()
  const before = allTicks()
  const m0 = machineTicks()
  return () => {
    const wallMs = performance.now() - t0
    const self = process.cpuUsage(self0)
    const after = allTicks()
    const m1 = machineTicks()
    const pct = (ms) => Math.round((100 * ms) / wallMs)
    const ticksMs = (t) => (t * 1000) / CLK_TCK
    let server = 0
    let pg = 0
    let others = 0
    for (const [pid, { comm, ticks }] of after) {
      const d = ticks - (before.get(pid)?.ticks ?? 0)
      if (d <= 0 || pid === process.pid) continue
      if (pid === serverPid) server += d
      else if (comm.startsWith("postgres")) pg += d
      else others += d
    }
    return {
      loadgen: pct((self.user + self.system) / 1000),
      server: serverPid ? pct(ticksMs(server)) : undefined,
      postgres: postgres ? pct(ticksMs(pg)) : undefined,
      others: pct(ticksMs(others)),
      idlePct: m1.total > m0.total ? Math.round((100 * (m1.idle - m0.idle)) / (m1.total - m0.total)) : undefined
    }
  }
}

/**
 * On a shared machine: waits (at most maxWaitMs) until the other processes use
 * less than `threshold` % of a core over a 1 s sample. Returns what it saw.
 */
export const waitQuiet = async ({ maxWaitMs, threshold = 20, exclude = [] }) => {
  const deadline = Date.now() + maxWaitMs
  const skip = new Set([process.pid, ...exclude])
  let othersPct = 0
  for (;;) {
    const before = allTicks()
    await sleep(1000)
    let others = 0
    for (const [pid, { comm, ticks }] of allTicks()) {
      if (skip.has(pid) || comm.startsWith("postgres")) continue
      others += Math.max(0, ticks - (before.get(pid)?.ticks ?? 0))
    }
    othersPct = others * (1000 / CLK_TCK) / 10
    if (othersPct < threshold || Date.now() >= deadline) return { othersPct, quiet: othersPct < threshold }
  }
}

// ---------------------------------------------------------------------------
// load

/** The server's attestd_event_loop_busy_seconds_total and when it was read (seconds), or undefined. */
const loopBusyAt = async (metricsUrl) => {
  if (!metricsUrl) return undefined
  try {
    const text = await (await fetch(metricsUrl)).text()
    const m = /^attestd_event_loop_busy_seconds_total (\S+)$/m.exec(text)
    return m ? { busy: Number(m[1]), at: performance.now() / 1000 } : undefined
  } catch {
    return undefined
  }
}

/**
 * One autocannon run. `request`: { method, path, headers, body, setupRequest }.
 * warmup seconds are run first and discarded. Returns a compact summary plus the
 * raw autocannon result; with `metricsUrl` (the server's /metrics), also the share of
 * the run its event loop was busy (`loopBusy`).
 */
export const runLoad = async ({ url, request, duration = 10, warmup = 2, connections = 50, pipelining = 1, serverPid, postgres = false, title, quietWaitMs = 0, metricsUrl }) => {
  const opts = (d) => ({
    url,
    title,
    connections,
    pipelining,
    duration: d,
    timeout: 10,
    requests: [request]
  })
  const quiet = quietWaitMs > 0 ? await waitQuiet({ maxWaitMs: quietWaitMs, exclude: serverPid ? [serverPid] : [] }) : undefined
  if (warmup > 0) await autocannon(opts(warmup))
  const loopBefore = await loopBusyAt(metricsUrl)
  const meter = cpuMeter({ serverPid, postgres })
  const startUs = Number(process.hrtime.bigint() / 1000n)
  const r = await autocannon(opts(duration))
  const endUs = Number(process.hrtime.bigint() / 1000n)
  const cpu = meter()
  const loopAfter = await loopBusyAt(metricsUrl)
  return {
    title,
    rps: r.requests.total / r.duration,
    total: r.requests.total,
    duration: r.duration,
    p50: r.latency.p50,
    p99: r.latency.p99,
    latencyMean: r.latency.average,
    ok2xx: r["2xx"],
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    statusCodes: Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([k, v]) => [k, Number(v.count)])),
    connections,
    cpu,
    // the share of the run the server's event loop spent running code (1: saturated)
    loopBusy: loopBefore && loopAfter ? (loopAfter.busy - loopBefore.busy) / (loopAfter.at - loopBefore.at) : undefined,
    quietBefore: quiet,
    // server CPU time per request: comparable across runs even when the machine is shared
    serverCpuUsPerReq: cpu.server === undefined || r.requests.total === 0 ? undefined : (cpu.server / 100) * 1e6 / (r.requests.total / r.duration),
    // CLOCK_MONOTONIC µs, the clock V8's CPU profiles use: lets a profile be cut to this run
    window: { startUs, endUs },
    raw: { requests: r.requests, latency: r.latency, throughput: r.throughput }
  }
}

// ---------------------------------------------------------------------------
// .cpuprofile summaries

const categoryOf = (url, functionName) => {
  if (!url) {
    if (functionName.startsWith("(")) return functionName // (garbage collector), (idle), (program)
    return "native"
  }
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (m) return m[1]
  if (url.startsWith("node:")) return "node internals"
  if (isOwn(url)) return "attestd (dist/)"
  return "other"
}

const shortUrl = (url) => {
  if (!url) return ""
  const m = /node_modules\/(.*)$/.exec(url)
  if (m) return m[1]
  const d = /\/(dist\/.*)$/.exec(url)
  if (d) return d[1]
  return url.replace(/^file:\/\//, "")
}

/**
 * The newest .cpuprofile of a main thread in dir. Node names them
 * CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile, and each worker thread
 * (the nonce worker, the Merkle worker) writes its own: thread 0 is the event loop's.
 */
export const newestProfile = (dir) => {
  const files = readdirSync(dir).filter((f) => /\.0\.\d+\.cpuprofile$/.test(f)).map((f) => path.join(dir, f))
  if (files.length === 0) throw new Error(`no .cpuprofile in ${dir}`)
  return files.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0]
}

const ownPrefixes = [`file://${ROOT}/dist/`, `file://${BENCH_DIR}/build/dist/`]
const isOwn = (url) => ownPrefixes.some((p) => url.startsWith(p))

/**
 * Self time by function (functionName + url:line), self time by package, and
 * inclusive time of attestd's own functions (dist/). With `window`
 * ({startUs, endUs} on the monotonic clock, see runLoad) only samples taken
 * inside it count, so start-up and warm-up stay out.
 */
export const summarizeProfile = (file, { top = 25, window } = {}) => {
  const prof = JSON.parse(readFileSync(file, "utf8"))
  const byId = new Map()
  const parent = new Map()
  for (const n of prof.nodes) {
    byId.set(n.id, n)
    for (const c of n.children ?? []) parent.set(c, n.id)
  }
  const selfUs = new Map()
  const samples = prof.samples ?? []
  const deltas = prof.timeDeltas ?? []
  const inWindow = (t) => window === undefined || (t >= window.startUs && t <= window.endUs)
  let windowed = window !== undefined
  if (windowed) {
    // a window that misses every sample means the clocks differ: fall back to the whole profile
    let t = prof.startTime
    let hits = 0
    for (let i = 0; i < samples.length; i++) if (inWindow(t += deltas[i] ?? 0)) hits++
    if (hits === 0) windowed = false
  }
  // Every sample weighs one sampling interval (the median gap). V8 samples on the wall clock, so
  // the gap before a sample taken after the process was descheduled (common on a shared 2-core
  // box, typically right after writev wakes the load generator) is waiting, not CPU: weighing
  // by gap would charge it to whatever ran next.
  const intervalUs = median(deltas.filter((d) => d > 0)) ?? 1000
  let t = prof.startTime
  let wallStart
  let wallEnd
  for (let i = 0; i < samples.length; i++) {
    t += deltas[i] ?? 0
    if (windowed && !inWindow(t)) continue
    wallStart ??= t
    wallEnd = t
    selfUs.set(samples[i], (selfUs.get(samples[i]) ?? 0) + intervalUs)
  }
  const totalUs = [...selfUs.values()].reduce((a, b) => a + b, 0)
  const keyOf = (n) => {
    const cf = n.callFrame
    return `${cf.functionName || "(anonymous)"} ${shortUrl(cf.url)}${cf.url ? `:${cf.lineNumber + 1}` : ""}`
  }
  const idleUs = [...selfUs].filter(([id]) => byId.get(id).callFrame.functionName === "(idle)").reduce((a, [, us]) => a + us, 0)

  const fnSelf = new Map()
  const catSelf = new Map()
  for (const [id, us] of selfUs) {
    const n = byId.get(id)
    const k = keyOf(n)
    fnSelf.set(k, (fnSelf.get(k) ?? 0) + us)
    const cat = categoryOf(n.callFrame.url, n.callFrame.functionName)
    catSelf.set(cat, (catSelf.get(cat) ?? 0) + us)
  }

  // inclusive time of dist/ functions: each sample counted once per distinct function on its stack
  const ownIncl = new Map()
  for (const [id, us] of selfUs) {
    const seen = new Set()
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur)
      if (!isOwn(n.callFrame.url)) continue
      const k = keyOf(n)
      if (seen.has(k)) continue
      seen.add(k)
      ownIncl.set(k, (ownIncl.get(k) ?? 0) + us)
    }
  }

  const busyUs = totalUs - idleUs
  const rows = (m, n) =>
    [...m].filter(([name]) => !name.startsWith("(idle)")).sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, us]) => ({
      name,
      ms: us / 1000,
      pctOfBusy: busyUs > 0 ? (100 * us) / busyUs : 0
    }))
  return {
    file,
    windowed,
    intervalUs,
    wallMs: wallEnd !== undefined ? (wallEnd - wallStart) / 1000 : 0,
    totalMs: totalUs / 1000,
    idleMs: idleUs / 1000,
    busyMs: busyUs / 1000,
    topSelf: rows(fnSelf, top),
    byPackage: rows(catSelf, 20),
    ownInclusive: rows(ownIncl, 15)
  }
}

// ---------------------------------------------------------------------------
// formatting

export const table = (header, body, { right = [] } = {}) => {
  const cells = body.map((row) => row.map((c) => (c === undefined || c === null ? "" : String(c))))
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)))
  const line = (r) => r.map((c, i) => (right.includes(i) ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd()
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n")
}
