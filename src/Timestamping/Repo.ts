/**
 * The tokens the time-stamping authority granted (table timestamp_tokens), by
 * serial. Inserts from concurrent requests are group-committed; a serial that
 * exists already is reported, never overwritten (the caller issues another).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Effect, Schema } from "effect"
import { HashHex } from "../Domain/HashHex.js"
import { makeBatcher } from "../Platform/Batcher.js"
import { column, DbBytes, decodeRows } from "../Platform/Rows.js"

export interface TimestampRow {
  readonly serial: string
  /** ISO 8601 UTC with milliseconds, as in the token. */
  readonly gen_time: string
  readonly policy: string
  /** sha256, sha384 or sha512. */
  readonly hash_algorithm: string
  /** Lowercase hex. */
  readonly hashed_message: string
  /** The TimeStampToken (ContentInfo DER). */
  readonly token: Uint8Array
  readonly token_sha256: string
  readonly token_attestation_id: string
  readonly imprint_attestation_id: string | null
}

const StoredToken = Schema.Struct({
  serial: Schema.String,
  genTime: column("gen_time", Schema.String),
  policy: Schema.String,
  hashAlgorithm: column("hash_algorithm", Schema.String),
  hashedMessage: column("hashed_message", Schema.String),
  token: DbBytes,
  tokenSha256: column("token_sha256", HashHex),
  tokenAttestationId: column("token_attestation_id", Schema.String),
  imprintAttestationId: column("imprint_attestation_id", Schema.NullOr(Schema.String))
})
export type StoredToken = typeof StoredToken.Type

const storedTokens = decodeRows(StoredToken)
const insertedSerials = decodeRows(Schema.Struct({ serial: Schema.String }))

export class TimestampRepo extends Effect.Service<TimestampRepo>()("Timestamping/TimestampRepo", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    /** One statement for a group; a duplicate serial (stored, or twice in the group) is left out and answered false. */
    const insertGroup = (rows: ReadonlyArray<TimestampRow>) =>
      Effect.map(
        insertedSerials(sql`INSERT INTO timestamp_tokens ${sql.insert(rows.map((r) => ({ ...r })))}
          ON CONFLICT (serial) DO NOTHING RETURNING serial`),
        (inserted) => {
          const taken = new Set(inserted.map((r) => r.serial))
          return rows.map((r) => taken.delete(r.serial))
        }
      )

    const submit = yield* makeBatcher<TimestampRow, boolean, SqlError.SqlError>({
      process: insertGroup,
      maxBatch: 64,
      workers: isPg ? 2 : 1
    })

    return {
      /** Stores a granted token; false when its serial is taken. */
      insert: (row: TimestampRow) => Effect.orDie(submit(row)),
      bySerial: (serial: string): Effect.Effect<StoredToken | undefined> =>
        Effect.map(
          storedTokens(sql`SELECT serial, gen_time, policy, hash_algorithm, hashed_message, token, token_sha256,
            token_attestation_id, imprint_attestation_id FROM timestamp_tokens WHERE serial = ${serial}`).pipe(Effect.orDie),
          (rows) => rows[0]
        )
    }
  })
}) {}
