#!/usr/bin/env node
/**
 * The multi-instance soak (issue 14 §5): three `attestd serve --no-workers`
 * processes and one `attestd worker` on one fresh Postgres database, demo mode
 * with short windows; loopback attest load for N minutes while a random
 * process is killed with SIGKILL every few seconds and restarted; then the
 * load stops, every process is restarted once more, the pipeline drains, and
 * an audit is printed as a table:
 *
 *   - every acknowledged attestation is stored exactly once, with the id it
 *     was acknowledged with, and its T0 signature verifies against /v1/keys;
 *   - each seal window was sealed once; every attestation is in one batch whose
 *     leaf_count matches;
 *   - each day was anchored once and confirmed;
 *   - every t1_complete and t2_complete event of the load key's attestations
 *     reached the test receiver at least once;
 *   - the per-key rate limit held across the three instances (how far over).
 *
 * Usage: npm run soak -- --minutes 5   (or --seconds 40; --rate 40 attestations/s;
 *        --rate-limit 120 for the probed key; --keep keeps the database)
 * Exit code 1 when an audit line fails. `runSoak` is also used by test/Soak.
 */
import { spawn, execFile } from "node:child_process"
import { createPublicKey, verify, randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { freePort, randomHashHex, sleep } from "./common.mjs"

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const BIN = join(ROOT, "dist", "cli.mjs")


const withDatabase = (url, name) => {
  const u = new URL(url)
  u.pathname = `/${name}`
  return u.toString()
}

const baseEnv = (databaseUrl, dataDir, port, settings) => {
  const env = { ...process.env }
  for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
  return {
    ...env,
    HOST: "127.0.0.1",
    PORT: String(port),
    DATABASE_URL: databaseUrl,
    ATTESTD_DATA_DIR: dataDir,
    ATTESTD_MODE: "demo",
    ATTESTD_LOG_FORMAT: "json",
    ATTESTD_LOG_LEVEL: "warning",
    ...settings
  }
}

const runCli = (env, args) =>
  new Promise((res) => {
    execFile(process.execPath, [BIN, ...args], { env, cwd: env.ATTESTD_DATA_DIR, encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) =>
      res({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }))
  })

const createKey = async (env, scopes, rateLimit) => {
  const r = await runCli(env, ["keys", "create", "--label", `soak-${scopes}`, "--scopes", scopes, "--rate-limit", String(rateLimit)])
  if (r.code !== 0) throw new Error(`keys create: ${r.stderr}`)
  const line = r.stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()
  return JSON.parse(line)
}

/** A restartable child process: `serve --no-workers` or `worker`. */
const makeProcess = (name, args, env, port) => {
  const p = { name, port, url: port ? `http://127.0.0.1:${port}` : undefined, child: undefined, exited: undefined, starts: 0, kills: 0, tail: [] }
  p.start = () => {
    p.starts++
    const child = spawn(process.execPath, [BIN, ...args], { env, cwd: env.ATTESTD_DATA_DIR, stdio: ["ignore", "pipe", "pipe"] })
    const keep = (c) => {
      for (const line of c.toString("utf8").split("\n")) if (line) p.tail.push(line)
      if (p.tail.length > 200) p.tail.splice(0, p.tail.length - 200)
    }
    child.stdout.on("data", keep)
    child.stderr.on("data", keep)
    p.child = child
    p.exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })))
  }
  p.kill = async (signal = "SIGKILL") => {
    if (!p.child || p.child.exitCode !== null || p.child.signalCode !== null) return
    p.child.kill(signal)
    await p.exited
  }
  p.ready = async (timeoutMs = 120_000) => {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (!p.url) return
      try {
        const r = await fetch(`${p.url}/v1/healthz`, { signal: AbortSignal.timeout(5000) })
        await r.arrayBuffer()
        if (r.status === 200) return
      } catch {
        // not yet
      }
      await sleep(50)
    }
    throw new Error(`${name} not ready:\n${p.tail.slice(-20).join("\n")}`)
  }
  return p
}

