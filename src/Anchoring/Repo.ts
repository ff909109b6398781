/**
 * T2 storage: daily roots over batch roots, each calendar's submission and
 * (upgraded) OpenTimestamps timestamp, and the transaction that moves a
 * confirmed day to T2 with its t2_complete outbox events.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { HashHex } from "../Domain/HashHex.js"
import { column, CountRow, DbBytes, DbInt, decodeRows, orDieOnMismatch, orUndefined } from "../Platform/Rows.js"
import type { MerkleTree } from "../Sealing/MerkleBuilder.js"
import { retryingConflicts } from "../Platform/Sql.js"


/** The stored leaves blob (32-byte batch roots, concatenated) as the sorted hex batch roots. */
const LeavesBlob = Schema.transform(Schema.Uint8ArrayFromSelf, Schema.Array(HashHex), {
  strict: true,
  decode: (bytes) => {
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    const leaves: Array<string> = []
    for (let i = 0; i < buf.length; i += 32) leaves.push(buf.subarray(i, i + 32).toString("hex"))
    return leaves
  },
  encode: (leaves) => new Uint8Array(Buffer.concat(leaves.map((l) => Buffer.from(l, "hex"))))
})

/** A `daily_roots` row. */
export const DailyRootRow = Schema.Struct({
  id: DbInt,
  windowEnd: column("window_end", Schema.String),
  root: HashHex,
  /** The sorted batch roots (the tree's leaves). */
  leaves: LeavesBlob,
  batchCount: column("batch_count", DbInt),
  createdAt: column("created_at", Schema.String),
  status: Schema.Literal("pending", "confirmed"),
  bitcoinHeight: column("bitcoin_height", Schema.NullOr(DbInt)),
  bitcoinMerkleRoot: column("bitcoin_merkle_root", Schema.NullOr(Schema.String)),
  /** The 80-byte header of the anchoring block (lowercase hex), checked against the header sources. */
  bitcoinHeader: column("bitcoin_header", Schema.NullOr(Schema.String)),
  confirmedAt: column("confirmed_at", Schema.NullOr(Schema.String))
})
export interface DailyRoot extends Schema.Schema.Type<typeof DailyRootRow> {}

export const SubmissionStatus = Schema.Literal("unsubmitted", "pending", "confirmed")
export type SubmissionStatus = typeof SubmissionStatus.Type

/** A `calendar_submissions` row. */
export const SubmissionRow = Schema.Struct({
  dailyRootId: column("daily_root_id", DbInt),
  calendarUrl: column("calendar_url", Schema.String),
  status: SubmissionStatus,
  timestamp: Schema.NullOr(DbBytes),
  attempts: DbInt,
  lastError: column("last_error", Schema.NullOr(Schema.String)),
  submittedAt: column("submitted_at", Schema.NullOr(Schema.String))
})
export interface Submission extends Schema.Schema.Type<typeof SubmissionRow> {}

const BatchRootRow = Schema.Struct({ id: DbInt, merkleRoot: column("merkle_root", HashHex) })
const IdRow = Schema.Struct({ id: DbInt })

