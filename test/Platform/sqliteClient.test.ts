/**
 * attestd's SQLite client (src/Platform/SqliteClient.ts): @effect/sql's SqlClient
 * over one better-sqlite3 connection, and SqliteNow, the same connection for work
 * run now. Most of the suite runs on it; these tests hold what it owns itself.
 */
import { SqlClient, SqlError } from "@effect/sql"
import { Deferred, Effect, Either, Exit, Fiber, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { UNDECIDED } from "../../src/Domain/Undecided.js"
import * as SqliteClient from "../../src/Platform/SqliteClient.js"

let dir: string
let rt: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient | SqliteClient.SqliteNow, never>
const run = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient | SqliteClient.SqliteNow>) => rt.runPromise(effect)
const now = () => run(SqliteClient.SqliteNow).then((n) => n!)

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "attestd-sqlite-client-"))
  rt = ManagedRuntime.make(SqliteClient.layer(join(dir, "t.db")).pipe(Layer.orDie))
  await run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE t (n INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE)`))
})
afterAll(async () => {
  await rt?.dispose()
  rmSync(dir, { recursive: true, force: true })
})

const count = Effect.flatMap(SqlClient.SqlClient, (sql) => Effect.map(sql<{ c: number }>`SELECT COUNT(*) AS c FROM t`, ([r]) => r!.c))

describe("SqliteClient", () => {
  it("fails with a SqlError, not a defect, for a statement SQLite refuses or a constraint it breaks", async () => {
    const [bad, duplicate] = await run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO t (s) VALUES ('once')`
      return [yield* Effect.either(sql`SELECT nope FROM t`), yield* Effect.either(sql`INSERT INTO t (s) VALUES ('once')`)]
    }))
    expect(Either.isLeft(bad) && bad.left instanceof SqlError.SqlError).toBe(true)
    expect(Either.isLeft(duplicate) && duplicate.left instanceof SqlError.SqlError).toBe(true)
  })

  it("rolls a failed fiber transaction back; SafeIntegers reads integers as bigint; values come as arrays", async () => {
    const before = await run(count)
    const exit = await rt.runPromiseExit(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.withTransaction(Effect.zipRight(sql`INSERT INTO t (s) VALUES ('rolled back')`, Effect.fail("no")))))
    expect(Exit.isFailure(exit)).toBe(true)
    expect(await run(count)).toBe(before)

    const [safe, values] = await run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const safe = yield* sql<{ c: bigint }>`SELECT COUNT(*) AS c FROM t`.pipe(Effect.provideService(SqlClient.SafeIntegers, true))
      return [safe[0]!.c, yield* sql`SELECT 1 AS a, 'b' AS b`.values] as const
    }))
    expect(safe).toBe(BigInt(before))
    expect(values).toEqual([[1, "b"]])
    // the same (cached) statement, without the flag, reads a number again
    expect(await run(count)).toBe(before)
  })

  it("keeps working past its 200 prepared statements (the least recently used are dropped and prepared again)", async () => {
    const answers = await run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.forEach([...Array.from({ length: 250 }, (_, i) => i), 0, 1], (i) =>
        Effect.map(sql.unsafe<{ v: number }>(`SELECT ${i} AS v`), ([r]) => r!.v))))
    expect(answers).toEqual([...Array.from({ length: 250 }, (_, i) => i), 0, 1])
  })

  it("runNow: a transaction commits, a throw rolls it back, and while a fiber's transaction is open it answers UNDECIDED", async () => {
    const sqlite = await now()
    const before = await run(count)
    sqlite.runNow((db) => db.transaction(() => db.statementRows(rt.runSync(Effect.map(SqlClient.SqlClient, (sql) => sql`INSERT INTO t (s) VALUES ('now')`)))))
    expect(await run(count)).toBe(before + 1)
    expect(() =>
      sqlite.runNow((db) =>
        db.transaction(() => {
          db.statementRows(rt.runSync(Effect.map(SqlClient.SqlClient, (sql) => sql`INSERT INTO t (s) VALUES ('thrown')`)))
          throw new Error("after the insert")
        }))
    ).toThrow("after the insert")
    expect(await run(count)).toBe(before + 1)

    await run(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const inside = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t (s) VALUES ('held')`
        yield* Deferred.succeed(inside, undefined)
        yield* Deferred.await(release)
      })))
      yield* Deferred.await(inside)
      let ran = false
      expect(sqlite.runNow(() => (ran = true))).toBe(UNDECIDED)
      expect(ran).toBe(false)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      expect(sqlite.runNow(() => "ran")).toBe("ran")
    }))
    expect(await run(count)).toBe(before + 2)
  })
})
