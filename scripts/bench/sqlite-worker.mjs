// What moving SQLite off the event loop would buy attest-new: a group-committed
// batch (BEGIN, one multi-row INSERT … RETURNING * into the service's own
// `attestations` table, COMMIT with synchronous=FULL), run on the event loop as
// better-sqlite3 runs it today, against the same batch sent to a worker thread
// that owns its own connection. Reports wall time per batch and how long the
// event loop was busy per batch (performance.eventLoopUtilization), minus the
// cost of building the rows. The schema comes from `attestd keys create` on a
// fresh data dir (the service's migrations). BENCH_SQLITE_WORKER_BATCHES (300),
// BENCH_SQLITE_WORKER_ROWS (23: a typical batch at 50 connections,
// BENCH_ONLY=statements). An experiment for the design, not a feature of the service: the
// client it argued for was built (e1367bd) and measured slower on 2 cores, so reverted
// (README, Performance).
import Database from "better-sqlite3"
import { randomBytes } from "node:crypto"
import { createRequire } from "node:module"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import { Worker } from "node:worker_threads"
import { attestdEnv, createApiKey } from "./lib.mjs"

const COLUMNS = ["id", "hash_hex", "registered_at", "signature", "signing_key_id", "format_version"]
const insertSql = (n) =>
  `INSERT INTO attestations (${COLUMNS.map((c) => `"${c}"`).join(",")}) VALUES ${
    Array.from({ length: n }, () => "(?,?,?,?,?,?)").join(",")
  } ON CONFLICT (hash_hex) DO NOTHING RETURNING *`

// The service's pragmas (src/Platform/Sql.ts), for both connections.
const PRAGMAS = ["journal_mode = WAL", "synchronous = FULL", "busy_timeout = 10000"]

// The worker: its own connection, one batch per message.
const WORKER = `
const { parentPort, workerData } = require("node:worker_threads")
const Database = require(workerData.driver)
const db = new Database(workerData.file)
for (const pragma of workerData.pragmas) db.pragma(pragma)
const insert = db.prepare(workerData.sql)
parentPort.on("message", ({ id, args }) => {
  db.exec("BEGIN")
  const rows = insert.all(...args)
  db.exec("COMMIT")
  parentPort.postMessage({ id, rows })
})
`

const rowArgs = (n) => {
  const args = []
  for (let i = 0; i < n; i++) {
    args.push(`att_${randomBytes(18).toString("base64url")}`, randomBytes(32).toString("hex"), "2026-11-23T15:30:47.051000+00:00", randomBytes(71).toString("base64"), "k".repeat(43), "2.0.0")
  }
  return args
}
const nextTurn = () => new Promise((resolve) => setImmediate(resolve))

const measure = async (batches, body) => {
  const elu0 = performance.eventLoopUtilization()
  const t0 = performance.now()
  for (let b = 0; b < batches; b++) await body()
  const elu = performance.eventLoopUtilization(elu0)
  return { wallUs: (performance.now() - t0) * 1000 / batches, busyUs: elu.active * 1000 / batches }
}

export const benchSqliteWorker = async ({ batches = 300, rows = 23, log = console.log }) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "attestd-sqlite-worker-"))
  const file = path.join(dir, "attestd.db")
  try {
    await createApiKey({ env: attestdEnv({ dataDir: dir }) })
    const sql = insertSql(rows)
    const db = new Database(file)
    for (const pragma of PRAGMAS) db.pragma(pragma)
    const insert = db.prepare(sql)
    const building = await measure(batches, async () => {
      rowArgs(rows)
      await nextTurn()
    })
    const inLoop = await measure(batches, async () => {
      const args = rowArgs(rows)
      db.exec("BEGIN")
      insert.all(...args)
      db.exec("COMMIT")
      await nextTurn()
    })
    db.close()
    const worker = new Worker(WORKER, { eval: true, workerData: { file, sql, pragmas: PRAGMAS, driver: createRequire(import.meta.url).resolve("better-sqlite3") } })
    const waiting = new Map()
    let next = 0
    worker.on("message", ({ id, rows: returned }) => {
      waiting.get(id)(returned)
      waiting.delete(id)
    })
    const send = (args) => new Promise((resolve) => {
      const id = next++
      waiting.set(id, resolve)
      worker.postMessage({ id, args })
    })
    const inWorker = await measure(batches, async () => {
      const returned = await send(rowArgs(rows))
      if (returned.length !== rows) throw new Error(`the worker inserted ${returned.length} of ${rows} rows`)
    })
    await worker.terminate()
    const result = {
      batches,
      rows,
      buildUs: building.busyUs,
      eventLoop: { wallUs: inLoop.wallUs, busyUs: inLoop.busyUs - building.busyUs },
      worker: { wallUs: inWorker.wallUs, busyUs: inWorker.busyUs - building.busyUs }
    }
    log(`  ${rows}-row batch, ${batches} batches: on the event loop ${result.eventLoop.wallUs.toFixed(0)} µs wall, loop busy ${result.eventLoop.busyUs.toFixed(0)} µs per batch;`)
    log(`  in a worker thread ${result.worker.wallUs.toFixed(0)} µs wall, loop busy ${result.worker.busyUs.toFixed(0)} µs per batch (building the rows, ${result.buildUs.toFixed(0)} µs, taken off both)`)
    return result
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
