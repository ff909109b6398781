/**
 * A request that fails because the database cannot be reached (refused, reset, timed out,
 * shutting down, SQLSTATE class 08), or whose conflicts (40001, 40P01) outlasted the
 * service's retries, answers 503 SERVICE_UNAVAILABLE with Retry-After, which clients retry;
 * any other database failure stays a 500 INTERNAL_ERROR.
 */
import { SqlError } from "@effect/sql"
import { Cause, Effect } from "effect"
import { describe, expect, it } from "vitest"
import { errorParts } from "../../src/Http/Envelope.js"
import { isDatabaseUnavailable } from "../../src/Platform/Sql.js"
import { failureError } from "../../src/Server/Edge.js"

const sqlError = (cause: unknown) => new SqlError.SqlError({ cause, message: "Failed to execute statement" })
const withCode = (message: string, code: string) => Object.assign(new Error(message), { code })

describe("a database that cannot be reached", () => {
  it("is a 503 with Retry-After, whether the handler failed or died with it", async () => {
    for (const cause of [withCode("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"), withCode("terminating connection due to administrator command", "57P01"), withCode("connection failure", "08006"), new Error("Connection terminated unexpectedly"), new Error("Client has encountered a connection error and is not queryable"), new Error("Client was closed and is not queryable")]) {
      for (const failed of [Cause.die(sqlError(cause)), Cause.fail(sqlError(cause))]) {
        const e = await Effect.runPromise(failureError(failed, []))
        expect(e._tag).toBe("ServiceUnavailable")
        const parts = errorParts(e)
        expect(parts.status).toBe(503)
        expect(parts.headers["retry-after"]).toBe("5")
        expect(parts.body.code).toBe("SERVICE_UNAVAILABLE")
      }
    }
  })

  it("a serialization failure or deadlock that outlasted its retries is a 503 with Retry-After", async () => {
    for (const code of ["40001", "40P01"]) {
      for (const failed of [Cause.die(sqlError(withCode("could not serialize access", code))), Cause.fail(sqlError(withCode("deadlock detected", code)))]) {
        const e = await Effect.runPromise(failureError(failed, []))
        expect(e._tag).toBe("ServiceUnavailable")
        expect(errorParts(e).headers["retry-after"]).toBe("5")
      }
    }
  })

  it("any other database failure is a 500", async () => {
    const unique = sqlError(withCode("duplicate key value violates unique constraint", "23505"))
    expect(isDatabaseUnavailable(unique)).toBe(false)
    expect((await Effect.runPromise(failureError(Cause.die(unique), [])))._tag).toBe("InternalError")
    expect(isDatabaseUnavailable(new Error("ECONNREFUSED"))).toBe(false)
  })
})
