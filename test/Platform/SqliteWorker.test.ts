/**
 * The SQLite client whose connection lives in a worker thread (src/Platform/SqliteWorker.ts):
 * the statements, results, errors and transactions of `@effect/sql-sqlite-node`'s
 * client, the service's pragmas on the connection, and the event loop left free
 * while a statement runs.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Exit, Fiber, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { currentSqliteFile, layerFromUrl } from "../../src/Platform/Sql.js"
import * as SqliteWorker from "../../src/Platform/SqliteWorker.js"
import { withDb } from "../helpers/process.js"

const dir = mkdtempSync(join(tmpdir(), "attestd-sqlite-worker-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0
const freshFile = () => join(dir, `db-${++n}.db`)

const run = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>, layer: Layer.Layer<SqlClient.SqlClient> = layerFromUrl(`sqlite:${freshFile()}`)) =>
  Effect.runPromise(Effect.scoped(Effect.provide(effect, layer)))

const table = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT NOT NULL, c BLOB)`)

describe("the SQLite worker client", () => {
  it("runs statements in the thread: rows, values, run info, blobs, and the service's pragmas", async () => {
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
          pragmas: yield* sql<{ v: unknown }>`SELECT (SELECT synchronous FROM pragma_synchronous) AS s, (SELECT foreign_keys FROM pragma_foreign_keys) AS f, (SELECT journal_mode FROM pragma_journal_mode) AS j, (SELECT timeout FROM pragma_busy_timeout) AS t`,
          file: yield* currentSqliteFile
        }
      }),
      layerFromUrl(`sqlite:${file}`)
    )
    expect(out.rows).toEqual([{ a: 1, b: "x", c: new Uint8Array([1, 2, 255]) }, { a: 2, b: "y", c: null }])
    expect(out.rows[0]!.c).toBeInstanceOf(Uint8Array)
    expect(out.values).toEqual([[1, "x"], [2, "y"]])
    expect(out.info).toEqual({ changes: 1, lastInsertRowid: 2 })
    expect(out.returning).toEqual([{ a: 3, b: "z" }, { a: 4, b: "w" }])
    // synchronous 2 = FULL: an acknowledged write survives power loss
    expect(out.pragmas).toEqual([{ s: 2, f: 1, j: "wal", t: 10000 }])
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
    expect(String((out.duplicate.cause as Error).message)).toContain("UNIQUE constraint failed")
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
        const fiber = yield* Effect.fork(sql.withTransaction(Effect.zipRight(sql`INSERT INTO t (b) VALUES ('interrupted')`, Effect.never)))
        while ((yield* sql`SELECT 1 AS x`.pipe(Effect.timeout("20 millis"), Effect.option))._tag === "Some") yield* Effect.sleep("5 millis")
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
        return {
          failed,
          rows: yield* sql`SELECT b FROM t`,
          counter: yield* sql`SELECT n FROM counter`
        }
      })
    )
    expect(Exit.isFailure(out.failed)).toBe(true)
    expect(out.rows).toEqual([{ b: "kept" }])
    expect(out.counter).toEqual([{ n: 40 }])
  })

  it("leaves the event loop free while a statement runs", async () => {
    let turns = 0
    const ticking = setInterval(() => turns++, 0)
    try {
      const out = await run(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const before = turns
          // a few hundred milliseconds of work for SQLite, in its thread
          const [row] = yield* sql<{ n: number }>`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000000) SELECT count(*) AS n FROM c`
          return { n: row!.n, turns: turns - before }
        })
      )
      expect(out.n).toBe(3_000_000)
      // the loop ran timers while SQLite counted (on the loop itself it could not have)
      expect(out.turns).toBeGreaterThan(0)
    } finally {
      clearInterval(ticking)
    }
  })

  it("evicts prepared statements beyond its cache and still answers each one right", async () => {
    const file = freshFile()
    const out = await run(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const answers: Array<unknown> = []
        for (let round = 0; round < 3; round++) {
          for (let k = 0; k < 5; k++) answers.push(...(yield* sql.unsafe(`SELECT ${k} AS k, ? AS p`, [round])))
        }
        return answers
      }),
      SqliteWorker.layer({ filename: file, pragmas: [], prepareCacheSize: 2 }).pipe(Layer.orDie)
    )
    expect(out).toEqual(Array.from({ length: 15 }, (_, i) => ({ k: i % 5, p: Math.floor(i / 5) })))
  })

  it("refuses a database it cannot open, as a failure of the layer", async () => {
    const exit = await Effect.runPromiseExit(
      Effect.scoped(Effect.provide(SqlClient.SqlClient, SqliteWorker.layer({ filename: join(dir, "missing", "dir", "x.db"), pragmas: [] })))
    )
    expect(Exit.isFailure(exit)).toBe(true)
    expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain("SqlError")
  })
})
