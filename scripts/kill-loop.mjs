#!/usr/bin/env node
/**
 * Long kill -9 loop for T1 sealing (the bounded version is test/Sealing/kill.test.ts).
 *
 *   npx tsc -p tsconfig.build.json
 *   node scripts/kill-loop.mjs                      # SQLite and, when reachable, Postgres
 *   KILL_LOOP_ITERATIONS=200 KILL_LOOP_STORES=pg node scripts/kill-loop.mjs
 *
 * Environment: KILL_LOOP_ITERATIONS (default 50), KILL_LOOP_STORES (comma list
 * of sqlite,pg; default both), KILL_LOOP_SEAL_INTERVAL (default 200ms),
 * KILL_LOOP_MIN_MS / KILL_LOOP_MAX_MS (random kill delay, default 50 / 700),
 * TEST_DATABASE_URL (Postgres admin URL, default postgres://postgres@127.0.0.1:5432/test),
 * KILL_LOOP_KEEP=1 keeps the databases for inspection.
 *
 * Each iteration starts `node dist/cli.mjs serve`, attests batches of fresh
 * hashes from 3 client loops, SIGKILLs the server after a random delay and
 * checks the T1 invariants straight from the database. After the last
 * iteration the server is restarted until nothing is left at T0, and every
 * acknowledged hash must exist exactly once with the id the client was given.
 * The Merkle v2 check is an independent implementation (node:crypto only).
 * Exit code 0 only when every store passed.
 */
import { execFile, spawn } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { freePort, randomHashHex, sleep } from "./common.mjs"

const require = createRequire(import.meta.url)
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const BIN = join(ROOT, "dist", "cli.mjs")
const ITERATIONS = Number(process.env.KILL_LOOP_ITERATIONS ?? 50)
const STORES = (process.env.KILL_LOOP_STORES ?? "sqlite,pg").split(",").map((s) => s.trim()).filter(Boolean)
const SEAL_INTERVAL = process.env.KILL_LOOP_SEAL_INTERVAL ?? "200ms"
const MIN_MS = Number(process.env.KILL_LOOP_MIN_MS ?? 50)
const MAX_MS = Number(process.env.KILL_LOOP_MAX_MS ?? 700)
const PG_ADMIN_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const KEEP = process.env.KILL_LOOP_KEEP === "1"



// ---------------------------------------------------------------------------
// Stores

const createStore = async (kind) => {
  const dataDir = mkdtempSync(join(tmpdir(), "attestd-killloop-"))
  if (kind === "sqlite") {
    return { kind, url: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, drop: async () => rmSync(dataDir, { recursive: true, force: true }) }
  }
  const pg = require("pg")
  const name = `attestd_kill_${process.pid}_${randomBytes(4).toString("hex")}`
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const u = new URL(PG_ADMIN_URL)
  u.pathname = `/${name}`
  return {
    kind,
    url: u.toString(),
    dataDir,
    drop: async () => {
      rmSync(dataDir, { recursive: true, force: true })
      const c = new pg.Client({ connectionString: PG_ADMIN_URL })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    }
  }
}

const pgReachable = async () => {
  const pg = require("pg")
  const c = new pg.Client({ connectionString: PG_ADMIN_URL, connectionTimeoutMillis: 3000 })
  try {
    await c.connect()
    await c.query("SELECT 1")
    return true
  } catch {
    return false
  } finally {
    await c.end().catch(() => {})
  }
}

const withDb = async (url, f) => {
  if (url.startsWith("sqlite:")) {
    const Database = require("better-sqlite3")
    const db = new Database(url.slice("sqlite:".length), { fileMustExist: true })
    try {
      db.pragma("busy_timeout = 10000")
      return await f(async (q) => db.prepare(q).all())
    } finally {
      db.close()
    }
  }
  const pg = require("pg")
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    return await f(async (q) => (await c.query(q)).rows)
  } finally {
    await c.end()
  }
}

// ---------------------------------------------------------------------------
// Processes

