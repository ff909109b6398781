/** Share tokens, a read-only credential (stored only as SHA-256), and their access log. The ShareTokens feature manages them; Auth resolves them. */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { column, DbInt, orDieOnMismatch, orUndefined } from "../Platform/Rows.js"

/** A `share_tokens` row; attestation_ids is stored as a JSON array of canonical ids. */
export const ShareTokenRow = Schema.Struct({
  id: Schema.String,
  tokenHash: column("token_hash", Schema.String),
  apiKeyId: column("api_key_id", Schema.String),
  attestationIds: column("attestation_ids", Schema.parseJson(Schema.Array(Schema.String))),
  recipientLabel: column("recipient_label", Schema.NullOr(Schema.String)),
  expiresAt: column("expires_at", Schema.String),
  maxUses: column("max_uses", Schema.NullOr(DbInt)),
  uses: DbInt,
  createdAt: column("created_at", Schema.String),
  revokedAt: column("revoked_at", Schema.NullOr(Schema.String))
})
export interface ShareToken extends Schema.Schema.Type<typeof ShareTokenRow> {}

const AccessEntry = Schema.Struct({ at: Schema.String, client_ip: Schema.String, attestation_id: Schema.String, path: Schema.String })
export interface AccessEntry extends Schema.Schema.Type<typeof AccessEntry> {}

export const shareTokenState = (t: ShareToken, now: string): "active" | "expired" | "revoked" | "exhausted" =>
  t.revokedAt !== null
    ? "revoked"
    : t.expiresAt <= now
    ? "expired"
    : t.maxUses !== null && t.uses >= t.maxUses
    ? "exhausted"
    : "active"

export class ShareTokenRepo extends Effect.Service<ShareTokenRepo>()("Auth/ShareTokenRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (t: Omit<ShareToken, "uses" | "revokedAt">) =>
      sql`INSERT INTO share_tokens (id, token_hash, api_key_id, attestation_ids, recipient_label, expires_at, max_uses, created_at)
        VALUES (${t.id}, ${t.tokenHash}, ${t.apiKeyId}, ${JSON.stringify(t.attestationIds)}, ${t.recipientLabel},
          ${t.expiresAt}, ${t.maxUses}, ${t.createdAt})`

    /** A token whose creating key is revoked is no token at all. */
    const findByHash = flow(
      SqlSchema.findOne({
        Request: Schema.String,
        Result: ShareTokenRow,
        execute: (hash) =>
          sql`SELECT s.* FROM share_tokens s JOIN api_keys k ON k.id = s.api_key_id
            WHERE s.token_hash = ${hash} AND k.revoked_at IS NULL`
      }),
      orUndefined
    )

    const findOwnedRow = SqlSchema.findOne({
      Request: Schema.Struct({ apiKeyId: Schema.String, id: Schema.String }),
      Result: ShareTokenRow,
      execute: ({ apiKeyId, id }) => sql`SELECT * FROM share_tokens WHERE id = ${id} AND api_key_id = ${apiKeyId}`
    })
    const findOwned = (apiKeyId: string, id: string) =>
      orUndefined(findOwnedRow({ apiKeyId, id }))

    const listOwned = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: ShareTokenRow,
        execute: (apiKeyId) => sql`SELECT * FROM share_tokens WHERE api_key_id = ${apiKeyId} ORDER BY created_at DESC, id`
      }),
      orDieOnMismatch
    )

    const revoke = (apiKeyId: string, id: string, now: string) =>
      Effect.map(
        sql`UPDATE share_tokens SET revoked_at = ${now} WHERE id = ${id} AND api_key_id = ${apiKeyId} AND revoked_at IS NULL
          RETURNING id`,
        (rows) => rows.length > 0
      )

    /** Counts one use, atomically; false when the token is no longer usable (two last uses: one wins). */
    const consume = (id: string, now: string) =>
      Effect.map(
        sql`UPDATE share_tokens SET uses = uses + 1
          WHERE id = ${id} AND revoked_at IS NULL AND expires_at > ${now} AND (max_uses IS NULL OR uses < max_uses)
          RETURNING uses`,
        (rows) => rows.length > 0
      )

    const logAccess = (tokenId: string, entry: AccessEntry) =>
      sql`INSERT INTO share_token_access (token_id, at, client_ip, attestation_id, path)
        VALUES (${tokenId}, ${entry.at}, ${entry.client_ip}, ${entry.attestation_id}, ${entry.path})`

    const accessLog = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: AccessEntry,
        execute: (tokenId) =>
          sql`SELECT at, client_ip, attestation_id, path FROM share_token_access WHERE token_id = ${tokenId} ORDER BY id`
      }),
      orDieOnMismatch
    )

    return { insert, findByHash, findOwned, listOwned, revoke, consume, logAccess, accessLog }
  })
}) {}
