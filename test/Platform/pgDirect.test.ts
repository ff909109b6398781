/**
 * PgDirect: programs run with callbacks on one client of Postgres's pool. A statement
 * with parameters is prepared by name, one name per text for the whole pool, up to a
 * cap; the rest run unnamed. A program's failure ends its client's connection.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, ManagedRuntime } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as PgDirect from "../../src/Platform/PgDirect.js"
import type { Program } from "../../src/Platform/Steps.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"

const available = await postgresAvailable()

describe.skipIf(!available)("PgDirect", () => {
  let db: TestDatabase
  let rt: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient | PgDirect.PgDirect, never>
  beforeAll(async () => {
    db = await createPgDatabase()
    rt = ManagedRuntime.make(PgDirect.layer(db.url, 2).pipe(Layer.orDie))
  })
  afterAll(async () => {
    await rt?.dispose()
    await db?.drop()
  })

  const runThen = async <A>(body: (run: PgDirect.RunThen, sql: SqlClient.SqlClient) => Program<A>) => {
    const [direct, sql] = await rt.runPromise(Effect.all([PgDirect.PgDirect, SqlClient.SqlClient]))
    return new Promise<Either.Either<A, unknown>>((resolve) => direct!.runThen((run) => body(run, sql), resolve))
  }
  /** The statements prepared on the program's own connection. */
  function* prepared(run: PgDirect.RunThen, sql: SqlClient.SqlClient): Program<Array<{ name: string; statement: string }>> {
    const rows = yield* run.statementRows(sql`SELECT name, statement FROM pg_prepared_statements ORDER BY prepare_time`)
    return rows.map((r) => ({ name: String(r.name), statement: String(r.statement) }))
  }

  it("prepares a statement with parameters once per connection, by one name per text; one without parameters is not prepared", async () => {
    const outcome = await runThen(function*(run, sql) {
      const before = (yield* prepared(run, sql)).length
      const sums: Array<unknown> = []
      for (const n of [1, 2, 3]) sums.push((yield* run.statementRows(sql`SELECT ${n}::int + 1 AS v`))[0]!.v)
      yield* run.statementRows(sql`SELECT 41 + 1 AS v`)
      const after = yield* prepared(run, sql)
      return { sums, added: after.slice(before) }
    })
    expect(Either.isRight(outcome)).toBe(true)
    const { added, sums } = Either.getOrThrow(outcome)
    expect(sums).toEqual([2, 3, 4])
    // the one text with a parameter, once; the statement without one is not there
    expect(added).toEqual([{ name: expect.stringMatching(/^attestd_\d+$/), statement: "SELECT $1::int + 1 AS v" }])
  })

  it("past its cap, a text runs unnamed: every answer right, no more than the cap prepared", async () => {
    const outcome = await runThen(function*(run, sql) {
      const answers: Array<unknown> = []
      for (let i = 0; i < 80; i++) answers.push((yield* run.statementRows(sql`SELECT ${i}::int AS ${sql.literal(`v${i}`)}`))[0]![`v${i}`])
      return { answers, names: (yield* prepared(run, sql)).map((p) => p.name) }
    })
    const { answers, names } = Either.getOrThrow(outcome)
    expect(answers).toEqual(Array.from({ length: 80 }, (_, i) => i))
    expect(new Set(names).size).toBe(names.length)
    // 64 names for the pool, all but the first test's on this connection (the pool hands out its idle client)
    expect(names.length).toBeGreaterThanOrEqual(63)
    expect(names.length).toBeLessThanOrEqual(64)
  })

  it("a prepared SELECT * whose table another session alters fails on its connection, which is replaced", async () => {
    // a pool of one connection, so the reads share it until it is replaced
    const one = ManagedRuntime.make(PgDirect.layer(db.url, 1).pipe(Layer.orDie))
    const other = new pg.Client({ connectionString: db.url })
    await other.connect()
    try {
      await other.query("CREATE TABLE altered (id int PRIMARY KEY, a text); INSERT INTO altered VALUES (1, 'x')")
      const [direct, sql] = await one.runPromise(Effect.all([PgDirect.PgDirect, SqlClient.SqlClient]))
      const read = () =>
        new Promise<Either.Either<{ pid: unknown; columns: Array<string> }, unknown>>((resolve) =>
          direct!.runThen(function*(run) {
            const pid = (yield* run.statementRows(sql`SELECT pg_backend_pid() AS pid`))[0]!.pid
            const rows = yield* run.statementRows(sql`SELECT * FROM altered WHERE id = ${1}`)
            return { pid, columns: Object.keys(rows[0]!) }
          }, resolve)
        )
      const first = Either.getOrThrow(await read())
      expect(first.columns).toEqual(["id", "a"])
      expect(Either.getOrThrow(await read()).pid).toBe(first.pid) // the same connection, its statement prepared
      await other.query("ALTER TABLE altered ADD COLUMN b text")
      const failed = await read()
      expect(Either.isLeft(failed) && String(failed.left)).toMatch(/cached plan must not change result type/)
      const next = Either.getOrThrow(await read())
      expect(next.columns).toEqual(["id", "a", "b"])
      expect(next.pid).not.toBe(first.pid)
    } finally {
      await other.query("DROP TABLE IF EXISTS altered")
      await other.end()
      await one.dispose()
    }
  })

  it("a failed statement fails the program, which the caller sees, and the pool still serves", async () => {
    const failed = await runThen(function*(run, sql) {
      yield* run.transaction(function*() {
        yield* run.statementRows(sql`SELECT 1 / ${0}::int AS v`)
      })
      return "not reached"
    })
    expect(Either.isLeft(failed) && String(failed.left)).toMatch(/division by zero/)
    const next = await runThen(function*(run, sql) {
      return (yield* run.statementRows(sql`SELECT ${7}::int AS v`))[0]!.v
    })
    expect(next).toEqual(Either.right(7))
  })
})