const envOf = (store, port) => {
  const env = { ...process.env }
  for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
  return {
    ...env,
    PORT: String(port),
    HOST: "127.0.0.1",
    DATABASE_URL: store.url,
    ATTESTD_DATA_DIR: store.dataDir,
    ATTESTD_SEAL_INTERVAL: SEAL_INTERVAL,
    ATTESTD_DEFAULT_RATE_LIMIT: "1000000",
    // load generators and pollers all speak from 127.0.0.1: no public limit per address
    ATTESTD_PUBLIC_RATE_LIMIT: "0"
  }
}

const createKey = (env, cwd) =>
  new Promise((res, rej) => {
    execFile(process.execPath, [BIN, "keys", "create", "--label", "k", "--scopes", "attest,batch"], { env, cwd, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err) return rej(new Error(`keys create failed: ${stderr}`))
      const line = stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()
      res(JSON.parse(line).key)
    })
  })

const startServe = async (env, cwd, port) => {
  const child = spawn(process.execPath, [BIN, "serve"], { env, cwd, stdio: ["ignore", "pipe", "pipe"] })
  const lines = []
  const collect = (b) => {
    for (const l of b.toString("utf8").split("\n")) if (l) { lines.push(l); if (lines.length > 200) lines.shift() }
  }
  child.stdout.on("data", collect)
  child.stderr.on("data", collect)
  let done = false
  const exited = new Promise((r) => child.once("exit", (code, signal) => { done = true; r({ code, signal }) }))
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 30_000
  while (true) {
    if (done) throw new Error(`serve exited before ready:\n${lines.join("\n")}`)
    try {
      const r = await fetch(`${url}/v1/healthz`, { signal: AbortSignal.timeout(2000) })
      await r.arrayBuffer()
      if (r.status === 200) break
    } catch {}
    if (Date.now() > deadline) {
      child.kill("SIGKILL")
      throw new Error(`serve not ready:\n${lines.join("\n")}`)
    }
    await sleep(50)
  }
  return { url, output: () => lines.join("\n"), kill: (sig = "SIGKILL") => { if (!done) child.kill(sig); return exited } }
}

const load = async (url, key, stopped, log, concurrency = 3, batch = 20) => {
  let turn = 0
  const one = async () => {
    while (!stopped()) {
      const single = ++turn % 4 === 0
      const hashes = single ? [randomHashHex()] : Array.from({ length: batch }, randomHashHex)
      log.sent += hashes.length
      try {
        const res = await fetch(single ? `${url}/v1/attest` : `${url}/v1/attest/batch`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
          body: JSON.stringify(single ? { hash_hex: hashes[0] } : { hashes }),
          signal: AbortSignal.timeout(10_000)
        })
        const text = await res.text()
        if (res.status === 200 || res.status === 201) {
          const body = JSON.parse(text)
          for (const a of single ? [body] : body.attestations) {
            const prev = log.acked.get(a.hash_hex)
            if (prev !== undefined && prev !== a.id) log.conflicts.push(`${a.hash_hex}: ${prev} then ${a.id}`)
            log.acked.set(a.hash_hex, a.id)
          }
        } else {
          log.failed++
          await sleep(20)
        }
      } catch {
        log.failed++
        await sleep(20)
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, one))
}

// ---------------------------------------------------------------------------
// Independent Merkle v2 and the invariants

const sha256 = (b) => createHash("sha256").update(b).digest()
const node = (l, r) => sha256(Buffer.concat([Buffer.from([1]), l, r]))
const levelsV2 = (leavesHex) => {
  let level = [...leavesHex].sort().map((h) => Buffer.from(h, "hex"))
  const out = [Buffer.concat(level)]
  while (level.length > 1) {
    const next = []
    for (let i = 0; i < level.length; i += 2) next.push(node(level[i], level[i + 1] ?? level[i]))
    level = next
    out.push(Buffer.concat(level))
  }
  return out
}