export class AnchoringRepo extends Effect.Service<AnchoringRepo>()("Anchoring/AnchoringRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const unanchoredBatches = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: BatchRootRow,
        execute: (windowEnd) => sql`SELECT id, merkle_root FROM batches
          WHERE daily_root_id IS NULL AND window_end <= ${windowEnd} ORDER BY id`
      }),
      orDieOnMismatch
    )

    /** Creates the day's root, links its batches, and queues one submission per calendar, atomically. */
    const createDailyRoot = (input: {
      readonly windowEnd: string
      readonly tree: MerkleTree
      readonly batches: ReadonlyArray<{ readonly id: number; readonly merkleRoot: string }>
      readonly calendars: ReadonlyArray<string>
      readonly now: string
    }) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* decodeRows(IdRow)(sql`INSERT INTO daily_roots
          (window_end, root, leaves, batch_count, created_at)
          VALUES (${input.windowEnd}, ${input.tree.rootHex}, ${Buffer.from(input.tree.levels[0]!)},
            ${input.batches.length}, ${input.now})
          RETURNING id`)
        const id = row!.id
        const pairs = JSON.stringify(input.batches.map((b) => [b.id, input.tree.leafIndex(b.merkleRoot)]))
        const linked = yield* (isPg
          ? decodeRows(CountRow)(sql`WITH u AS (
              UPDATE batches b SET daily_root_id = ${id}, daily_leaf_index = v.idx
              FROM (SELECT (e->>0)::bigint AS bid, (e->>1)::int AS idx FROM jsonb_array_elements(${pairs}::jsonb) e) v
              WHERE b.id = v.bid AND b.daily_root_id IS NULL
              RETURNING 1)
            SELECT COUNT(*) AS n FROM u`)
          : sql`UPDATE batches SET daily_root_id = ${id}, daily_leaf_index = j.value ->> '$[1]'
              FROM json_each(${pairs}) j
              WHERE batches.id = j.value ->> '$[0]' AND batches.daily_root_id IS NULL
              RETURNING 1 AS n`.pipe(Effect.map((r) => [{ n: r.length }])))
        if ((linked[0]?.n ?? 0) !== input.batches.length) {
          return yield* Effect.die(new Error("some batches of this day were anchored elsewhere"))
        }
        for (const url of input.calendars) {
          yield* sql`INSERT INTO calendar_submissions (daily_root_id, calendar_url, status, updated_at)
            VALUES (${id}, ${url}, 'unsubmitted', ${input.now})`
        }
        return id
      })))

    const openRoots = decodeRows(DailyRootRow)(sql`SELECT * FROM daily_roots WHERE status <> 'confirmed' ORDER BY id`)

    const dailyRootById = flow(
      SqlSchema.findOne({ Request: Schema.Number, Result: DailyRootRow, execute: (id) => sql`SELECT * FROM daily_roots WHERE id = ${id}` }),
      orUndefined
    )

    const submissions = flow(
      SqlSchema.findAll({
        Request: Schema.Number,
        Result: SubmissionRow,
        execute: (dailyRootId) =>
          sql`SELECT * FROM calendar_submissions WHERE daily_root_id = ${dailyRootId} ORDER BY calendar_url`
      }),
      orDieOnMismatch
    )

    const recordSubmitted = (dailyRootId: number, url: string, timestamp: Uint8Array, now: string) =>
      sql`UPDATE calendar_submissions SET status = 'pending', timestamp = ${Buffer.from(timestamp)},
          attempts = attempts + 1, last_error = NULL, submitted_at = ${now}, updated_at = ${now}
        WHERE daily_root_id = ${dailyRootId} AND calendar_url = ${url} AND status = 'unsubmitted'`

    const recordFailure = (dailyRootId: number, url: string, error: string, now: string) =>
      sql`UPDATE calendar_submissions SET attempts = attempts + 1, last_error = ${error.slice(0, 500)}, updated_at = ${now}
        WHERE daily_root_id = ${dailyRootId} AND calendar_url = ${url} AND status = 'unsubmitted'`

    const recordUpgrade = (dailyRootId: number, url: string, timestamp: Uint8Array, complete: boolean, now: string) =>
      sql`UPDATE calendar_submissions SET timestamp = ${Buffer.from(timestamp)},
          status = ${complete ? "confirmed" : "pending"}, last_error = NULL, updated_at = ${now}
        WHERE daily_root_id = ${dailyRootId} AND calendar_url = ${url}`

    /** Moves the day to T2 with its events; a no-op when another instance already did. */
    const confirm = (
      dailyRootId: number,
      c: { readonly height: number; readonly merkleRoot: string; readonly header: string; readonly at: string }
    ) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const won = yield* sql`UPDATE daily_roots SET status = 'confirmed', bitcoin_height = ${c.height},
            bitcoin_merkle_root = ${c.merkleRoot}, bitcoin_header = ${c.header}, confirmed_at = ${c.at}
          WHERE id = ${dailyRootId} AND status <> 'confirmed' RETURNING id`
        if (won.length === 0) return 0
        // the day's attestations are T2 by their daily root (the view `attestations`): no row of theirs changes
        yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at)
          SELECT 't2_complete', l.attestation_seq, ${c.at} FROM batch_leaves l JOIN batches b ON b.id = l.batch_id
          WHERE b.daily_root_id = ${dailyRootId} ORDER BY l.attestation_seq`
        return 1
      })))

    const counts = Effect.map(decodeRows(CountRow)(sql`SELECT COUNT(*) AS n FROM daily_roots`), (rows) => ({ daily_roots: rows[0]?.n ?? 0 }))

    return {
      unanchoredBatches,
      createDailyRoot,
      openRoots,
      dailyRootById,
      submissions,
      recordSubmitted,
      recordFailure,
      recordUpgrade,
      confirm,
      counts
    }
  })
}) {}
