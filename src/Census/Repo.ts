/**
 * Set-based organisation queries: a scan joins the suspect hashes (one JSON
 * parameter expanded in SQL) with the org's live claims; stats are one round
 * trip; derived lists keep only HMAC values, never a way back to the hashes.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { HashHex } from "../Domain/HashHex.js"
import { column, CountRow, DbInt, decodeRows, orDieOnMismatch, orUndefined } from "../Platform/Rows.js"
import { retryingConflicts } from "../Platform/Sql.js"

/** A `derived_lists` row. */
export const DerivedListRow = Schema.Struct({
  id: Schema.String,
  apiKeyId: column("api_key_id", Schema.String),
  orgId: column("org_id", Schema.String),
  label: Schema.NullOr(Schema.String),
  keyHash: column("key_hash", Schema.String),
  itemCount: column("item_count", DbInt),
  signingKeyId: column("signing_key_id", Schema.String),
  signature: Schema.String,
  signedPayloadSha256: column("signed_payload_sha256", Schema.String),
  createdAt: column("created_at", Schema.String),
  expiresAt: column("expires_at", Schema.String),
  revokedAt: column("revoked_at", Schema.NullOr(Schema.String))
})
export interface DerivedList extends Schema.Schema.Type<typeof DerivedListRow> {}

const ScanMatchRow = Schema.Struct({ hash_hex: HashHex, first_seen: Schema.String, source: Schema.NullOr(Schema.String) })
const StatsRow = Schema.Struct({
  kind: Schema.Literal("total", "month"),
  month: Schema.NullOr(Schema.String),
  n: DbInt,
  uniq: Schema.NullOr(DbInt),
  first: Schema.NullOr(Schema.String),
  last: Schema.NullOr(Schema.String)
})
const HashRow = Schema.Struct({ hash_hex: HashHex })
const AccessRow = Schema.Struct({
  at: Schema.String,
  client_ip: Schema.String,
  outcome: Schema.String,
  matched: Schema.NullOr(DbInt),
  total: Schema.NullOr(DbInt)
})