/** The webhook receiver: records each (event, attestation id). */
const startReceiver = async () => {
  const seen = new Map()
  let requests = 0
  const server = createServer((req, res) => {
    const parts = []
    req.on("data", (c) => parts.push(c))
    req.on("end", () => {
      requests++
      try {
        const body = JSON.parse(Buffer.concat(parts).toString("utf8"))
        const k = `${body.event} ${body.attestation_id}`
        seen.set(k, (seen.get(k) ?? 0) + 1)
      } catch {
        // counted as a request only
      }
      res.writeHead(204).end()
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise((r) => server.listen(0, "127.0.0.1", r))
  return { url: `http://127.0.0.1:${server.address().port}/hook`, seen, requests: () => requests, close: () => new Promise((r) => server.close(r)) }
}

/** Attest load over the API urls; records every acknowledgement. */
const loadLoop = async ({ urls, key, stop, acked, stats, batchSize = 10, periodMs }) => {
  let turn = Math.floor(Math.random() * 1000)
  while (!stop()) {
    const began = Date.now()
    const live = urls()
    const base = live[turn++ % live.length]
    const single = turn % 4 === 0
    const hashes = single ? [randomHashHex()] : Array.from({ length: batchSize }, randomHashHex)
    stats.sent += hashes.length
    try {
      const res = await fetch(single ? `${base}/v1/attest` : `${base}/v1/attest/batch`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify(single ? { hash_hex: hashes[0] } : { hashes }),
        signal: AbortSignal.timeout(10_000)
      })
      const text = await res.text()
      if (res.status === 200 || res.status === 201) {
        const body = JSON.parse(text)
        for (const a of single ? [body] : body.attestations) {
          const prev = acked.get(a.hash_hex)
          if (prev !== undefined && prev !== a.id) stats.conflicts++
          acked.set(a.hash_hex, a.id)
        }
        stats.ok++
      } else {
        stats.refused++
        await sleep(20)
      }
    } catch {
      stats.errors++
      await sleep(20)
    }
    await sleep(Math.max(0, periodMs - (Date.now() - began)))
  }
}

/** Single attests with the rate-limited key, spread over every instance; records accepted send times. */
const probeLoop = async ({ urls, key, stop, acked, accepted, stats, everyMs }) => {
  let turn = 0
  while (!stop()) {
    const live = urls()
    const base = live[turn++ % live.length]
    const sentAt = Date.now()
    try {
      const hash = randomHashHex()
      const res = await fetch(`${base}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex: hash }),
        signal: AbortSignal.timeout(10_000)
      })
      const text = await res.text()
      if (res.status === 201 || res.status === 200) {
        const body = JSON.parse(text)
        acked.set(body.hash_hex, body.id)
        accepted.push(sentAt)
      } else if (res.status === 429) stats.limited++
      else stats.other++
    } catch {
      stats.errors++
    }
    await sleep(Math.max(0, everyMs - (Date.now() - sentAt)))
  }
}

/** The most requests accepted in any 60 one-second buckets (the limiter's window). */
const maxPerWindow = (times) => {
  const perSecond = new Map()
  for (const t of times) {
    const s = Math.floor(t / 1000)
    perSecond.set(s, (perSecond.get(s) ?? 0) + 1)
  }
  const seconds = [...perSecond.keys()].sort((a, b) => a - b)
  let max = 0
  for (const start of seconds) {
    let n = 0
    for (let s = start; s < start + 60; s++) n += perSecond.get(s) ?? 0
    max = Math.max(max, n)
  }
  return max
}

const verifyT0 = (jwk, payload, signatureB64) =>
  verify(
    "sha256",
    Buffer.from(payload, "utf8"),
    { key: createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, format: "jwk" }), dsaEncoding: "der" },
    Buffer.from(signatureB64, "base64")
  )

/**
 * Runs one soak. Options: durationMs, killEveryMs [min, max], minKills (the load
 * goes on past durationMs, up to 6× it, until that many kills happened: each
 * restart is waited for before the next kill, and a loaded machine restarts
 * slowly), adminUrl, rateLimit, concurrency, drainTimeoutMs, keep, log (a
 * function for progress lines).
 * Resolves with { rows, ok, figures }.
 */
export const runSoak = async (options = {}) => {
  const durationMs = options.durationMs ?? 60_000
  const minKills = options.minKills ?? 0
  const [killMin, killMax] = options.killEveryMs ?? [2_000, 5_000]
  const adminUrl = options.adminUrl ?? process.env.SOAK_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
  const rateLimit = options.rateLimit ?? 120
  const log = options.log ?? ((line) => console.log(line))
  const drainTimeoutMs = options.drainTimeoutMs ?? 120_000

  const dbName = `attestd_soak_${process.pid}_${randomBytes(4).toString("hex")}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  await admin.end()
  const databaseUrl = withDatabase(adminUrl, dbName)
  const dirs = []
  const procs = []
  const receiver = await startReceiver()
  const settings = {
    ATTESTD_SEAL_INTERVAL: "1s",
    ATTESTD_ANCHOR_INTERVAL: options.anchorInterval ?? "10s",
    ATTESTD_OTS_UPGRADE_INTERVAL: "1s",
    ATTESTD_DEMO_CONFIRM_DELAY: "2s",
    ATTESTD_WEBHOOK_RETRY_DELAYS: "500ms,1s,2s,3s,5s,5s,5s,5s,5s,5s",
    ATTESTD_DEFAULT_RATE_LIMIT: "1000000",
    // load generators and pollers all speak from 127.0.0.1: no public limit per address
    ATTESTD_PUBLIC_RATE_LIMIT: "0"
  }
  try {
    const dirFor = (name) => {
      const d = mkdtempSync(join(tmpdir(), `attestd-soak-${name}-`))
      dirs.push(d)
      return d
    }
    // Migrate and create the keys once, before anything runs.
    const setupEnv = baseEnv(databaseUrl, dirFor("setup"), 0, settings)
    const m = await runCli(setupEnv, ["migrate"])
    if (m.code !== 0) throw new Error(`migrate: ${m.stderr}`)
    const loadKey = await createKey(setupEnv, "attest,batch,webhook", 100_000_000)
    const probeKey = await createKey(setupEnv, "attest", rateLimit)

    for (let i = 0; i < 3; i++) {
      const port = await freePort()
      procs.push(makeProcess(`api${i + 1}`, ["serve", "--no-workers", "--no-migrate"], baseEnv(databaseUrl, dirFor(`api${i + 1}`), port, settings), port))
    }
    procs.push(makeProcess("worker", ["worker", "--no-migrate"], baseEnv(databaseUrl, dirFor("worker"), 0, settings), 0))
    for (const p of procs) p.start()
    for (const p of procs) await p.ready()
    const apis = procs.filter((p) => p.url)
    const urls = () => apis.map((p) => p.url)

    const hook = await fetch(`${apis[0].url}/v1/webhook/register`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${loadKey.key}` },
      body: JSON.stringify({ url: receiver.url, events: ["t1_complete", "t2_complete"] })
    })
    if (hook.status >= 300) throw new Error(`webhook register: ${hook.status} ${await hook.text()}`)

    log(`soak: ${durationMs / 1000} s of load on 3 API processes + 1 worker, database ${dbName}`)
    const started = Date.now()
    let stopping = false
    const stop = () => stopping
    const acked = new Map()
    const probeAcked = new Map()
    const accepted = []
    const stats = { sent: 0, ok: 0, refused: 0, errors: 0, conflicts: 0 }
    const probeStats = { limited: 0, other: 0, errors: 0 }
    // Paced load (the webhook receiver must hear of every attestation twice while the worker keeps dying).
    const concurrency = options.concurrency ?? 4
    const batchSize = 10
    const perSecond = options.attestsPerSecond ?? 40
    const periodMs = Math.round((1000 * batchSize * concurrency) / perSecond)
    const loops = [
      ...Array.from({ length: concurrency }, () => loadLoop({ urls, key: loadKey.key, stop, acked, stats, batchSize, periodMs })),
      // The rate-limited key, from four clients at once over the three instances, well above its limit.
      ...Array.from({ length: 4 }, () =>
        probeLoop({ urls, key: probeKey.key, stop, acked: probeAcked, accepted, stats: probeStats, everyMs: Math.max(20, Math.floor(60_000 / rateLimit)) }))
    ]
    const kills = []
    const killer = (async () => {
      while (!stopping) {
        await sleep(killMin + Math.random() * (killMax - killMin))
        if (stopping) break
        const victim = procs[Math.floor(Math.random() * procs.length)]
        await victim.kill("SIGKILL")
        victim.kills++
        kills.push({ at: Date.now() - started, name: victim.name })
        victim.start()
        await victim.ready().catch((e) => log(String(e)))
      }
    })()
    let lastReport = Date.now()
    while (Date.now() - started < durationMs || (kills.length < minKills && Date.now() - started < 6 * durationMs)) {
      await sleep(500)
      if (Date.now() - lastReport >= 15_000) {
        lastReport = Date.now()
        log(`  ${Math.round((Date.now() - started) / 1000)} s: ${acked.size} acknowledged, ${kills.length} kills, ${stats.errors} connection errors`)
      }
    }
    stopping = true
    await Promise.all(loops)
    await killer
    const loadEnded = Date.now()

    // Drain: all restarted cleanly once more, then wait for T1, T2 and deliveries.
    for (const p of procs) {
      await p.kill("SIGKILL")
      p.start()
    }
    for (const p of procs) await p.ready()
    log(`soak: load stopped after ${Math.round((loadEnded - started) / 1000)} s; draining`)
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    const q = async (text) => (await db.query(text)).rows
    const loadIds = new Set(acked.values())
    const missingEvents = () => {
      let n = 0
      for (const id of loadIds) {
        if (!receiver.seen.has(`t1_complete ${id}`)) n++
        if (!receiver.seen.has(`t2_complete ${id}`)) n++
      }
      return n
    }
    const drainDeadline = Date.now() + drainTimeoutMs
    let drained = false
    while (Date.now() < drainDeadline) {
      const [t0] = await q(`SELECT count(*)::int AS n FROM attestations WHERE level <> 'T2'`)
      const [open] = await q(`SELECT count(*)::int AS n FROM daily_roots WHERE status <> 'confirmed'`)
      const [unanchored] = await q(`SELECT count(*)::int AS n FROM batches WHERE daily_root_id IS NULL`)
      if (t0.n === 0 && open.n === 0 && unanchored.n === 0 && missingEvents() === 0) {
        drained = true
        break
      }
      await sleep(500)
    }
    const drainMs = Date.now() - loadEnded

    // Audit.
    const keys = (await (await fetch(`${apis[0].url}/v1/keys`)).json()).keys
    const jwkOf = new Map(keys.map((k) => [k.kid, k]))
    const allAcked = new Map([...acked, ...probeAcked])
    const stored = await q(`SELECT id, hash_hex, registered_at, signature, signing_key_id, format_version, level, batch_id FROM attestations`)
    const byHash = new Map()
    for (const r of stored) {
      const list = byHash.get(r.hash_hex) ?? []
      list.push(r)
      byHash.set(r.hash_hex, list)
    }
    let missing = 0, duplicated = 0, wrongId = 0, badSignature = 0, unverifiable = 0
    for (const [hash, id] of allAcked) {
      const rows = byHash.get(hash) ?? []
      if (rows.length === 0) missing++
      else if (rows.length > 1) duplicated++
      const row = rows[0]
      if (!row) continue
      if (row.id !== id) wrongId++
      const jwk = jwkOf.get(row.signing_key_id)
      if (!jwk) unverifiable++
      else if (!verifyT0(jwk, `${row.format_version}|${row.hash_hex}|${row.registered_at}`, row.signature)) badSignature++
    }
    // A sample through the public verify endpoint as well.
    let verifyFailures = 0
    const sample = [...allAcked.keys()].sort(() => Math.random() - 0.5).slice(0, 200)
    for (const hash of sample) {
      const r = await fetch(`${apis[0].url}/v1/verify`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ hash_hex: hash }) })
      const body = await r.json()
      if (r.status !== 200 || body.exists !== true || body.id !== allAcked.get(hash)) verifyFailures++
    }
    const [windows] = await q(`SELECT count(*)::int AS batches, count(DISTINCT window_end)::int AS windows FROM batches`)
    const leafMismatch = await q(`SELECT b.id FROM batches b LEFT JOIN (SELECT batch_id, count(*)::int AS n FROM attestations GROUP BY batch_id) a ON a.batch_id = b.id WHERE coalesce(a.n, 0) <> b.leaf_count`)
    const [days] = await q(`SELECT count(*)::int AS days, count(DISTINCT window_end)::int AS distinct_days, count(*) FILTER (WHERE status = 'confirmed')::int AS confirmed FROM daily_roots`)
    const [unanchored] = await q(`SELECT count(*)::int AS n FROM batches WHERE daily_root_id IS NULL`)
    const [atT0] = await q(`SELECT count(*)::int AS n FROM attestations WHERE level = 'T0'`)
    let t1Delivered = 0, t2Delivered = 0, redelivered = 0
    for (const id of loadIds) {
      if (receiver.seen.has(`t1_complete ${id}`)) t1Delivered++
      if (receiver.seen.has(`t2_complete ${id}`)) t2Delivered++
    }
    for (const n of receiver.seen.values()) if (n > 1) redelivered++
    const maxAccepted = maxPerWindow(accepted)
    const over = Math.max(0, maxAccepted - rateLimit)

    const rows = [
      ["load", "attestations acknowledged", String(allAcked.size), true],
      ["load", "kills (SIGKILL + restart)", `${kills.length} (${procs.map((p) => `${p.name} ${p.kills}`).join(", ")})`, kills.length > 0 || durationMs < 10_000],
      ["load", "requests failed (connection / non-2xx)", `${stats.errors} / ${stats.refused}`, true],
      ["T0", "acknowledged and stored exactly once", `${allAcked.size - missing - duplicated}/${allAcked.size} (missing ${missing}, duplicated ${duplicated})`, missing === 0 && duplicated === 0],
      ["T0", "stored id = acknowledged id", `${wrongId === 0 ? "all" : `${wrongId} differ`}${stats.conflicts ? `; ${stats.conflicts} conflicting acks` : ""}`, wrongId === 0 && stats.conflicts === 0],
      ["T0", "signature verifies (GET /v1/keys JWK)", `${allAcked.size - badSignature - unverifiable}/${allAcked.size}`, badSignature === 0 && unverifiable === 0],
      ["T0", "POST /v1/verify finds a sample", `${sample.length - verifyFailures}/${sample.length}`, verifyFailures === 0],
      ["T1", "seal windows sealed once", `${windows.batches} batches, ${windows.windows} distinct windows`, windows.batches === windows.windows],
      ["T1", "batch leaf_count = its attestations", leafMismatch.length === 0 ? "all" : `${leafMismatch.length} differ`, leafMismatch.length === 0],
      ["T1", "attestations left at T0", String(atT0.n), atT0.n === 0],
      ["T2", "days anchored once", `${days.days} days, ${days.distinct_days} distinct`, days.days === days.distinct_days && days.days > 0],
      ["T2", "days confirmed; batches without a day", `${days.confirmed}/${days.days}; ${unanchored.n}`, days.confirmed === days.days && unanchored.n === 0],
      ["webhooks", "t1_complete delivered at least once", `${t1Delivered}/${loadIds.size}`, t1Delivered === loadIds.size],
      ["webhooks", "t2_complete delivered at least once", `${t2Delivered}/${loadIds.size}`, t2Delivered === loadIds.size],
      ["webhooks", "events delivered more than once", String(redelivered), true],
      ["rate limit", `per-key limit ${rateLimit}/min over 3 instances`, `max ${maxAccepted} accepted in a 60 s window; ${over} over (${(100 * over / rateLimit).toFixed(1)}%); ${probeStats.limited} refused`, over <= Math.ceil(rateLimit * 0.05)],
      ["drain", "time to drain after load", `${(drainMs / 1000).toFixed(1)} s${drained ? "" : " (timed out)"}`, drained]
    ]
    await db.end()
    const ok = rows.every((r) => r[3])
    return {
      ok,
      rows,
      table: formatTable(rows),
      figures: { acknowledged: allAcked.size, kills: kills.length, missing, duplicated, badSignature, batches: windows.batches, windows: windows.windows, days: days.days, t1Delivered, t2Delivered, maxAccepted, rateLimit, drainMs },
      tails: ok ? [] : procs.map((p) => `--- ${p.name}\n${p.tail.slice(-15).join("\n")}`)
    }
  } finally {
    for (const p of procs) await p.kill("SIGKILL").catch(() => {})
    await receiver.close()
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
    if (!options.keep) {
      const c = new pg.Client({ connectionString: adminUrl })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {})
      await c.end()
    }
  }
}

const formatTable = (rows) => {
  const cells = [["area", "check", "result", "ok"], ...rows.map(([a, b, c, ok]) => [a, b, c, ok ? "yes" : "NO"])]
  const widths = cells[0].map((_, i) => Math.max(...cells.map((r) => r[i].length)))
  const line = (r) => "| " + r.map((c, i) => c.padEnd(widths[i])).join(" | ") + " |"
  return [line(cells[0]), "|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|", ...cells.slice(1).map(line)].join("\n")
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2)
  const arg = (name) => {
    const i = args.indexOf(`--${name}`)
    return i >= 0 ? args[i + 1] : undefined
  }
  const minutes = Number(arg("minutes") ?? (arg("seconds") ? Number(arg("seconds")) / 60 : 5))
  const result = await runSoak({
    durationMs: Math.round(minutes * 60_000),
    rateLimit: Number(arg("rate-limit") ?? 120),
    attestsPerSecond: Number(arg("rate") ?? 40),
    keep: args.includes("--keep"),
    drainTimeoutMs: 300_000
  })
  console.log(result.table)
  for (const t of result.tails) console.log(t)
  process.exit(result.ok ? 0 : 1)
}
