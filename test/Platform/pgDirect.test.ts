/**
 * PgDirect: programs run with callbacks on one client of Postgres's pool. A statement
 * with parameters is prepared by name, one name per text for the whole pool, up to a
 * cap; the rest run unnamed. A program's failure ends its client's connection.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, ManagedRuntime } from "effect"
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
