/** Share tokens, a read-only credential (stored only as SHA-256), and their access log. The ShareTokens feature manages them; Auth resolves them. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export interface ShareToken {
  readonly id: string
  readonly tokenHash: string
  readonly apiKeyId: string
  readonly attestationIds: ReadonlyArray<string>
  readonly recipientLabel: string | null
  readonly expiresAt: string
  readonly maxUses: number | null
  readonly uses: number
  readonly createdAt: string
  readonly revokedAt: string | null
}

interface Row {
  readonly id: string
  readonly token_hash: string
  readonly api_key_id: string
  readonly attestation_ids: string
  readonly recipient_label: string | null
  readonly expires_at: string
  readonly max_uses: number | string | null
  readonly uses: number | string
  readonly created_at: string
  readonly revoked_at: string | null
}

const toShareToken = (r: Row): ShareToken => ({
  id: r.id,
  tokenHash: r.token_hash,
  apiKeyId: r.api_key_id,
  attestationIds: JSON.parse(r.attestation_ids) as Array<string>,
  recipientLabel: r.recipient_label,
  expiresAt: r.expires_at,
  maxUses: r.max_uses === null ? null : Number(r.max_uses),
  uses: Number(r.uses),
  createdAt: r.created_at,
  revokedAt: r.revoked_at
})

export const shareTokenState = (t: ShareToken, now: string): "active" | "expired" | "revoked" | "exhausted" =>
  t.revokedAt !== null
    ? "revoked"
    : t.expiresAt <= now
    ? "expired"
    : t.maxUses !== null && t.uses >= t.maxUses
    ? "exhausted"
    : "active"

export interface AccessEntry {
  readonly at: string
  readonly client_ip: string
  readonly attestation_id: string
  readonly path: string
}

export class ShareTokenRepo extends Effect.Service<ShareTokenRepo>()("Auth/ShareTokenRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (t: Omit<ShareToken, "uses" | "revokedAt">) =>
      sql`INSERT INTO share_tokens (id, token_hash, api_key_id, attestation_ids, recipient_label, expires_at, max_uses, created_at)
        VALUES (${t.id}, ${t.tokenHash}, ${t.apiKeyId}, ${JSON.stringify(t.attestationIds)}, ${t.recipientLabel},
          ${t.expiresAt}, ${t.maxUses}, ${t.createdAt})`

    /** A token whose creating key is revoked is no token at all. */
    const findByHash = (hash: string) =>
      Effect.map(sql<Row>`SELECT s.* FROM share_tokens s JOIN api_keys k ON k.id = s.api_key_id
        WHERE s.token_hash = ${hash} AND k.revoked_at IS NULL`, (rows) =>
        rows[0] ? toShareToken(rows[0]) : undefined)

    const findOwned = (apiKeyId: string, id: string) =>
      Effect.map(sql<Row>`SELECT * FROM share_tokens WHERE id = ${id} AND api_key_id = ${apiKeyId}`, (rows) =>
        rows[0] ? toShareToken(rows[0]) : undefined)

    const listOwned = (apiKeyId: string) =>
      Effect.map(
        sql<Row>`SELECT * FROM share_tokens WHERE api_key_id = ${apiKeyId} ORDER BY created_at DESC, id`,
        (rows) => rows.map(toShareToken)
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

    const accessLog = (tokenId: string) =>
      sql<AccessEntry>`SELECT at, client_ip, attestation_id, path FROM share_token_access WHERE token_id = ${tokenId} ORDER BY id`

    return { insert, findByHash, findOwned, listOwned, revoke, consume, logAccess, accessLog }
  })
}) {}
