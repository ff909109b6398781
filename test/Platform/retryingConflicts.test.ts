/**
 * A transaction Postgres rolled back for a serialization failure (40001) or a
 * deadlock (40P01) runs again, a bounded number of times, also when the conflict
 * comes at COMMIT (@effect/sql turns a failed COMMIT into a defect); any other
 * failure is returned at once; inside an outer transaction it runs once (only the
 * outermost transaction can run again).
 */
import { SqlClient, SqlError } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { isRetryableConflict, retryingConflicts } from "../../src/Platform/Sql.js"

const failing = (codes: ReadonlyArray<string>, how: "fail" | "die" = "fail") => {
  let calls = 0
  const transaction = Effect.suspend(() => {
    const code = codes[calls++]
    if (code === undefined) return Effect.succeed(calls)
    const error = new SqlError.SqlError({ cause: { code }, message: "failed" })
    return how === "fail" ? Effect.fail(error) : Effect.die(error)
  })
  return { transaction, calls: () => calls }
}

describe("retryingConflicts", () => {
  it("runs a transaction again after serialization failures and deadlocks", async () => {
    const t = failing(["40001", "40P01", "40001"])
    expect(await Effect.runPromise(retryingConflicts(t.transaction))).toBe(4)
    expect(t.calls()).toBe(4)
  })

  it("gives up after 5 retries, with the conflict", async () => {
    const t = failing(Array(10).fill("40P01"))
    const exit = await Effect.runPromiseExit(retryingConflicts(t.transaction))
    expect(Exit.isFailure(exit)).toBe(true)
    expect(t.calls()).toBe(6)
  })

  it("returns any other failure at once", async () => {
    const t = failing(["23505"])
    const exit = await Effect.runPromiseExit(retryingConflicts(t.transaction))
    expect(Exit.isFailure(exit)).toBe(true)
    expect(t.calls()).toBe(1)
    expect(isRetryableConflict(new SqlError.SqlError({ cause: new Error("connection refused") }))).toBe(false)
  })

  it("runs it again when the conflict comes at COMMIT (a defect)", async () => {
    const t = failing(["40001", "40001"], "die")
    expect(await Effect.runPromise(retryingConflicts(t.transaction))).toBe(3)
  })

  it("runs once inside an outer transaction, leaving the retry to the outermost", async () => {
    const t = failing(["40001"])
    const inside = retryingConflicts(t.transaction).pipe(
      Effect.provideService(SqlClient.TransactionConnection, [{} as Connection, 0] as const)
    )
    const exit = await Effect.runPromiseExit(inside)
    expect(Exit.isFailure(exit)).toBe(true)
    expect(t.calls()).toBe(1)
  })
})