const checkInvariants = (url) =>
  withDb(url, async (query) => {
    const v = []
    const atts = await query("SELECT seq, id, hash_hex, level, batch_id, leaf_index, t1_at FROM attestations")
    const batches = await query("SELECT id, window_end, merkle_root, leaf_count FROM batches")
    const chunks = await query("SELECT batch_id, level, chunk, nodes FROM merkle_chunks ORDER BY batch_id, level, chunk")
    const outbox = await query("SELECT attestation_seq, COUNT(*) AS n FROM outbox WHERE event_type = 't1_complete' GROUP BY attestation_seq")
    const byLevel = { T0: 0, T1: 0, T2: 0 }
    const ids = new Map()
    const counts = new Map()
    const byBatch = new Map()
    for (const a of atts) {
      byLevel[a.level] = (byLevel[a.level] ?? 0) + 1
      ids.set(a.hash_hex, a.id)
      counts.set(a.hash_hex, (counts.get(a.hash_hex) ?? 0) + 1)
      if (a.level === "T0" && (a.batch_id !== null || a.leaf_index !== null || a.t1_at !== null)) v.push(`T0 ${a.id} has T1 data`)
      if (a.level !== "T0" && (a.batch_id === null || a.leaf_index === null || a.t1_at === null)) v.push(`${a.level} ${a.id} lacks batch data`)
      if (a.batch_id !== null) {
        const b = Number(a.batch_id)
        if (!byBatch.has(b)) byBatch.set(b, [])
        byBatch.get(b).push({ hash: a.hash_hex, leafIndex: a.leaf_index === null ? null : Number(a.leaf_index) })
      }
    }
    for (const [h, n] of counts) if (n !== 1) v.push(`hash ${h} stored ${n} times`)
    const windows = new Map()
    for (const b of batches) windows.set(b.window_end, (windows.get(b.window_end) ?? 0) + 1)
    for (const [w, n] of windows) if (n > 1) v.push(`window ${w} sealed ${n} times`)
    const stored = new Map()
    for (const c of chunks) {
      const b = Number(c.batch_id)
      if (!stored.has(b)) stored.set(b, new Map())
      const m = stored.get(b)
      const l = Number(c.level)
      if (!m.has(l)) m.set(l, [])
      m.get(l).push(Buffer.from(c.nodes))
    }
    const ids2 = new Set(batches.map((b) => Number(b.id)))
    for (const b of byBatch.keys()) if (!ids2.has(b)) v.push(`attestations reference missing batch ${b}`)
    const owner = new Map()
    for (const b of batches) {
      const id = Number(b.id)
      const members = byBatch.get(id) ?? []
      if (Number(b.leaf_count) !== members.length) v.push(`batch ${id}: leaf_count ${b.leaf_count} != ${members.length}`)
      if (members.length === 0) continue
      const sorted = members.map((m) => m.hash).sort()
      for (const m of members) if (m.leafIndex !== sorted.indexOf(m.hash)) v.push(`batch ${id}: wrong leaf_index for ${m.hash}`)
      const expected = levelsV2(sorted)
      if (expected.at(-1).toString("hex") !== b.merkle_root) v.push(`batch ${id}: root does not recompute`)
      const s = stored.get(id)
      if (!s) {
        v.push(`batch ${id} has no merkle_chunks`)
        continue
      }
      if (s.size !== expected.length) v.push(`batch ${id}: ${s.size} levels stored, ${expected.length} expected`)
      expected.forEach((lvl, l) => {
        if (!Buffer.concat(s.get(l) ?? []).equals(lvl)) v.push(`batch ${id} level ${l} differs`)
      })
      const leaves = Buffer.concat(s.get(0) ?? [])
      for (let o = 0; o + 32 <= leaves.length; o += 32) {
        const h = leaves.subarray(o, o + 32).toString("hex")
        if (owner.has(h) && owner.get(h) !== id) v.push(`hash ${h} in batches ${owner.get(h)} and ${id}`)
        owner.set(h, id)
      }
    }
    const events = new Map(outbox.map((o) => [Number(o.attestation_seq), Number(o.n)]))
    for (const a of atts) {
      const n = events.get(Number(a.seq)) ?? 0
      if (n !== (a.level === "T0" ? 0 : 1)) v.push(`${a.id} (${a.level}) has ${n} t1_complete events`)
    }
    return { violations: v, byLevel, attestations: atts.length, batches: batches.length, ids, counts }
  })

