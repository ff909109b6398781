// The floor: what this machine can do per hash without attestd in the way, measured in the
// same run as the HTTP scenarios so that each scenario's server CPU per request can be read
// against it.
//
//   sign       node:crypto ECDSA P-256 over the T0 message with an already parsed key
//   <store>    sign + a group-committed insert of 64 attestation rows (and their claim rows)
//              per transaction, the shape attest-new writes; SQLite with the service's pragmas
//              (WAL, synchronous as the server sets it), Postgres with synchronous_commit on
//   lookup     one indexed SELECT by hash_hex (what verify and attest-existing read)
//
// Figures are process CPU µs per hash (robust to other load) and wall µs per hash; for
// Postgres the server's own CPU is not in "cpu" (it is a separate process), so read "wall".
import Database from "better-sqlite3"
import { createSign, generateKeyPairSync, randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { createPgDatabase, dropPgDatabase } from "./lib.mjs"

const BATCH = 64

const measure = async (n, fn) => {
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await fn()
  const wall = (performance.now() - t0) * 1000
  const cpu = process.cpuUsage(cpu0)
  return { cpuUs: (cpu.user + cpu.system) / n, wallUs: wall / n }
}

const signer = () => {
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" })
  return (hashHex, registeredAt) =>
    createSign("sha256").update(`2.0.0|${hashHex}|${registeredAt}`).sign({ key: privateKey, dsaEncoding: "ieee-p1363" }).toString("base64url")
}

const rowsFor = (sign, n) =>
  Array.from({ length: n }, (_, i) => {
    const hash = randomBytes(32).toString("hex")
    const at = new Date(Date.UTC(2026, 0, 1) + i).toISOString().replace("Z", "000Z")
    return { id: `att_${randomBytes(12).toString("base64url")}`, hash, at, sig: sign(hash, at) }
  })

const SCHEMA = (serial) => [
  `CREATE TABLE attestations (seq ${serial} PRIMARY KEY, id TEXT NOT NULL UNIQUE, hash_hex TEXT NOT NULL UNIQUE,
     registered_at TEXT NOT NULL, signature TEXT NOT NULL, signing_key_id TEXT NOT NULL,
     format_version TEXT NOT NULL, level TEXT NOT NULL DEFAULT 'T0')`,
  `CREATE INDEX attestations_pending_t0 ON attestations (seq) WHERE level = 'T0'`,
  `CREATE TABLE claims (id ${serial} PRIMARY KEY, attestation_seq INTEGER NOT NULL, api_key_id TEXT NOT NULL,
     source TEXT, etag TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (attestation_seq, api_key_id))`
]

const floorSqlite = async (sign, n) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "attestd-floor-"))
  const db = new Database(path.join(dir, "floor.db"))
  try {
    db.pragma("journal_mode = WAL")
    db.pragma(`synchronous = ${process.env.BENCH_FLOOR_SQLITE_SYNC ?? "FULL"}`)
    for (const s of SCHEMA("INTEGER")) db.exec(s)
    const insA = db.prepare("INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version) VALUES (?, ?, ?, ?, 'k', '2.0.0') RETURNING seq")
    const insC = db.prepare("INSERT INTO claims (attestation_seq, api_key_id, source, etag, created_at) VALUES (?, 'key', NULL, 'e', ?)")
    const batch = db.transaction((rows) => {
      for (const r of rows) insC.run(insA.get(r.id, r.hash, r.at, r.sig).seq, r.at)
    })
    const hashes = []
    const write = await measure(n, async () => {
      for (let done = 0; done < n; done += BATCH) {
        const rows = rowsFor(sign, Math.min(BATCH, n - done))
        batch(rows)
        for (const r of rows) hashes.push(r.hash)
      }
    })
    const sel = db.prepare("SELECT id, registered_at, signature FROM attestations WHERE hash_hex = ?")
    const lookup = await measure(n, async () => {
      for (const h of hashes) sel.get(h)
    })
    return { write, lookup }
  } finally {
    db.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

const floorPg = async (sign, n) => {
  const name = `attestd_bench_floor_${process.pid}`
  const url = await createPgDatabase(name)
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    for (const s of SCHEMA("BIGSERIAL")) await client.query(s)
    const hashes = []
    const write = await measure(n, async () => {
      for (let done = 0; done < n; done += BATCH) {
        const rows = rowsFor(sign, Math.min(BATCH, n - done))
        const params = rows.flatMap((r) => [r.id, r.hash, r.at, r.sig])
        const values = rows.map((_, i) => `($${4 * i + 1}, $${4 * i + 2}, $${4 * i + 3}, $${4 * i + 4}, 'k', '2.0.0')`).join(", ")
        await client.query("BEGIN")
        const inserted = await client.query(
          `INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version) VALUES ${values} RETURNING seq, registered_at`,
          params
        )
        await client.query(
          "INSERT INTO claims (attestation_seq, api_key_id, etag, created_at) SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
          [inserted.rows.map((r) => r.seq), inserted.rows.map(() => "key"), inserted.rows.map(() => "e"), inserted.rows.map((r) => r.registered_at)]
        )
        await client.query("COMMIT")
        for (const r of rows) hashes.push(r.hash)
      }
    })
    const lookup = await measure(hashes.length, async () => {
      for (const h of hashes) await client.query({ name: "floor-lookup", text: "SELECT id, registered_at, signature FROM attestations WHERE hash_hex = $1", values: [h] })
    })
    return { write, lookup }
  } finally {
    await client.end()
    await dropPgDatabase(name)
  }
}

/** { sign, sqlite: {write, lookup}, pg: {write, lookup}, text } — each {cpuUs, wallUs} per hash. */
export const benchFloor = async ({ hashes = 20_000, stores = ["sqlite", "pg"], log = console.log } = {}) => {
  const sign = signer()
  for (let i = 0; i < 500; i++) sign(randomBytes(32).toString("hex"), "2026-01-01T00:00:00.000000Z") // warm-up
  const at = "2026-01-01T00:00:00.000000Z"
  const signOnly = await measure(hashes, async () => {
    for (let i = 0; i < hashes; i++) sign(randomBytes(32).toString("hex"), at)
  })
  log(`  sign: ${signOnly.cpuUs.toFixed(1)} µs CPU/hash`)
  const out = { sign: signOnly }
  if (stores.includes("sqlite")) {
    out.sqlite = await floorSqlite(sign, hashes)
    log(`  sqlite: sign + insert ×${BATCH}/tx ${out.sqlite.write.cpuUs.toFixed(1)} µs CPU/hash (${out.sqlite.write.wallUs.toFixed(1)} wall); lookup ${out.sqlite.lookup.cpuUs.toFixed(1)} µs`)
  }
  if (stores.includes("pg")) {
    out.pg = await floorPg(sign, hashes)
    log(`  pg: sign + insert ×${BATCH}/tx ${out.pg.write.wallUs.toFixed(1)} µs wall/hash (${out.pg.write.cpuUs.toFixed(1)} client CPU); lookup ${out.pg.lookup.wallUs.toFixed(1)} µs wall`)
  }
  return out
}
