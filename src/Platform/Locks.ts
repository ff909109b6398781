/**
 * Cluster-wide mutual exclusion for background jobs (sealer, anchorer, webhook fan-out):
 * on Postgres a session advisory lock on a reserved connection; SQLite has one writer
 * process, so the job just runs.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { decodeRows } from "./Rows.js"

const decodeLocked = decodeRows(Schema.Struct({ locked: Schema.Boolean }))

/** Runs `effect` only if this instance holds the named Postgres session lock; SQLite runs it directly. */
export const exclusively = <A, E, R>(lockId: number, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    if (!isPg) return Option.some(yield* effect)
    return yield* Effect.scoped(Effect.gen(function*() {
      const conn = yield* Effect.orDie(sql.reserve)
      const [row] = yield* decodeLocked(conn.execute(`SELECT pg_try_advisory_lock(${lockId}) AS locked`, [], undefined)).pipe(Effect.orDie)
      if (row?.locked !== true) return Option.none<A>()
      yield* Effect.addFinalizer(() => Effect.ignore(conn.executeRaw(`SELECT pg_advisory_unlock(${lockId})`, [])))
      return Option.some(yield* effect)
    }))
  })
