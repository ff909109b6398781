/**
 * The SQL of listing a key's own attestations (the same on SQLite and Postgres): its live
 * claims joined to their attestations, newest first by (registered_at, seq). The wire
 * format of registered_at has a fixed width and a literal +00:00, so comparing the text
 * compares the instants; seq breaks ties, so the keyset (registered_at, seq) is total and
 * a page never repeats or skips a row, whatever is attested meanwhile.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { HashHex } from "../Domain/HashHex.js"
import { DbInt, orDieOnMismatch } from "../Platform/Rows.js"
import { Level } from "./Domain.js"

/** The last row of a page: the next page starts after it. */
export interface ListPosition {
  readonly registeredAt: string
  readonly seq: number
}

export interface ListQuery {
  readonly apiKeyId: string
  readonly limit: number
  readonly after: ListPosition | undefined
  readonly level: Level | undefined
  /** Inclusive, wire format. */
  readonly from: string | undefined
  /** Exclusive, wire format. */
  readonly to: string | undefined
}

const ListRow = Schema.Struct({
  seq: DbInt,
  id: Schema.String,
  hash_hex: HashHex,
  level: Level,
  registered_at: Schema.String,
  source: Schema.NullOr(Schema.String)
})
export type ListRow = typeof ListRow.Type

export class ListRepo extends Effect.Service<ListRepo>()("Attestations/ListRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Up to `limit + 1` rows: one more than a page tells whether another page follows. */
    const page = flow(
      SqlSchema.findAll({
        Request: Schema.Any as Schema.Schema<ListQuery>,
        Result: ListRow,
        execute: (q: ListQuery) => {
          // The level comes from the view per row, so the join the planners order is claims and
          // the registry alone: joined with the view's seal and anchor tables as well, SQLite
          // sorted a key's every claim instead of walking the registry's time index (6 s at 10M).
          const level = sql`(SELECT v.level FROM attestations v WHERE v.seq = r.seq)`
          const where = [sql`c.api_key_id = ${q.apiKeyId}`, sql`c.deleted_at IS NULL`]
          if (q.level !== undefined) where.push(sql`${level} = ${q.level}`)
          if (q.from !== undefined) where.push(sql`r.registered_at >= ${q.from}`)
          if (q.to !== undefined) where.push(sql`r.registered_at < ${q.to}`)
          if (q.after !== undefined) {
            where.push(sql`(r.registered_at < ${q.after.registeredAt} OR (r.registered_at = ${q.after.registeredAt} AND r.seq < ${q.after.seq}))`)
          }
          return sql`
            SELECT r.seq, r.id, r.hash_hex, ${level} AS level, r.registered_at, c.source
            FROM claims c JOIN registry r ON r.seq = c.attestation_seq
            WHERE ${sql.and(where)}
            ORDER BY r.registered_at DESC, r.seq DESC
            LIMIT ${q.limit + 1}`
        }
      }),
      orDieOnMismatch
    )

    return { page } as const
  })
}) {}
