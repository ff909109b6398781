/**
 * T1 storage: pending digests, sealed batches, tree nodes (stored per level in
 * chunks of 1024 nodes, so a proof needs one small row per level), and the
 * per-attestation t1_complete events of the outbox.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { MerkleTree } from "./MerkleBuilder.js"
import { siblingPath, type ProofStep } from "./MerkleBuilder.js"

export const CHUNK_NODES = 1024

export interface Batch {
  readonly id: number
  readonly windowEnd: string
  readonly merkleRoot: string
  readonly leafCount: number
  readonly tsaToken: Uint8Array
  readonly tsaProvider: string
  readonly tsaGenTime: string
  readonly sealedAt: string
  readonly dailyRootId: number | null
  readonly dailyLeafIndex: number | null
}

interface BatchRow {
  readonly id: number | string
  readonly window_end: string
  readonly merkle_root: string
  readonly leaf_count: number | string
  readonly tsa_token: Uint8Array
  readonly tsa_provider: string
  readonly tsa_gen_time: string
  readonly sealed_at: string
  readonly daily_root_id: number | string | null
  readonly daily_leaf_index: number | string | null
}

export const toBatch = (r: BatchRow): Batch => ({
  id: Number(r.id),
  windowEnd: r.window_end,
  merkleRoot: r.merkle_root,
  leafCount: Number(r.leaf_count),
  tsaToken: new Uint8Array(r.tsa_token),
  tsaProvider: r.tsa_provider,
  tsaGenTime: r.tsa_gen_time,
  sealedAt: r.sealed_at,
  dailyRootId: r.daily_root_id === null ? null : Number(r.daily_root_id),
  dailyLeafIndex: r.daily_leaf_index === null ? null : Number(r.daily_leaf_index)
})

export interface PendingLeaf {
  readonly seq: number
  readonly hashHex: string
}

export interface SealRecord {
  readonly windowEnd: string
  readonly tree: MerkleTree
  readonly leaves: ReadonlyArray<PendingLeaf>
  readonly tsaToken: Uint8Array
  readonly tsaProvider: string
  readonly tsaGenTime: string
  readonly sealedAt: string
  /** The T1 time recorded on each attestation: the TSA's genTime in wire format. */
  readonly t1At: string
}

export class SealConflict extends Error {
  override readonly name = "SealConflict"
}

const chunkRows = (batchId: number, tree: MerkleTree) => {
  const rows: Array<{ batch_id: number; level: number; chunk: number; nodes: Buffer }> = []
  tree.levels.forEach((level, l) => {
    const bytes = CHUNK_NODES * 32
    for (let off = 0, c = 0; off < level.length; off += bytes, c++) {
      rows.push({ batch_id: batchId, level: l, chunk: c, nodes: level.subarray(off, Math.min(off + bytes, level.length)) })
    }
  })
  return rows
}

export class SealingRepo extends Effect.Service<SealingRepo>()("Sealing/SealingRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    /** Every attestation still at T0 registered before `windowEnd`. */
    const pending = (windowEnd: string) =>
      Effect.map(
        sql<{ seq: number | string; hash_hex: string }>`SELECT seq, hash_hex FROM attestations
          WHERE level = 'T0' AND registered_at < ${windowEnd} ORDER BY seq`,
        (rows) => rows.map((r): PendingLeaf => ({ seq: Number(r.seq), hashHex: r.hash_hex }))
      )

    /**
     * Writes batch, nodes, T1 state and outbox events in one transaction. If any
     * leaf is no longer at T0 (another sealer won), nothing is written.
     */
    const recordSeal = (rec: SealRecord) =>
      sql.withTransaction(Effect.gen(function*() {
        const [batch] = yield* sql<{ id: number | string }>`INSERT INTO batches
          (window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at)
          VALUES (${rec.windowEnd}, ${rec.tree.rootHex}, ${rec.tree.leafCount}, ${Buffer.from(rec.tsaToken)},
            ${rec.tsaProvider}, ${rec.tsaGenTime}, ${rec.sealedAt})
          RETURNING id`
        const batchId = Number(batch!.id)
        const rows = chunkRows(batchId, rec.tree)
        for (let i = 0; i < rows.length; i += 200) {
          yield* sql`INSERT INTO merkle_chunks ${sql.insert(rows.slice(i, i + 200))}`
        }
        const pairs = rec.leaves.map((leaf) => [leaf.seq, rec.tree.leafIndex(leaf.hashHex)])
        const updated = yield* (isPg
          ? sql<{ n: number | string }>`WITH u AS (
              UPDATE attestations a SET level = 'T1', batch_id = ${batchId}, leaf_index = v.idx, t1_at = ${rec.t1At}
              FROM (SELECT (e->>0)::bigint AS seq, (e->>1)::int AS idx FROM jsonb_array_elements(${JSON.stringify(pairs)}::jsonb) e) v
              WHERE a.seq = v.seq AND a.level = 'T0'
              RETURNING 1)
            SELECT COUNT(*) AS n FROM u`
          : sql<{ n: number | string }>`UPDATE attestations SET level = 'T1', batch_id = ${batchId},
              leaf_index = j.value ->> '$[1]', t1_at = ${rec.t1At}
              FROM json_each(${JSON.stringify(pairs)}) j
              WHERE attestations.seq = j.value ->> '$[0]' AND attestations.level = 'T0'
              RETURNING 1 AS n`.pipe(Effect.map((r) => [{ n: r.length }])))
        if (Number(updated[0]?.n ?? 0) !== rec.leaves.length) {
          return yield* Effect.die(new SealConflict(`batch for ${rec.windowEnd}: some leaves were sealed elsewhere`))
        }
        yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at)
          SELECT 't1_complete', seq, ${rec.sealedAt} FROM attestations WHERE batch_id = ${batchId}`
        return batchId
      }))

    const batchById = (id: number) =>
      Effect.map(sql<BatchRow>`SELECT * FROM batches WHERE id = ${id}`, (rows) => (rows[0] ? toBatch(rows[0]) : undefined))

    /** The inclusion proof of leaf `leafIndex`, read from the stored chunks. */
    const proof = (batch: Batch, leafIndex: number) =>
      Effect.gen(function*() {
        const path = siblingPath(batch.leafCount, leafIndex)
        if (path.length === 0) return [] as Array<ProofStep>
        const wanted = [...new Set(path.map((s) => `${s.level}:${Math.floor(s.index / CHUNK_NODES)}`))]
        const conditions = wanted.map((w) => {
          const [level, chunk] = w.split(":").map(Number)
          return sql`(level = ${level!} AND chunk = ${chunk!})`
        })
        const rows = yield* sql<{ level: number | string; chunk: number | string; nodes: Uint8Array }>`
          SELECT level, chunk, nodes FROM merkle_chunks WHERE batch_id = ${batch.id} AND (${sql.or(conditions)})`
        const chunks = new Map(rows.map((r) => [`${Number(r.level)}:${Number(r.chunk)}`, Buffer.from(r.nodes)]))
        return path.map((s): ProofStep => {
          const nodes = chunks.get(`${s.level}:${Math.floor(s.index / CHUNK_NODES)}`)!
          const off = (s.index % CHUNK_NODES) * 32
          return { hash: nodes.subarray(off, off + 32).toString("hex"), position: s.position }
        })
      })

    const counts = Effect.map(
      sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM batches`,
      (rows) => ({ batches: Number(rows[0]?.n ?? 0) })
    )

    return { pending, recordSeal, batchById, proof, counts }
  })
}) {}
