// What a request's parts cost, in this process, over the compiled service (dist/): the
// pieces README's "what limits each figure" names, measured in the same run as the HTTP
// scenarios, each beside what the same work costs without the library in the way.
//
//   fiber        running a small Effect program to completion on the service's runtime
//   statement    one SELECT by hash_hex through @effect/sql (the service's SqlClient, raw rows),
//                beside the same statement through better-sqlite3 on the same database file
//   findByHash   AttestationRepo.findByHash: the statement and its row decoded by schema
//   row decode   one attestations row through Effect's decoder of AttestationRow, through the
//                repositories' decoder (decodeRows: the columns checked, then the keys renamed),
//                and through Effect's decoder of the same checks without the renames
//   log line     one access-log line through directLogger and the JSON logger (to a sink),
//                beside JSON.stringify of the same line
//
// Figures are process CPU µs per operation, the best of 3 rounds (robust to other load).
import Database from "better-sqlite3"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Writable } from "node:stream"
import { pathToFileURL } from "node:url"

const ROUNDS = 3

/** Best-of-ROUNDS CPU µs per call of `fn` (awaited when it returns a promise). */
const cpuPerOp = async (n, fn) => {
  let best = Infinity
  for (let r = 0; r < ROUNDS; r++) {
    const cpu0 = process.cpuUsage()
    for (let i = 0; i < n; i++) {
      const p = fn(i)
      if (p && typeof p.then === "function") await p
    }
    const cpu = process.cpuUsage(cpu0)
    best = Math.min(best, (cpu.user + cpu.system) / n)
  }
  return best
}

export const benchCosts = async ({ dist, ops = 5000, log }) => {
  const load = (rel) => import(pathToFileURL(path.join(dist, rel)).href)
  // effect and @effect/sql as the compiled service resolves them
  const { Effect, Layer, Logger, LogLevel, ManagedRuntime, Schema } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const { AppLive } = await load("main.js")
  const { AppConfig } = await load("Platform/Config.js")
  const { AttestationRepo } = await load("Attestations/Repo.js")
  const { AttestationRow, Level } = await load("Attestations/Domain.js")
  const { AttestationId, newAttestationId } = await load("Domain/AttestationId.js")
  const { HashHex } = await load("Domain/HashHex.js")
  const { DbInt, renamingRowsDecoder } = await load("Platform/Rows.js")
  const { directLogger, jsonLoggerTo } = await load("Platform/Logging.js")

  const dir = mkdtempSync(path.join(os.tmpdir(), "attestd-costs-"))
  const quiet = Logger.minimumLogLevel(LogLevel.Warning)
  const runtime = ManagedRuntime.make(
    AppLive(AppConfig.make({ databaseUrl: `sqlite:${path.join(dir, "attestd.db")}`, dataDir: dir }), { workers: false }).pipe(Layer.provide(quiet))
  )
  try {
    const hashes = Array.from({ length: 2000 }, () => randomBytes(32).toString("hex"))
    const sql = await runtime.runPromise(SqlClient.SqlClient)
    const at = new Date().toISOString().replace("Z", "000Z")
    await runtime.runPromise(sql.withTransaction(Effect.forEach(hashes, (h) =>
      sql`INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version)
          VALUES (${newAttestationId()}, ${h}, ${at}, ${randomBytes(64).toString("base64url")}, ${"bench"}, ${"2.0.0"})`, { discard: true })))
    const repo = await runtime.runPromise(AttestationRepo)
    const hashOf = (i) => hashes[i % hashes.length]

    const small = Effect.gen(function*() {
      const a = yield* Effect.succeed(1)
      return yield* Effect.sync(() => a + 1)
    })
    const fiber = await cpuPerOp(ops, () => runtime.runPromise(small))
    const statement = await cpuPerOp(ops, (i) => runtime.runPromise(sql`SELECT * FROM attestations WHERE hash_hex = ${hashOf(i)}`))
    const findByHash = await cpuPerOp(ops, (i) => runtime.runPromise(repo.findByHash(hashOf(i))))

    const db = new Database(path.join(dir, "attestd.db"))
    const select = db.prepare("SELECT * FROM attestations WHERE hash_hex = ?")
    const driver = await cpuPerOp(ops * 4, (i) => select.all(hashOf(i)))
    const [row] = select.all(hashOf(0))
    db.close()

    const decodeRow = Schema.decodeUnknownSync(Schema.Array(AttestationRow))
    const nullOr = Schema.NullOr
    const noRenames = Schema.decodeUnknownSync(Schema.Array(Schema.Struct({
      seq: DbInt, id: AttestationId, hash_hex: HashHex, registered_at: Schema.String, signature: Schema.String,
      signing_key_id: Schema.String, format_version: Schema.String, level: Level, batch_id: nullOr(DbInt),
      leaf_index: nullOr(DbInt), t1_at: nullOr(Schema.String), t2_at: nullOr(Schema.String), t2_block: nullOr(DbInt),
      legacy_id: nullOr(DbInt)
    })))
    const rowDecode = await cpuPerOp(ops * 4, () => decodeRow([row]))
    const decodeRenaming = renamingRowsDecoder(AttestationRow)
    const rowDecodeRepo = await cpuPerOp(ops * 4, () => Effect.runSync(decodeRenaming([row])))
    const rowDecodeNoRenames = await cpuPerOp(ops * 4, () => noRenames([row]))

    const sink = new Writable({ write: (_chunk, _encoding, callback) => callback() })
    const logRuntime = ManagedRuntime.make(Logger.replace(Logger.defaultLogger, jsonLoggerTo(sink)))
    const line = directLogger(await logRuntime.runtime())
    const annotations = { request_id: "8c1c3d5e-1f0a-4f6b-9b7e-2f8a0f2b7c11", method: "POST", route: "/v1/verify", status: 200, duration_ms: 0.123, client_ip: "127.0.0.1" }
    const logLine = await cpuPerOp(ops * 4, () => line(LogLevel.Info, "request", annotations))
    const stringify = await cpuPerOp(ops * 4, () => JSON.stringify({ time: new Date().toISOString(), level: "info", message: "request", ...annotations }))
    await logRuntime.dispose()

    const out = { fiber, statement, driver, findByHash, rowDecode, rowDecodeRepo, rowDecodeNoRenames, logLine, stringify }
    const f = (x) => `${x.toFixed(1)} µs`
    log(`  fiber (small program, run to completion): ${f(fiber)}`)
    log(`  statement through @effect/sql: ${f(statement)}; through better-sqlite3: ${f(driver)} (${(statement / driver).toFixed(1)}×)`)
    log(`  AttestationRepo.findByHash (statement + row decode): ${f(findByHash)}`)
    log(`  row decode (AttestationRow): Effect's decoder ${f(rowDecode)}; the repositories' (decodeRows) ${f(rowDecodeRepo)}; Effect's without the renames ${f(rowDecodeNoRenames)}`)
    log(`  access-log line (directLogger + JSON logger): ${f(logLine)}; JSON.stringify of it: ${f(stringify)}`)
    return out
  } finally {
    await runtime.dispose()
    rmSync(dir, { recursive: true, force: true })
  }
}
