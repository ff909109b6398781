#!/usr/bin/env node
/**
 * Webhook starvation measurement (issue 11 §4), for the closing note — not a
 * test. One `attestd serve` process (demo mode, seal window 200 ms) on a fresh
 * database; key A registers --webhooks webhooks at a black hole (a TCP listener
 * on 127.0.0.1 that accepts and never answers) and attests --events hashes, so
 * webhooks × events t1_complete deliveries are queued; key B has one webhook at
 * a healthy receiver on 127.0.0.1.
 *
 * Measured, real time, from B's attest response (201) to the arrival of its
 * t1_complete at the receiver:
 *   - control: B alone, before A's load (seal window + fan-out + dispatch);
 *   - loaded: B with A's backlog queued and A's attempts hanging, --samples
 *     times, --gap s apart (each after the previous one arrived; gives up at
 *     --max-wait s), so the samples cover A's timeouts and its circuits opening.
 * Before that, --throughput events (default 1000) of B alone: seconds from the
 * first batch attest to the last delivery (seal + fan-out + one healthy webhook).
 * Also printed: how many of A's attempts the black hole had accepted when B's
 * delivery arrived, and the most it ever held open at once.
 *
 * Usage: npm run build && node scripts/webhook-starvation.mjs [--db sqlite|pg]
 *          [--bin path/to/dist/cli.mjs] [--webhooks 10] [--events 80]
 *          [--samples 3] [--gap 5] [--max-wait 900]
 * --bin runs another build with the same method (e.g. an old main exported
 * with `git archive <commit> | tar -x -C DIR`, built there).
 * Postgres: PG_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/test); a
 * database is created and dropped.
 */
import { execFile, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { createServer as createNetServer } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { freePort, randomHashHex, sleep } from "./common.mjs"

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const args = process.argv.slice(2)
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : def
}
const BIN = resolve(opt("bin", join(ROOT, "dist", "cli.mjs")))
const DB = opt("db", "sqlite")
const WEBHOOKS = Number(opt("webhooks", "10"))
const EVENTS = Number(opt("events", "80"))
const SAMPLES = Number(opt("samples", "3"))
const MAX_WAIT_MS = Number(opt("max-wait", "900")) * 1000
const GAP_MS = Number(opt("gap", "5")) * 1000
const THROUGHPUT = Number(opt("throughput", "1000"))
const PG_ADMIN_URL = process.env.PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test"



const startBlackHole = () =>
  new Promise((res) => {
    const sockets = new Set()
    const acceptedAt = []
    let maxOpen = 0
    const server = createNetServer((s) => {
      acceptedAt.push(Date.now())
      sockets.add(s)
      maxOpen = Math.max(maxOpen, sockets.size)
      s.on("data", () => {})
      s.on("error", () => {})
      s.on("close", () => sockets.delete(s))
    })
    server.listen(0, "127.0.0.1", () =>
      res({
        url: `http://127.0.0.1:${server.address().port}`,
        acceptedAt,
        maxOpen: () => maxOpen,
        close: () => new Promise((r) => {
          for (const s of sockets) s.destroy()
          server.close(() => r())
        })
      }))
  })

const startReceiver = () =>
  new Promise((res) => {
    const arrivals = new Map() // attestation_id → arrival time
    const server = createServer((req, resp) => {
      const chunks = []
      req.on("data", (c) => chunks.push(c))
      req.on("end", () => {
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
          if (!arrivals.has(body.attestation_id)) arrivals.set(body.attestation_id, Date.now())
        } catch {
          // not JSON: ignored
        }
        resp.writeHead(200).end("ok")
      })
    })
    server.listen(0, "127.0.0.1", () =>
      res({ url: `http://127.0.0.1:${server.address().port}`, arrivals, close: () => new Promise((r) => server.close(() => r())) }))
  })