export class CensusRepo extends Effect.Service<CensusRepo>()("Census/CensusRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    const jsonSet = (values: ReadonlyArray<string>) =>
      isPg
        ? sql`(SELECT jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`
        : sql`(SELECT value FROM json_each(${JSON.stringify(values)}))`

    /**
     * The org's matches; `source` is claim data, so it comes only from the
     * caller's own live claim (null when the caller has none on that hash).
     */
    const scan = (orgId: string, apiKeyId: string, hashes: ReadonlyArray<string>) =>
      decodeRows(ScanMatchRow)(sql`
        SELECT a.hash_hex, MIN(c.created_at) AS first_seen,
          (SELECT c2.source FROM claims c2 WHERE c2.attestation_seq = a.seq AND c2.api_key_id = ${apiKeyId}
             AND c2.deleted_at IS NULL ORDER BY c2.created_at, c2.id LIMIT 1) AS source
        FROM attestations a
        JOIN claims c ON c.attestation_seq = a.seq AND c.org_id = ${orgId} AND c.deleted_at IS NULL
        WHERE a.hash_hex IN ${jsonSet(hashes)}
        GROUP BY a.seq, a.hash_hex
        ORDER BY a.hash_hex`)

    const stats = (orgId: string) =>
      Effect.map(
        decodeRows(StatsRow)(sql`
          SELECT 'total' AS kind, NULL AS month, COUNT(*) AS n, COUNT(DISTINCT attestation_seq) AS uniq,
            MIN(created_at) AS first, MAX(created_at) AS last
          FROM claims WHERE org_id = ${orgId} AND deleted_at IS NULL
          UNION ALL
          SELECT 'month' AS kind, substr(created_at, 1, 7) AS month, COUNT(*) AS n, NULL, NULL, NULL
          FROM claims WHERE org_id = ${orgId} AND deleted_at IS NULL
          GROUP BY substr(created_at, 1, 7)`),
        (rows) => {
          const total = rows.find((r) => r.kind === "total")
          const byMonth: Record<string, number> = {}
          for (const r of rows) if (r.kind === "month" && r.month) byMonth[r.month] = r.n
          return {
            totalClaims: total?.n ?? 0,
            uniqueHashes: total?.uniq ?? 0,
            firstClaim: total?.first ?? null,
            lastClaim: total?.last ?? null,
            claimsByMonth: Object.fromEntries(Object.entries(byMonth).sort(([a], [b]) => (a < b ? -1 : 1)))
          }
        }
      )

    /**
     * Hashes of the caller's own live claims whose tags match every condition
     * (within one claim). Tags are claim data: another key's tags, even in the
     * same org, never select anything (no oracle for their values).
     */
    const hashesByTags = (orgId: string, apiKeyId: string, conditions: ReadonlyArray<{ readonly key: string; readonly value: string }>, limit: number) => {
      const [first, ...rest] = conditions
      const joins = rest.map((c, i) => {
        const t = sql(`t${i + 1}`)
        return sql`JOIN tags ${t} ON ${t}.claim_id = t0.claim_id AND ${t}.key = ${c.key} AND ${t}.value = ${c.value}`
      })
      return Effect.map(
        decodeRows(HashRow)(sql`SELECT DISTINCT a.hash_hex FROM tags t0 ${sql.join(" ", false, "")(joins)}
          JOIN claims c ON c.id = t0.claim_id AND c.org_id = ${orgId} AND c.api_key_id = ${apiKeyId}
            AND c.deleted_at IS NULL
          JOIN attestations a ON a.seq = t0.attestation_seq
          WHERE t0.key = ${first!.key} AND t0.value = ${first!.value}
          LIMIT ${limit}`),
        (rows) => rows.map((r) => r.hash_hex)
      )
    }

    const createList = (list: Omit<DerivedList, "revokedAt">, values: ReadonlyArray<string>) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        // Expired lists answer 404 anyway; their values go when the next list is created.
        yield* sql`DELETE FROM derived_values WHERE list_id IN
          (SELECT id FROM derived_lists WHERE expires_at <= ${list.createdAt})`
        yield* sql`INSERT INTO derived_lists (id, api_key_id, org_id, label, key_hash, item_count, signing_key_id, signature,
            signed_payload_sha256, created_at, expires_at)
          VALUES (${list.id}, ${list.apiKeyId}, ${list.orgId}, ${list.label}, ${list.keyHash}, ${list.itemCount},
            ${list.signingKeyId}, ${list.signature}, ${list.signedPayloadSha256}, ${list.createdAt}, ${list.expiresAt})`
        for (let i = 0; i < values.length; i += 2000) {
          const part = values.slice(i, i + 2000).map((value) => ({ list_id: list.id, value }))
          yield* sql`INSERT INTO derived_values ${sql.insert(part)} ON CONFLICT (list_id, value) DO NOTHING`
        }
      })))

    const listById = flow(
      SqlSchema.findOne({
        Request: Schema.String,
        Result: DerivedListRow,
        execute: (id) => sql`SELECT * FROM derived_lists WHERE id = ${id}`
      }),
      orUndefined
    )

    const listsOfOrg = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: DerivedListRow,
        execute: (orgId) => sql`SELECT * FROM derived_lists WHERE org_id = ${orgId} ORDER BY created_at DESC, id`
      }),
      orDieOnMismatch
    )

    /** Revoking drops the derived values: a revoked list answers nothing again. */
    const revokeList = (id: string, now: string) =>
      retryingConflicts(sql.withTransaction(Effect.zipRight(
        sql`UPDATE derived_lists SET revoked_at = ${now} WHERE id = ${id} AND revoked_at IS NULL`,
        sql`DELETE FROM derived_values WHERE list_id = ${id}`
      )))

    const countMatches = (listId: string, values: ReadonlyArray<string>) =>
      Effect.map(
        decodeRows(CountRow)(sql`SELECT COUNT(*) AS n FROM derived_values WHERE list_id = ${listId} AND value IN ${jsonSet(values)}`),
        (rows) => rows[0]?.n ?? 0
      )

    const logAccess = (listId: string, e: { at: string; clientIp: string; outcome: string; matched: number | null; total: number | null }) =>
      sql`INSERT INTO derived_list_access (list_id, at, client_ip, outcome, matched, total)
        VALUES (${listId}, ${e.at}, ${e.clientIp}, ${e.outcome}, ${e.matched}, ${e.total})`

    const accessLog = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: AccessRow,
        execute: (listId) =>
          sql`SELECT at, client_ip, outcome, matched, total FROM derived_list_access WHERE list_id = ${listId} ORDER BY id`
      }),
      orDieOnMismatch
    )

    return { scan, stats, hashesByTags, createList, listById, listsOfOrg, revokeList, countMatches, logAccess, accessLog }
  })
}) {}
