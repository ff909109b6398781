/** API key storage: create, find by hash, list, revoke. */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { formatMillis } from "../Domain/Time.js"
import { type ApiKey, hashSecret, newApiKeySecret, newKeyId, type Scope } from "./Domain.js"
import { KEYS_CHANNEL, KeyCacheRef } from "./KeyCache.js"

interface Row {
  readonly id: string
  readonly key_hash: string
  readonly label: string
  readonly scopes: string | null
  readonly org_id: string | null
  readonly env: string | null
  readonly allow_ips: string | null
  readonly rate_limit: number | string | null
  readonly monthly_quota: number | string | null
  readonly created_at: string
  readonly revoked_at: string | null
}

const num = (v: number | string | null): number | null => (v === null ? null : Number(v))

const toApiKey = (r: Row): ApiKey => ({
  id: r.id,
  keyHash: r.key_hash,
  label: r.label,
  scopes: r.scopes === null ? null : (JSON.parse(r.scopes) as Array<Scope>),
  orgId: r.org_id,
  env: r.env === "test" || r.env === "production" ? r.env : null,
  allowIps: r.allow_ips === null ? null : (JSON.parse(r.allow_ips) as Array<string>),
  rateLimit: num(r.rate_limit),
  monthlyQuota: num(r.monthly_quota),
  createdAt: r.created_at,
  revokedAt: r.revoked_at
})

export interface NewKey {
  readonly label: string
  readonly scopes: ReadonlyArray<Scope> | null
  readonly orgId: string | null
  readonly env: "test" | "production" | null
  readonly allowIps: ReadonlyArray<string> | null
  readonly rateLimit: number | null
  readonly monthlyQuota: number | null
}

export class ApiKeyRepo extends Effect.Service<ApiKeyRepo>()("Auth/ApiKeyRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const cache = yield* KeyCacheRef
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const create = (input: NewKey) =>
      Effect.gen(function*() {
        const secret = newApiKeySecret(input.env)
        const id = newKeyId()
        const now = formatMillis(yield* Clock.currentTimeMillis)
        yield* sql`INSERT INTO api_keys (id, key_hash, label, scopes, org_id, env, allow_ips, rate_limit, monthly_quota, created_at)
          VALUES (${id}, ${hashSecret(secret)}, ${input.label}, ${input.scopes ? JSON.stringify(input.scopes) : null},
            ${input.orgId}, ${input.env}, ${input.allowIps ? JSON.stringify(input.allowIps) : null},
            ${input.rateLimit}, ${input.monthlyQuota}, ${now})`
        return { id, secret, createdAt: now }
      })

    /** The key with this hash: from the cache while it is live (Postgres, KeyCache.ts), else the store. */
    const findByHash = (keyHash: string) =>
      Effect.suspend(() => {
        const cached = cache.get(keyHash)
        if (cached !== undefined) return Effect.succeed<ApiKey | undefined>(cached)
        const generation = cache.generation()
        return Effect.map(sql<Row>`SELECT * FROM api_keys WHERE key_hash = ${keyHash}`, (rows) => {
          const key = rows[0] ? toApiKey(rows[0]) : undefined
          if (key !== undefined) cache.set(keyHash, key, generation)
          return key
        })
      })

    const list = Effect.map(sql<Row>`SELECT * FROM api_keys ORDER BY created_at, id`, (rows) => rows.map(toApiKey))

    const revoke = (id: string) =>
      Effect.gen(function*() {
        const now = formatMillis(yield* Clock.currentTimeMillis)
        // On Postgres every instance's key cache hears of it at commit (KeyCache.ts).
        const rows = isPg
          ? yield* sql<{ id: string }>`WITH revoked AS (
              UPDATE api_keys SET revoked_at = ${now} WHERE id = ${id} AND revoked_at IS NULL RETURNING id
            ) SELECT id, pg_notify(${KEYS_CHANNEL}, id) FROM revoked`
          : yield* sql<{ id: string }>`UPDATE api_keys SET revoked_at = ${now}
              WHERE id = ${id} AND revoked_at IS NULL RETURNING id`
        cache.invalidate()
        return rows.length > 0
      })

    return { create, findByHash, list, revoke }
  })
}) {}