const main = async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "attestd-starve-"))
  let databaseUrl = `sqlite:${join(dataDir, "attestd.db")}`
  let dropPg = async () => {}
  if (DB === "pg") {
    const name = `attestd_starve_${process.pid}`
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${name}`)
    await admin.end()
    const u = new URL(PG_ADMIN_URL)
    u.pathname = `/${name}`
    databaseUrl = u.toString()
    dropPg = async () => {
      const a = new pg.Client({ connectionString: PG_ADMIN_URL })
      await a.connect()
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await a.end()
    }
  }
  const port = await freePort()
  const env = { ...process.env }
  for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
  Object.assign(env, {
    PORT: String(port),
    HOST: "127.0.0.1",
    DATABASE_URL: databaseUrl,
    ATTESTD_DATA_DIR: dataDir,
    ATTESTD_SEAL_INTERVAL: "200ms",
    ATTESTD_DEFAULT_RATE_LIMIT: "1000000"
  })
  const cli = (argv) =>
    new Promise((res, rej) =>
      execFile(process.execPath, [BIN, ...argv], { env, cwd: dataDir, encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) =>
        err ? rej(new Error(`${argv.join(" ")}: ${stderr}`)) : res(stdout)))
  const keyOf = async () => {
    const out = await cli(["keys", "create", "--label", "starve", "--scopes", "attest,batch,webhook"])
    return JSON.parse(out.trim().split("\n").filter((l) => l.startsWith("{")).pop()).key
  }
  await cli(["migrate"])
  const keyA = await keyOf()
  const keyB = await keyOf()
  const child = spawn(process.execPath, [BIN, "serve"], { env, cwd: dataDir, stdio: ["ignore", "ignore", "ignore"] })
  const base = `http://127.0.0.1:${port}`
  const call = async (key, method, path, body) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    const json = await r.json().catch(() => undefined)
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(json)}`)
    return json
  }
  const hole = await startBlackHole()
  const receiver = await startReceiver()
  const result = { bin: BIN, db: DB, webhooks: WEBHOOKS, events: EVENTS, control_ms: null, loaded: [] }
  try {
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(`${base}/v1/healthz`)).status === 200) break
      } catch {
        // not up yet
      }
      if (i > 600) throw new Error("server not ready")
      await sleep(50)
    }
    await call(keyB, "POST", "/v1/webhook/register", { url: `${receiver.url}/b`, events: ["t1_complete"] })
    const sampleB = async () => {
      const a = await call(keyB, "POST", "/v1/attest", { hash_hex: randomHashHex() })
      const t = Date.now()
      while (!receiver.arrivals.has(a.id)) {
        if (Date.now() - t > MAX_WAIT_MS) return { delay_ms: null, note: `not delivered within ${MAX_WAIT_MS / 1000} s`, a_attempts_before: hole.acceptedAt.length }
        await sleep(20)
      }
      const at = receiver.arrivals.get(a.id)
      return { delay_ms: at - t, a_attempts_before: hole.acceptedAt.filter((x) => x <= at).length }
    }
    result.control_ms = (await sampleB()).delay_ms

    // throughput of one healthy webhook (B alone): THROUGHPUT events, first attest → last arrival
    if (THROUGHPUT > 0) {
      const ids = []
      const t = Date.now()
      for (let left = THROUGHPUT; left > 0; left -= 100) {
        const r = await call(keyB, "POST", "/v1/attest/batch", { hashes: Array.from({ length: Math.min(100, left) }, randomHashHex) })
        for (const x of r.results ?? r.attestations ?? []) ids.push(x.id)
      }
      while (ids.some((id) => !receiver.arrivals.has(id))) {
        if (Date.now() - t > MAX_WAIT_MS) break
        await sleep(20)
      }
      const last = Math.max(...ids.map((id) => receiver.arrivals.get(id) ?? Infinity))
      result.throughput = { events: ids.length, seconds: (last - t) / 1000, per_second: Math.round(ids.length / ((last - t) / 1000)) }
    }

    for (let i = 0; i < WEBHOOKS; i++) {
      await call(keyA, "POST", "/v1/webhook/register", { url: `${hole.url}/a${i}`, events: ["t1_complete"] })
    }
    for (let left = EVENTS; left > 0; left -= 100) {
      await call(keyA, "POST", "/v1/attest/batch", { hashes: Array.from({ length: Math.min(100, left) }, randomHashHex) })
    }
    const t = Date.now()
    while (hole.acceptedAt.length === 0) {
      if (Date.now() - t > 60_000) throw new Error("the black hole saw no attempt")
      await sleep(20)
    }
    for (let i = 0; i < SAMPLES; i++) {
      const s = await sampleB()
      result.loaded.push(s)
      if (s.delay_ms === null) break
      if (i < SAMPLES - 1) await sleep(GAP_MS)
    }
    result.black_hole_accepted = hole.acceptedAt.length
    result.black_hole_max_open = hole.maxOpen()
  } finally {
    child.kill("SIGKILL")
    await new Promise((r) => child.once("exit", r))
    await hole.close()
    await receiver.close()
    await dropPg().catch(() => {})
    rmSync(dataDir, { recursive: true, force: true })
  }
  console.log(JSON.stringify(result, null, 2))
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
