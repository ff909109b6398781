/**
 * The SQLite client (src/Platform/Sqlite.ts): the statements, results, errors and
 * transactions of `@effect/sql-sqlite-node`'s client, the service's pragmas, and its
 * durability rule: a statement that ends a write (a COMMIT, a write outside a
 * transaction) completes only after the WAL's fsync, which runs off the event loop
 * while no other statement starts.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Deferred, Effect, Exit, Fiber, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { currentSqliteFile, layerFromUrl } from "../../src/Platform/Sql.js"
import * as Sqlite from "../../src/Platform/Sqlite.js"
import { withDb } from "../helpers/process.js"

const dir = mkdtempSync(join(tmpdir(), "attestd-sqlite-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0
const freshFile = () => join(dir, `db-${++n}.db`)

const run = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>, layer: Layer.Layer<SqlClient.SqlClient> = layerFromUrl(`sqlite:${freshFile()}`)) =>
  Effect.runPromise(Effect.scoped(Effect.provide(effect, layer)))

const table = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT NOT NULL, c BLOB)`)

/** A client whose WAL syncs are counted, and held until the test lets them go (or fails them). */
const heldSyncs = (file: string) => {
  const pending: Array<(error: Error | null) => void> = []
  const calls: Array<number> = []
  const layer = Sqlite.layer({
    filename: file,
    pragmas: [],
    syncFile: (fd, done) => {
      calls.push(fd)
      pending.push(done)
    }
  }).pipe(Layer.orDie)
  const release = (error: Error | null = null) => {
    for (const done of pending.splice(0)) done(error)
  }
  return { layer, calls, pending, release }
}

