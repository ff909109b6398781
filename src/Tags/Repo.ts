/**
 * Tags, denormalised with the owning key and attestation so an AND query is a
 * chain of index lookups on (api_key_id, key, value, attestation_seq).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { AttestationId } from "../Domain/AttestationId.js"
import { HashHex } from "../Domain/HashHex.js"
import { CountRow, DbInt, decodeRows, orDieOnMismatch } from "../Platform/Rows.js"
import type { Tag } from "./Domain.js"
import { retryingConflicts } from "../Platform/Sql.js"

/** A tag row is plaintext (value set) or client-encrypted (value NULL, ciphertext and nonce set). */
const tagRow = <F extends Schema.Struct.Fields>(fields: F) =>
  Schema.Union(
    Schema.Struct({ ...fields, key: Schema.String, value: Schema.String }),
    Schema.Struct({ ...fields, key: Schema.String, value: Schema.Null, value_enc: Schema.String, value_nonce: Schema.String })
  )
const TagRow = tagRow({})
const SeqTagRow = tagRow({ attestation_seq: DbInt })
const MatchRow = Schema.Struct({ seq: DbInt, id: AttestationId, hash_hex: HashHex })

const toTag = (r: typeof TagRow.Type): Tag =>
  r.value !== null ? { key: r.key, value: r.value } : { key: r.key, value_enc: r.value_enc, value_nonce: r.value_nonce }

export class TooManyTags extends Error {}
export class ClaimGone extends Error {}

export class TagRepo extends Effect.Service<TagRepo>()("Tags/TagRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const forClaim = flow(
      SqlSchema.findAll({
        Request: Schema.Number,
        Result: TagRow,
        execute: (claimId) => sql`SELECT key, value, value_enc, value_nonce FROM tags WHERE claim_id = ${claimId} ORDER BY key`
      }),
      Effect.map((rows) => rows.map(toTag)),
      orDieOnMismatch
    )
    const countForClaim = flow(
      SqlSchema.single({
        Request: Schema.Number,
        Result: CountRow,
        execute: (claimId) => sql`SELECT COUNT(*) AS n FROM tags WHERE claim_id = ${claimId}`
      }),
      orDieOnMismatch
    )

    /** Upserts tags on a claim; if the claim would hold more than `max`, nothing changes. */
    const upsert = (
      claim: { readonly id: number; readonly apiKeyId: string; readonly attestationSeq: number },
      tags: ReadonlyArray<Tag>,
      max: number,
      now: string
    ) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        // Lock the claim: upserts on one claim are serialised (the count below sees every committed tag under
        // READ COMMITTED), and a claim soft-deleted meanwhile gets no tags.
        const live = yield* sql`SELECT id FROM claims WHERE id = ${claim.id} AND deleted_at IS NULL ${isPg ? sql.unsafe("FOR UPDATE") : sql.unsafe("")}`
        if (live.length === 0) return yield* Effect.fail(new ClaimGone())
        for (const t of tags) {
          const plain = "value" in t
          yield* sql`INSERT INTO tags (claim_id, api_key_id, attestation_seq, key, value, value_enc, value_nonce, updated_at)
            VALUES (${claim.id}, ${claim.apiKeyId}, ${claim.attestationSeq}, ${t.key},
              ${plain ? t.value : null}, ${plain ? null : t.value_enc}, ${plain ? null : t.value_nonce}, ${now})
            ON CONFLICT (claim_id, key) DO UPDATE SET value = excluded.value, value_enc = excluded.value_enc,
              value_nonce = excluded.value_nonce, updated_at = excluded.updated_at`
        }
        const { n } = yield* countForClaim(claim.id)
        if (n > max) return yield* Effect.fail(new TooManyTags(`${n}`))
        return yield* forClaim(claim.id)
      })))

    const remove = (claimId: number, key: string) =>
      Effect.map(sql`DELETE FROM tags WHERE claim_id = ${claimId} AND key = ${key} RETURNING key`, (rows) => rows.length > 0)

    /** Attestations of `apiKeyId` carrying every (key, value); plaintext tags only; ordered by sequence after `after`. */
    const query = (
      apiKeyId: string,
      conditions: ReadonlyArray<{ readonly key: string; readonly value: string }>,
      after: number,
      limit: number
    ) =>
      Effect.gen(function*() {
        const [first, ...rest] = conditions
        const joins = rest.map((c, i) => {
          const t = sql(`t${i + 1}`)
          return sql`JOIN tags ${t} ON ${t}.api_key_id = t0.api_key_id AND ${t}.attestation_seq = t0.attestation_seq
            AND ${t}.key = ${c.key} AND ${t}.value = ${c.value}`
        })
        const rows = yield* decodeRows(MatchRow)(sql`
          SELECT a.seq, a.id, a.hash_hex FROM tags t0 ${sql.join(" ", false, "")(joins)}
          JOIN attestations a ON a.seq = t0.attestation_seq
          WHERE t0.api_key_id = ${apiKeyId} AND t0.key = ${first!.key} AND t0.value = ${first!.value}
            AND t0.attestation_seq > ${after}
          ORDER BY t0.attestation_seq LIMIT ${limit + 1}`)
        const page = rows.slice(0, limit)
        const seqs = page.map((r) => r.seq)
        const tags = seqs.length === 0 ? [] : yield* decodeRows(SeqTagRow)(sql`SELECT attestation_seq, key, value, value_enc, value_nonce
          FROM tags WHERE api_key_id = ${apiKeyId} AND ${sql.in("attestation_seq", seqs)} ORDER BY key`)
        return {
          items: page.map((r) => ({
            id: r.id,
            hash_hex: r.hash_hex,
            tags: tags.filter((t) => t.attestation_seq === r.seq).map(toTag)
          })),
          nextAfter: rows.length > limit ? page[page.length - 1]!.seq : undefined
        }
      })

    return { forClaim, upsert, remove, query }
  })
}) {}
