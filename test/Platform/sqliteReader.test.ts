/**
 * SQLite's read-only connection (src/Platform/SqliteReader.ts), which the fast
 * lane's verify reads without a fiber: it sees committed rows and never a
 * transaction in progress on the service's own connection, answers UNDECIDED
 * instead of waiting while the file is locked, and exists only for a file.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { createRequire } from "node:module"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { UNDECIDED } from "../../src/Domain/Undecided.js"
import { layerFromUrl } from "../../src/Platform/Sql.js"
import { readerOn, SqliteReader } from "../../src/Platform/SqliteReader.js"

const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string, options?: object) => {
  exec: (sql: string) => void
  close: () => void
}

const dir = mkdtempSync(join(tmpdir(), "attestd-reader-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const withReader = <A>(url: string, program: Effect.Effect<A, unknown, SqlClient.SqlClient | SqliteReader>) =>
  Effect.runPromise(Effect.scoped(Effect.provide(program, SqliteReader.layer.pipe(Layer.provideMerge(layerFromUrl(url))))))

/** What a call threw, as text, or "done". */
const attempt = (f: () => unknown): string => {
  try {
    f()
    return "done"
  } catch (e) {
    return String(e)
  }
}

describe("SqliteReader", () => {
  it("reads committed rows, never those of a transaction still open on the service's connection", async () => {
    const seen = await withReader(`sqlite:${join(dir, "committed.db")}`, Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const reader = (yield* SqliteReader)!
      yield* sql`CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`
      yield* sql`INSERT INTO t (k, v) VALUES ('a', 1)`
      const before = reader.first("SELECT v FROM t WHERE k = ?", "b")
      const during = yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t (k, v) VALUES ('b', 2)`
        yield* sql`UPDATE t SET v = 10 WHERE k = 'a'`
        // the transaction is open on the service's connection: the reader sees the last commit
        return [reader.first("SELECT v FROM t WHERE k = ?", "a"), reader.first("SELECT v FROM t WHERE k = ?", "b")]
      }))
      const after = [reader.first("SELECT v FROM t WHERE k = ?", "a"), reader.first("SELECT v FROM t WHERE k = ?", "b")]
      // read-only, and a busy file answers at once (UNDECIDED, below) instead of blocking the event loop
      const settings = [
        attempt(() => reader.first("INSERT INTO t (k, v) VALUES ('c', 3) RETURNING v")),
        reader.first("PRAGMA busy_timeout")
      ]
      return { before, during, after, settings }
    }))
    expect(seen).toEqual({
      before: undefined,
      during: [{ v: 1 }, undefined],
      after: [{ v: 10 }, { v: 2 }],
      settings: [expect.stringMatching(/readonly database/), { timeout: 0 }]
    })
  })

  it("answers UNDECIDED at once, without waiting, while another connection holds the file exclusively, and reads again after", () => {
    // A rollback-journal file: there an exclusive transaction keeps readers out (in WAL mode
    // nothing the service does locks a reader out; this is the driver's own SQLITE_BUSY).
    const file = join(dir, "locked.db")
    const writer = new Database(file)
    writer.exec("CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t (k) VALUES ('a')")
    const reader = readerOn(new Database(file, { readonly: true, timeout: 0 }) as never)
    expect(reader.first("SELECT k FROM t WHERE k = ?", "a")).toEqual({ k: "a" })
    writer.exec("BEGIN EXCLUSIVE; INSERT INTO t (k) VALUES ('b')")
    expect(reader.first("SELECT k FROM t WHERE k = ?", "a")).toBe(UNDECIDED)
    writer.exec("COMMIT")
    expect(reader.first("SELECT k FROM t WHERE k = ?", "b")).toEqual({ k: "b" })
    writer.close()
  })

  it("throws what is not a lock (a missing table), and is absent for an in-memory database", async () => {
    await withReader(`sqlite:${join(dir, "errors.db")}`, Effect.gen(function*() {
      const reader = (yield* SqliteReader)!
      expect(() => reader.first("SELECT k FROM missing WHERE k = ?", "a")).toThrow(/no such table/)
    }))
    expect(await withReader("sqlite:", SqliteReader)).toBeUndefined()
  })
})
