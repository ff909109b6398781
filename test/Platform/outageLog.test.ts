/**
 * The outage log of a background loop (src/Platform/Outage.ts): a database out of reach and
 * conflicts that outlasted their retries both pause the loop, each named for what it is,
 * once; the next success says "resumed"; any other failure passes on untouched.
 */
import { SqlError } from "@effect/sql"
import { Effect, Logger, Option } from "effect"
import { describe, expect, it } from "vitest"
import { makeOutageLog } from "../../src/Platform/Outage.js"

const sqlError = (message: string, code: string) =>
  new SqlError.SqlError({ cause: Object.assign(new Error(message), { code }), message: "Failed to execute statement" })

/** Runs `program` with its log lines collected. */
const logged = <A>(program: Effect.Effect<A, unknown>) => {
  const lines: Array<string> = []
  const collect = Logger.make(({ message }) => {
    lines.push(Array.isArray(message) ? message.map(String).join(" ") : String(message))
  })
  return Effect.runPromise(program.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, collect)))).then((a) => ({ a, lines }))
}

describe("the outage log of a background loop", () => {
  it("names a conflict that outlasted its retries apart from an unreachable database, once each, and says when it resumed", async () => {
    const { a, lines } = await logged(Effect.gen(function*() {
      const log = yield* makeOutageLog("sealing")
      const conflict = Effect.die(sqlError("could not serialize access due to read/write dependencies", "40001"))
      const outage = Effect.fail(sqlError("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"))
      const first = yield* log.attempt(conflict)
      yield* log.attempt(conflict)
      yield* log.attempt(Effect.succeed(1))
      yield* log.attempt(outage)
      yield* log.attempt(outage)
      const last = yield* log.attempt(Effect.succeed(2))
      return [first, last]
    }))
    expect(a).toEqual([Option.none(), Option.some(2)])
    expect(lines.map((l) => l.replace(/\(.*\)/, "(…)").replace(/\d+ ms/, "N ms"))).toEqual([
      "sealing paused: its transactions kept conflicting past their retries (…); it resumes by itself when the database answers",
      "sealing resumed after N ms",
      "sealing paused: the database is unavailable (…); it resumes by itself when the database answers",
      "sealing resumed after N ms"
    ])
  })

  it("passes any other failure on, unlogged", async () => {
    const unique = sqlError("duplicate key value violates unique constraint", "23505")
    const { a, lines } = await logged(Effect.gen(function*() {
      const log = yield* makeOutageLog("sealing")
      return yield* Effect.flip(log.attempt(Effect.fail(unique)))
    }))
    expect(a).toBe(unique)
    expect(lines).toEqual([])
  })
})
