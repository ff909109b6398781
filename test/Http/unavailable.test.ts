/**
 * A request that fails because the database cannot be reached (refused, reset, timed out,
 * shutting down, SQLSTATE class 08, a connection lost inside a transaction), or whose conflicts (40001, 40P01) outlasted the
 * service's retries, answers 503 SERVICE_UNAVAILABLE with Retry-After, which clients retry;
 * any other database failure stays a 500 INTERNAL_ERROR.
 */
import { SqlClient, SqlError } from "@effect/sql"
import { Cause, Effect, Exit } from "effect"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { errorParts } from "../../src/Http/Envelope.js"
import { isDatabaseUnavailable, layerFromUrl } from "../../src/Platform/Sql.js"
import { failureError } from "../../src/Server/Edge.js"
import { createPgDatabase, dialects, PG_ADMIN_URL } from "../helpers/databases.js"

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

describe.skipIf(!(await dialects()).includes("pg"))("a Postgres connection lost between two statements of a transaction", () => {
  it("fails the transaction with an error that answers 503 (the client is no longer queryable, and says so without a code)", async () => {
    const db = await createPgDatabase()
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL })
    await admin.connect()
    try {
      const exit = await Effect.runPromiseExit(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          return yield* sql.withTransaction(Effect.gen(function*() {
            const [row] = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
            // as when the server stops (or a pooler drops the connection) while a group's transaction is open
            yield* Effect.promise(() => admin.query("SELECT pg_terminate_backend($1)", [row!.pid]))
            yield* Effect.promise(() => new Promise((r) => setTimeout(r, 200)))
            return yield* sql`SELECT 1`
          }))
        }).pipe(Effect.provide(layerFromUrl(db.url, { maxConnections: 2 })))
      )
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isSuccess(exit)) return
      const reasons = [...Cause.failures(exit.cause), ...Cause.defects(exit.cause)].map((e) => String(e instanceof SqlError.SqlError ? e.cause : e))
      expect(reasons.join("\n")).toMatch(/not queryable|terminat/i)
      expect((await Effect.runPromise(failureError(exit.cause, [])))._tag).toBe("ServiceUnavailable")
    } finally {
      await admin.end()
      await db.drop()
    }
  })
})