describe("the SQLite client", () => {
  it("runs statements: rows, values, run info, blobs, and the service's pragmas", async () => {
    const file = freshFile()
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* table
        yield* sql`INSERT INTO t (b, c) VALUES (${"x"}, ${new Uint8Array([1, 2, 255])})`
        const info = yield* sql`INSERT INTO t (b) VALUES (${"y"})`.raw
        return {
          rows: yield* sql`SELECT a, b, c FROM t ORDER BY a`,
          values: yield* sql`SELECT a, b FROM t ORDER BY a`.values,
          info,
          returning: yield* sql`INSERT INTO t (b) VALUES (${"z"}), (${"w"}) RETURNING a, b`,
          pragmas: yield* sql`SELECT (SELECT synchronous FROM pragma_synchronous) AS s, (SELECT foreign_keys FROM pragma_foreign_keys) AS f, (SELECT journal_mode FROM pragma_journal_mode) AS j, (SELECT timeout FROM pragma_busy_timeout) AS t`,
          file: yield* currentSqliteFile
        }
      }),
      layerFromUrl(`sqlite:${file}`)
    )
    expect(out.rows).toEqual([{ a: 1, b: "x", c: Buffer.from([1, 2, 255]) }, { a: 2, b: "y", c: null }])
    expect(out.values).toEqual([[1, "x"], [2, "y"]])
    expect(out.info).toEqual({ changes: 1, lastInsertRowid: 2 })
    expect(out.returning).toEqual([{ a: 3, b: "z" }, { a: 4, b: "w" }])
    // synchronous 1 = NORMAL: the commits' fsync is the client's own (below)
    expect(out.pragmas).toEqual([{ s: 1, f: 1, j: "wal", t: 10000 }])
    expect(out.file).toBe(file)
    // closing the layer closed the connection: another one reads every committed row
    expect(await withDb(`sqlite:${file}`, (query) => query("SELECT count(*) AS n FROM t"))).toEqual([{ n: 4 }])
  })

  it("fails a bad statement with a SqlError carrying the driver's code, and goes on", async () => {
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* table
        yield* sql`INSERT INTO t (a, b) VALUES (1, 'one')`
        const duplicate = yield* Effect.flip(sql`INSERT INTO t (a, b) VALUES (1, 'again')`)
        const syntax = yield* Effect.flip(sql.unsafe("SELEC nothing"))
        const rows = yield* sql`SELECT a, b FROM t`
        return { duplicate, syntax, rows }
      })
    )
    const code = (e: SqlError) => (e.cause as { code?: string }).code
    expect(out.duplicate._tag).toBe("SqlError")
    expect(code(out.duplicate)).toBe("SQLITE_CONSTRAINT_PRIMARYKEY")
    expect(code(out.syntax)).toBe("SQLITE_ERROR")
    expect(out.rows).toEqual([{ a: 1, b: "one" }])
  })

  it("commits a transaction whole, rolls back a failed or interrupted one, and never interleaves two", async () => {
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`
        yield* sql`INSERT INTO counter (id, n) VALUES (1, 0)`
        yield* table
        const failed = yield* Effect.exit(sql.withTransaction(Effect.zipRight(sql`INSERT INTO t (b) VALUES ('gone')`, Effect.fail("boom"))))
        // interrupted between two statements of its transaction
        const inside = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(sql.withTransaction(sql`INSERT INTO t (b) VALUES ('interrupted')`.pipe(Effect.zipRight(Deferred.succeed(inside, undefined)), Effect.zipRight(Effect.never))))
        yield* Deferred.await(inside)
        yield* Fiber.interrupt(fiber)
        // 40 read-modify-write transactions at once: each reads, yields, then writes
        yield* Effect.forEach(
          Array.from({ length: 40 }, (_, i) => i),
          () =>
            sql.withTransaction(Effect.gen(function*() {
              const [row] = yield* sql<{ n: number }>`SELECT n FROM counter WHERE id = 1`
              yield* Effect.yieldNow()
              yield* sql`UPDATE counter SET n = ${row!.n + 1} WHERE id = 1`
            })),
          { concurrency: "unbounded", discard: true }
        )
        yield* sql.withTransaction(sql`INSERT INTO t (b) VALUES ('kept')`)
        return { failed, rows: yield* sql`SELECT b FROM t`, counter: yield* sql`SELECT n FROM counter` }
      })
    )
    expect(Exit.isFailure(out.failed)).toBe(true)
    expect(out.rows).toEqual([{ b: "kept" }])
    expect(out.counter).toEqual([{ n: 40 }])
  })

  it("syncs the WAL once per commit and per write outside a transaction, never for reads or inside a transaction", async () => {
    const held = heldSyncs(freshFile())
    // every sync answered at once, in a later turn of the event loop, as fsync's callback is
    const counting = Sqlite.layer({
      filename: freshFile(),
      pragmas: [],
      syncFile: (fd, done) => {
        held.calls.push(fd)
        setImmediate(() => done(null))
      }
    }).pipe(Layer.orDie)
    const counts = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const at = () => held.calls.length
        yield* table
        const ddl = at()
        yield* sql`INSERT INTO t (b) VALUES ('one')`
        const write = at()
        yield* sql`SELECT * FROM t`
        yield* sql`SELECT count(*) FROM t`.values
        const reads = at()
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO t (b) VALUES ('two')`
          yield* sql`INSERT INTO t (b) VALUES ('three')`
          yield* sql`UPDATE t SET b = 'four' WHERE b = 'two'`
        }))
        const transaction = at()
        yield* sql.withTransaction(sql`SELECT * FROM t`)
        const readOnlyTransaction = at()
        return { ddl, write, reads, transaction, readOnlyTransaction }
      }),
      counting
    )
    expect(counts).toEqual({ ddl: 1, write: 2, reads: 2, transaction: 3, readOnlyTransaction: 3 })
  })

  it("completes a commit only after its sync, and starts no other statement meanwhile", async () => {
    const held = heldSyncs(freshFile())
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* table.pipe(Effect.fork)
        while (held.pending.length === 0) yield* Effect.sleep("1 millis")
        held.release()
        const committing = yield* Effect.fork(sql.withTransaction(sql`INSERT INTO t (b) VALUES ('durable')`))
        while (held.pending.length === 0) yield* Effect.sleep("1 millis")
        // the COMMIT ran and waits for its sync; a read must wait too (it would see the row)
        const reading = yield* Effect.fork(sql<{ b: string }>`SELECT b FROM t`)
        yield* Effect.sleep("20 millis")
        const before = { commit: committing.unsafePoll(), read: reading.unsafePoll() }
        held.release()
        const committed = yield* Fiber.await(committing)
        const read = yield* Fiber.join(reading)
        // a sync that fails fails the statement that waited for it
        const failing = yield* Effect.fork(Effect.flip(sql`INSERT INTO t (b) VALUES ('lost?')`))
        while (held.pending.length === 0) yield* Effect.sleep("1 millis")
        held.release(new Error("EIO: the disk went away"))
        const syncError = yield* Fiber.join(failing)
        return { before, committed, read, syncError }
      }),
      held.layer
    )
    expect(out.before).toEqual({ commit: null, read: null })
    expect(Exit.isSuccess(out.committed)).toBe(true)
    expect(out.read).toEqual([{ b: "durable" }])
    expect(out.syncError._tag).toBe("SqlError")
    expect(out.syncError.message).toBe("Failed to sync the write-ahead log")
    expect(String((out.syncError.cause as Error).message)).toContain("EIO")
  })

  it("never syncs an in-memory database", async () => {
    let syncs = 0
    const rows = await run(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.zipRight(
          Effect.zipRight(table, sql.withTransaction(sql`INSERT INTO t (b) VALUES ('m')`)),
          sql`SELECT b FROM t`
        )),
      Sqlite.layer({ filename: ":memory:", pragmas: [], syncFile: (_, done) => (syncs++, done(null)) }).pipe(Layer.orDie)
    )
    expect(rows).toEqual([{ b: "m" }])
    expect(syncs).toBe(0)
  })

  it("evicts prepared statements beyond its cache and still answers each one right", async () => {
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const answers: Array<unknown> = []
        for (let round = 0; round < 3; round++) {
          for (let k = 0; k < 5; k++) answers.push(...(yield* sql.unsafe(`SELECT ${k} AS k, ? AS p`, [round])))
        }
        return answers
      }),
      Sqlite.layer({ filename: freshFile(), pragmas: [], prepareCacheSize: 2 }).pipe(Layer.orDie)
    )
    expect(out).toEqual(Array.from({ length: 15 }, (_, i) => ({ k: i % 5, p: Math.floor(i / 5) })))
  })

  it("refuses a database it cannot open, as a failure of the layer", async () => {
    const exit = await Effect.runPromiseExit(
      Effect.scoped(Effect.provide(SqlClient.SqlClient, Sqlite.layer({ filename: join(dir, "missing", "dir", "x.db"), pragmas: [] })))
    )
    expect(Exit.isFailure(exit)).toBe(true)
    expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain("Failed to open")
  })
})
