/** A key's own claim on an attestation: read, conditional update, soft delete. */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Schema } from "effect"
import { type Claim, ClaimRow } from "../Attestations/Domain.js"
import { newEtag } from "../Attestations/Repo.js"
import { DbInt, decodeRows, orUndefined } from "../Platform/Rows.js"
import { retryingConflicts } from "../Platform/Sql.js"

const IdRow = Schema.Struct({ id: DbInt })
const ClaimKey = Schema.Struct({ apiKeyId: Schema.String, seq: Schema.Number })

export interface ClaimPatch {
  readonly source?: string | null
  readonly extraData?: unknown
  readonly clientEncrypted?: boolean
}

export type UpdateResult =
  | { readonly _tag: "Updated"; readonly claim: Claim }
  | { readonly _tag: "NoClaim" }
  | { readonly _tag: "EtagMismatch"; readonly current: string }

export class ClaimRepo extends Effect.Service<ClaimRepo>()("Claims/ClaimRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const findLive = SqlSchema.findOne({
      Request: ClaimKey,
      Result: ClaimRow,
      execute: ({ apiKeyId, seq }) =>
        sql`SELECT * FROM claims WHERE api_key_id = ${apiKeyId} AND attestation_seq = ${seq} AND deleted_at IS NULL`
    })
    const liveClaim = (apiKeyId: string, seq: number): Effect.Effect<Claim | undefined, SqlError> =>
      orUndefined(findLive({ apiKeyId, seq }))

    /** Applies `patch` only if the stored etag is one of `ifMatch` (when given); a new etag every time. */
    const update = (apiKeyId: string, seq: number, patch: ClaimPatch, ifMatch: ReadonlyArray<string> | undefined, now: string) =>
      Effect.gen(function*(): Effect.fn.Return<UpdateResult, SqlError> {
        const etag = newEtag()
        const sets = [sql`etag = ${etag}`, sql`updated_at = ${now}`]
        if (patch.source !== undefined) sets.push(sql`source = ${patch.source}`)
        if (patch.extraData !== undefined) {
          sets.push(sql`extra_data = ${patch.extraData === null ? null : JSON.stringify(patch.extraData)}`)
        }
        if (patch.clientEncrypted !== undefined) {
          sets.push(sql`client_encrypted = ${isPg ? patch.clientEncrypted : patch.clientEncrypted ? 1 : 0}`)
        }
        const guard = ifMatch === undefined || ifMatch.includes("*") ? sql`1 = 1` : sql.in("etag", ifMatch)
        const [updated] = yield* decodeRows(ClaimRow)(sql`UPDATE claims SET ${sql.csv(sets)}
          WHERE api_key_id = ${apiKeyId} AND attestation_seq = ${seq} AND deleted_at IS NULL AND ${guard}
          RETURNING *`)
        if (updated) return { _tag: "Updated", claim: updated }
        const current = yield* liveClaim(apiKeyId, seq)
        return current ? { _tag: "EtagMismatch", current: current.etag } : { _tag: "NoClaim" }
      })

    /** Soft-deletes the key's claim and drops its tags, atomically. */
    const softDelete = (apiKeyId: string, seq: number, now: string) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const [deleted] = yield* decodeRows(IdRow)(sql`UPDATE claims SET deleted_at = ${now}
          WHERE api_key_id = ${apiKeyId} AND attestation_seq = ${seq} AND deleted_at IS NULL RETURNING id`)
        if (!deleted) return false
        yield* sql`DELETE FROM tags WHERE claim_id = ${deleted.id}`
        return true
      })))

    return { liveClaim, update, softDelete }
  })
}) {}
