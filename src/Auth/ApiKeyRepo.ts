/** API key storage: create, find by hash, list, revoke. */
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Effect, Schema } from "effect"
import { column, DbInt, decodeRows } from "../Platform/Rows.js"
import { formatMillis } from "../Domain/Time.js"
import { type ApiKey, hashSecret, newApiKeySecret, newKeyId, Scope } from "./Domain.js"
import { announceKeysChanged, KEYS_CHANNEL, KeyCacheRef, keysMarkerOf } from "./KeyCache.js"
import { currentSqliteFile, inTransaction } from "../Platform/Sql.js"

/** An `api_keys` row as the domain's ApiKey (scopes and allow_ips are JSON text; Postgres BIGINT comes as strings). */
const ApiKeyRow = Schema.Struct({
  id: Schema.String,
  keyHash: column("key_hash", Schema.String),
  label: Schema.String,
  scopes: Schema.NullOr(Schema.parseJson(Schema.Array(Scope))),
  orgId: column("org_id", Schema.NullOr(Schema.String)),
  env: Schema.NullOr(Schema.Literal("test", "production")),
  allowIps: column("allow_ips", Schema.NullOr(Schema.parseJson(Schema.Array(Schema.String)))),
  rateLimit: column("rate_limit", Schema.NullOr(DbInt)),
  monthlyQuota: column("monthly_quota", Schema.NullOr(DbInt)),
  createdAt: column("created_at", Schema.String),
  revokedAt: column("revoked_at", Schema.NullOr(Schema.String))
})
const keyRows = decodeRows(ApiKeyRow)

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
    const sqliteFile = yield* currentSqliteFile
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

    /** The key with this hash: from the cache (at most ATTESTD_KEY_CACHE_TTL old, KeyCache.ts), else the store. */
    const findByHash = (keyHash: string) =>
      Effect.suspend(() => {
        const cached = cache.get(keyHash)
        if (cached !== undefined) return Effect.succeed<ApiKey | undefined>(cached)
        const generation = cache.generation()
        return Effect.map(keyRows(sql`SELECT * FROM api_keys WHERE key_hash = ${keyHash}`), (rows) => {
          const key = rows[0]
          if (key !== undefined) cache.set(keyHash, key, generation)
          return key
        })
      })

    const list = keyRows(sql`SELECT * FROM api_keys ORDER BY created_at, id`)

    /**
     * Revokes a key and tells every key cache at once. It refuses to run inside a
     * transaction: on SQLite the marker would announce a change other processes
     * cannot see yet (they would reload and keep the key), and this process's
     * cache would be emptied before the commit.
     */
    const revoke = (id: string) =>
      Effect.gen(function*() {
        if (yield* inTransaction) {
          return yield* Effect.dieMessage("ApiKeyRepo.revoke announces the revocation at once: run it outside a transaction")
        }
        const now = formatMillis(yield* Clock.currentTimeMillis)
        // On Postgres every instance's key cache hears of it at commit; on SQLite the
        // server's cache sees the marker beside the database replaced (KeyCache.ts).
        const rows = isPg
          ? yield* sql<{ id: string }>`WITH revoked AS (
              UPDATE api_keys SET revoked_at = ${now} WHERE id = ${id} AND revoked_at IS NULL RETURNING id
            ) SELECT id, pg_notify(${KEYS_CHANNEL}, id) FROM revoked`
          : yield* sql<{ id: string }>`UPDATE api_keys SET revoked_at = ${now}
              WHERE id = ${id} AND revoked_at IS NULL RETURNING id`
        if (rows.length > 0 && sqliteFile !== undefined) announceKeysChanged(keysMarkerOf(sqliteFile))
        cache.invalidate()
        return rows.length > 0
      })

    return { create, findByHash, list, revoke }
  })
}) {}
