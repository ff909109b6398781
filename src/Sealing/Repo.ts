/**
 * T1 storage: pending digests (`pending_seals`), sealed batches with their leaves
 * (`batch_leaves`), tree nodes (stored per level in chunks of 1024 nodes, so a proof
 * needs one small row per level), and the per-attestation t1_complete events of the
 * outbox. A seal writes no attestation row (migration 0016).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, flow, Schema } from "effect"
import { HashHex, makeHashHex } from "../Domain/HashHex.js"
import { column, CountRow, DbBytes, DbInt, decodeRows, orDieOnMismatch, orUndefined } from "../Platform/Rows.js"
import type { MerkleTree } from "./MerkleBuilder.js"
import { siblingPath, type ProofStep } from "./MerkleBuilder.js"
import { retryingConflicts } from "../Platform/Sql.js"

export const CHUNK_NODES = 1024

/** A `batches` row. */
export const BatchRow = Schema.Struct({
  id: DbInt,
  windowEnd: column("window_end", Schema.String),
  merkleRoot: column("merkle_root", HashHex),
  leafCount: column("leaf_count", DbInt),
  tsaToken: column("tsa_token", DbBytes),
  tsaProvider: column("tsa_provider", Schema.String),
  tsaGenTime: column("tsa_gen_time", Schema.String),
  sealedAt: column("sealed_at", Schema.String),
  dailyRootId: column("daily_root_id", Schema.NullOr(DbInt)),
  dailyLeafIndex: column("daily_leaf_index", Schema.NullOr(DbInt))
})
export interface Batch extends Schema.Schema.Type<typeof BatchRow> {}

const PendingRow = Schema.Struct({ seq: DbInt, hashHex: column("hash_hex", HashHex) })
const IdRow = Schema.Struct({ id: DbInt })
const ChunkRow = Schema.Struct({ level: DbInt, chunk: DbInt, nodes: Schema.Uint8ArrayFromSelf })

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
  /** The T1 time of the batch's attestations: the TSA's genTime in wire format. */
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
    const pending: (windowEnd: string) => Effect.Effect<ReadonlyArray<PendingLeaf>, SqlError> = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: PendingRow,
        // the pending set carries the time and digest: a seal reads the backlog, not the registry
        execute: (windowEnd) => sql`SELECT seq, hash_hex FROM pending_seals WHERE registered_at < ${windowEnd} ORDER BY seq`
      }),
      orDieOnMismatch
    )

    /**
     * Writes batch, nodes, leaves and outbox events, and takes the leaves off the pending
     * set, in one transaction. If any leaf is no longer pending (another sealer won),
     * nothing is written.
     */
    const recordSeal = (rec: SealRecord) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const [batch] = yield* decodeRows(IdRow)(sql`INSERT INTO batches
          (window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at, t1_at)
          VALUES (${rec.windowEnd}, ${rec.tree.rootHex}, ${rec.tree.leafCount}, ${Buffer.from(rec.tsaToken)},
            ${rec.tsaProvider}, ${rec.tsaGenTime}, ${rec.sealedAt}, ${rec.t1At})
          RETURNING id`)
        const batchId = batch!.id
        const rows = chunkRows(batchId, rec.tree)
        for (let i = 0; i < rows.length; i += 200) {
          yield* sql`INSERT INTO merkle_chunks ${sql.insert(rows.slice(i, i + 200))}`
        }
        const pairs = JSON.stringify(rec.leaves.map((leaf) => [leaf.seq, rec.tree.leafIndex(leaf.hashHex)]))
        // Postgres: one statement, the window's array parsed once (a CTE's writes all run);
        // SQLite: one statement per table. Either way, a leaf no longer pending means another
        // sealer won: the transaction is rolled back. The leaves are in seq order (`pending`),
        // and so are their events.
        const taken = yield* (isPg
          ? decodeRows(CountRow)(sql`WITH v AS MATERIALIZED (
                SELECT (e->>0)::bigint AS seq, (e->>1)::int AS idx FROM jsonb_array_elements(${pairs}::jsonb) e),
              taken AS (DELETE FROM pending_seals p USING v WHERE p.seq = v.seq RETURNING 1),
              leaves AS (INSERT INTO batch_leaves (attestation_seq, batch_id, leaf_index) SELECT seq, ${batchId}, idx FROM v),
              events AS (INSERT INTO outbox (event_type, attestation_seq, created_at)
                SELECT 't1_complete', seq, ${rec.sealedAt} FROM v)
            SELECT COUNT(*) AS n FROM taken`)
          : Effect.gen(function*() {
            yield* sql`DELETE FROM pending_seals WHERE seq IN (SELECT j.value ->> '$[0]' FROM json_each(${pairs}) j)`
            // the rows the DELETE removed: the transaction holds the connection, so nothing ran in between
            const taken = yield* decodeRows(CountRow)(sql`SELECT changes() AS n`)
            yield* sql`INSERT INTO batch_leaves (attestation_seq, batch_id, leaf_index)
              SELECT j.value ->> '$[0]', ${batchId}, j.value ->> '$[1]' FROM json_each(${pairs}) j`
            yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at)
              SELECT 't1_complete', j.value ->> '$[0]', ${rec.sealedAt} FROM json_each(${pairs}) j`
            return taken
          }))
        if ((taken[0]?.n ?? 0) !== rec.leaves.length) {
          return yield* Effect.die(new SealConflict(`batch for ${rec.windowEnd}: some leaves were sealed elsewhere`))
        }
        return batchId
      })))

    const batchById = flow(
      SqlSchema.findOne({ Request: Schema.Number, Result: BatchRow, execute: (id) => sql`SELECT * FROM batches WHERE id = ${id}` }),
      orUndefined
    )

    /** The inclusion proof of leaf `leafIndex`, read from the stored chunks. */
    const proof = (batch: Batch, leafIndex: number) =>
      Effect.gen(function*() {
        const path = siblingPath(batch.leafCount, leafIndex)
        if (path.length === 0) return []
        const wanted = [...new Set(path.map((s) => `${s.level}:${Math.floor(s.index / CHUNK_NODES)}`))]
        const conditions = wanted.map((w) => {
          const [level, chunk] = w.split(":").map(Number)
          return sql`(level = ${level!} AND chunk = ${chunk!})`
        })
        const rows = yield* decodeRows(ChunkRow)(sql`
          SELECT level, chunk, nodes FROM merkle_chunks WHERE batch_id = ${batch.id} AND (${sql.or(conditions)})`)
        const chunks = new Map(rows.map((r) => [`${r.level}:${r.chunk}`, Buffer.from(r.nodes)]))
        return path.map((s): ProofStep<HashHex> => {
          const nodes = chunks.get(`${s.level}:${Math.floor(s.index / CHUNK_NODES)}`)!
          const off = (s.index % CHUNK_NODES) * 32
          return { hash: makeHashHex(nodes.subarray(off, off + 32).toString("hex")), position: s.position }
        })
      })

    const counts = Effect.map(decodeRows(CountRow)(sql`SELECT COUNT(*) AS n FROM batches`), (rows) => ({ batches: rows[0]?.n ?? 0 }))

    return { pending, recordSeal, batchById, proof, counts }
  })
}) {}
