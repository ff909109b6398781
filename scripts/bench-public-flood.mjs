#!/usr/bin/env node
// A legitimate attest's latency alone, and while one client floods public batch
// verify (100 random hashes per request, as fast as it can, over a few
// keep-alive connections from one address) — issue 11 §2. Not a test: numbers
// for the closing note, measured the same way on any build.
//
//   node scripts/bench-public-flood.mjs [--dist DIR] [--public-limit N] [--attests 150] [--connections 8]
//
// --dist        the build to serve (default ./dist; e.g. a build of an older commit)
// --public-limit  ATTESTD_PUBLIC_RATE_LIMIT for the server (default: the build's own default)
//
// The server runs on SQLite in a temporary directory as `node DIST/bin.js serve`;
// the flooder is a separate process so it does not share the measuring client's
// event loop. Prints one JSON line with the medians, the server's CPU use in
// each phase (Linux /proc) and the flood's throughput and answers. On a shared
// machine run it several times, alternating builds.
import { execFile, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import http from "node:http"
import { tmpdir } from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { quantile } from "./bench/stats.mjs"
import { freePort, randomHashHex, sleep } from "./common.mjs"

const args = process.argv.slice(2)
const arg = (name, fallback) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : fallback
}

const request = (agent, url, body, headers = {}) =>
  new Promise((resolve, reject) => {
    const text = JSON.stringify(body)
    const req = http.request(url, {
      method: "POST",
      agent,
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers }
    }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode))
    })
    req.on("error", reject)
    req.end(text)
  })

// ---------------------------------------------------------------------------
// The flooder (a child process): --flood URL --seconds S --connections C

if (arg("flood") !== undefined) {
  const url = arg("flood") + "/v1/verify/batch"
  const until = Date.now() + Number(arg("seconds", "30")) * 1000
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number(arg("connections", "8")) })
  const counts = {}
  let sent = 0
  // Bodies made up front: the flooder's own CPU should go to sending, not to making hashes.
  const bodies = Array.from({ length: 64 }, () => ({ hashes: Array.from({ length: 100 }, randomHashHex) }))
  const loop = async () => {
    while (Date.now() < until) {
      const status = await request(agent, url, bodies[sent % bodies.length]).catch(() => "error")
      counts[status] = (counts[status] ?? 0) + 1
      sent++
    }
  }
  const started = Date.now()
  const report = () => {
    process.stdout.write(JSON.stringify({ requests: sent, perSecond: Math.round(sent / ((Date.now() - started) / 1000)), statuses: counts }) + "\n")
    process.exit(0)
  }
  process.on("SIGTERM", report)
  await Promise.all(Array.from({ length: Number(arg("connections", "8")) }, loop))
  report()
}

// ---------------------------------------------------------------------------
// The measurement

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const dist = path.resolve(arg("dist", path.join(ROOT, "dist")))
const bin = path.join(dist, "bin.js")
const attests = Number(arg("attests", "150"))
const connections = arg("connections", "8")
const publicLimit = arg("public-limit")


const dataDir = mkdtempSync(path.join(tmpdir(), "attestd-flood-"))
const port = await freePort()
const env = { ...process.env }
for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
Object.assign(env, {
  PORT: String(port),
  HOST: "127.0.0.1",
  DATABASE_URL: `sqlite:${path.join(dataDir, "attestd.db")}`,
  ATTESTD_DATA_DIR: dataDir,
  ATTESTD_LOG_LEVEL: "warning",
  ATTESTD_DEFAULT_RATE_LIMIT: "1000000",
  ...(publicLimit !== undefined ? { ATTESTD_PUBLIC_RATE_LIMIT: publicLimit } : {})
})
const base = `http://127.0.0.1:${port}`

const server = spawn(process.execPath, [bin, "serve"], { env, cwd: dataDir, stdio: ["ignore", "ignore", "inherit"] })
const cleanup = () => {
  server.kill("SIGKILL")
  rmSync(dataDir, { recursive: true, force: true })
}
process.on("exit", cleanup)

for (let i = 0; ; i++) {
  const ok = await new Promise((resolve) => http.get(`${base}/v1/healthz`, (res) => (res.resume(), resolve(res.statusCode === 200))).on("error", () => resolve(false)))
  if (ok) break
  if (i > 300) throw new Error("server did not start")
  await sleep(100)
}
const key = await new Promise((resolve, reject) =>
  execFile(process.execPath, [bin, "keys", "create", "--label", "bench", "--scopes", "attest,batch"], { env, cwd: dataDir }, (err, stdout) =>
    err ? reject(err) : resolve(JSON.parse(stdout).key)))

/** CPU time (user + system, ms) the server process has used so far (Linux /proc). */
const serverCpuMs = () => {
  const fields = readFileSync(`/proc/${server.pid}/stat`, "utf8").split(") ")[1].split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100 // utime, stime in clock ticks (USER_HZ = 100)
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
const measure = async (n) => {
  const cpu0 = serverCpuMs()
  const t0 = Date.now()
  const ms = []
  const statuses = {}
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    const status = await request(agent, `${base}/v1/attest`, { hash_hex: randomHashHex() }, { authorization: `Bearer ${key}` })
    ms.push(Number(process.hrtime.bigint() - t) / 1e6)
    statuses[status] = (statuses[status] ?? 0) + 1
  }
  const at = (q) => Math.round(quantile(ms, q) * 10) / 10
  const serverCpuPercent = Math.round((100 * (serverCpuMs() - cpu0)) / (Date.now() - t0))
  return { median: at(0.5), p90: at(0.9), statuses, server_cpu_percent: serverCpuPercent }
}

await measure(30) // warm-up
const alone = await measure(attests)

const flood = (seconds) => {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--flood", base, "--seconds", String(seconds), "--connections", connections], { stdio: ["ignore", "pipe", "inherit"] })
  let out = ""
  child.stdout.on("data", (d) => (out += d))
  return { child, result: new Promise((r) => child.on("exit", () => r(JSON.parse(out || "{}")))) }
}

// The flood alone for 5 s: the server's CPU time per flood request (CPU time, not wall time,
// so it holds on a loaded machine better than latencies do).
const cpuBefore = serverCpuMs()
const solo = await flood(5).result
const floodCpuMsPerRequest = Math.round((1000 * (serverCpuMs() - cpuBefore)) / Math.max(1, solo.requests)) / 1000

const flooder = flood(600).child
let floodOut = ""
flooder.stdout.on("data", (d) => (floodOut += d))
await sleep(2000)
const flooded = await measure(attests)
const floodExit = new Promise((r) => flooder.on("exit", r))
flooder.kill("SIGTERM")
await floodExit

console.log(JSON.stringify({
  dist,
  public_limit: publicLimit ?? "build default",
  attests,
  flood_connections: Number(connections),
  attest_alone_ms: alone,
  attest_during_flood_ms: flooded,
  flood: JSON.parse(floodOut || "{}"),
  flood_alone_5s: { ...solo, server_cpu_ms_per_request: floodCpuMsPerRequest }
}))
process.exit(0)