// ---------------------------------------------------------------------------

const runStore = async (kind) => {
  const store = await createStore(kind)
  const started = Date.now()
  let proc
  try {
    const port = await freePort()
    const env = envOf(store, port)
    const key = await createKey(env, store.dataDir)
    const log = { acked: new Map(), sent: 0, failed: 0, conflicts: [] }
    for (let i = 1; i <= ITERATIONS; i++) {
      proc = await startServe(env, store.dataDir, port)
      let stop = false
      const running = load(proc.url, key, () => stop, log)
      const delay = MIN_MS + Math.floor(Math.random() * (MAX_MS - MIN_MS))
      await sleep(delay)
      await proc.kill("SIGKILL")
      stop = true
      await running
      const snap = await checkInvariants(store.url)
      process.stdout.write(
        `[${kind}] ${i}/${ITERATIONS} killed after ${delay} ms: ${snap.attestations} stored (T0 ${snap.byLevel.T0}), ${snap.batches} batches, ${log.acked.size} acked\n`
      )
      if (snap.violations.length > 0) throw new Error(`invariants violated after kill ${i}:\n${snap.violations.slice(0, 50).join("\n")}`)
    }
    proc = await startServe(env, store.dataDir, port)
    const deadline = Date.now() + 30_000
    while (true) {
      const stats = await (await fetch(`${proc.url}/v1/stats`)).json()
      if (stats.by_level.T0 === 0) break
      if (Date.now() > deadline) throw new Error(`still ${stats.by_level.T0} attestations at T0 30 s after the last restart`)
      await sleep(100)
    }
    await proc.kill("SIGTERM")
    const snap = await checkInvariants(store.url)
    const problems = [...snap.violations, ...log.conflicts]
    for (const [hash, id] of log.acked) {
      if (snap.counts.get(hash) !== 1) problems.push(`acknowledged ${hash} stored ${snap.counts.get(hash) ?? 0} times`)
      else if (snap.ids.get(hash) !== id) problems.push(`acknowledged ${hash} as ${id}, stored as ${snap.ids.get(hash)}`)
    }
    if (snap.byLevel.T0 !== 0) problems.push(`${snap.byLevel.T0} attestations still T0`)
    if (problems.length > 0) throw new Error(`final check failed:\n${problems.slice(0, 50).join("\n")}`)
    console.log(
      `[${kind}] OK: ${ITERATIONS} kills, ${log.acked.size} acknowledged, ${snap.attestations} stored, ${snap.batches} batches, ` +
        `${log.failed} failed requests, ${((Date.now() - started) / 1000).toFixed(1)} s`
    )
    return true
  } catch (e) {
    console.error(`[${kind}] FAILED: ${e instanceof Error ? e.message : String(e)}`)
    if (proc) console.error(`--- last server output ---\n${proc.output()}`)
    return false
  } finally {
    await proc?.kill("SIGKILL")
    if (KEEP) console.log(`[${kind}] kept: ${store.url} (${store.dataDir})`)
    else await store.drop().catch(() => {})
  }
}

if (!existsSync(BIN)) {
  console.error(`${BIN} is missing: run npm run build first`)
  process.exit(2)
}
let ok = true
for (const kind of STORES) {
  if (kind === "pg" && !(await pgReachable())) {
    if (process.env.CI === "true") {
      console.error(`[pg] CI=true but Postgres is unreachable at ${PG_ADMIN_URL}`)
      ok = false
    } else console.log(`[pg] skipped: Postgres unreachable at ${PG_ADMIN_URL}`)
    continue
  }
  ok = (await runStore(kind)) && ok
}
process.exit(ok ? 0 : 1)
