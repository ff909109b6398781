/**
 * T2 storage: daily roots over batch roots, each calendar's submission and
 * (upgraded) OpenTimestamps timestamp, and the transaction that moves a
 * confirmed day to T2 with its t2_complete outbox events.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { MerkleTree } from "../Sealing/MerkleBuilder.js"

export type SubmissionStatus = "unsubmitted" | "pending" | "confirmed"

export interface DailyRoot {
  readonly id: number
  readonly windowEnd: string
  readonly root: string
  /** The sorted batch roots (the tree's leaves). */
  readonly leaves: ReadonlyArray<string>
  readonly batchCount: number
  readonly createdAt: string
  readonly status: "pending" | "confirmed"
  readonly bitcoinHeight: number | null
  readonly bitcoinMerkleRoot: string | null
  /** The 80-byte header of the anchoring block (lowercase hex), checked against the header sources. */
  readonly bitcoinHeader: string | null
  readonly confirmedAt: string | null
}

export interface Submission {
  readonly dailyRootId: number
  readonly calendarUrl: string
  readonly status: SubmissionStatus
  readonly timestamp: Uint8Array | null
  readonly attempts: number
  readonly lastError: string | null
  readonly submittedAt: string | null
}

interface DailyRootRow {
  readonly id: number | string
  readonly window_end: string
  readonly root: string
  readonly leaves: Uint8Array
  readonly batch_count: number | string
  readonly created_at: string
  readonly status: string
  readonly bitcoin_height: number | string | null
  readonly bitcoin_merkle_root: string | null
  readonly bitcoin_header: string | null
  readonly confirmed_at: string | null
}

interface SubmissionRow {
  readonly daily_root_id: number | string
  readonly calendar_url: string
  readonly status: string
  readonly timestamp: Uint8Array | null
  readonly attempts: number | string
  readonly last_error: string | null
  readonly submitted_at: string | null
}

const toDailyRoot = (r: DailyRootRow): DailyRoot => {
  const buf = Buffer.from(r.leaves)
  const leaves: Array<string> = []
  for (let i = 0; i < buf.length; i += 32) leaves.push(buf.subarray(i, i + 32).toString("hex"))
  return {
    id: Number(r.id),
    windowEnd: r.window_end,
    root: r.root,
    leaves,
    batchCount: Number(r.batch_count),
    createdAt: r.created_at,
    status: r.status === "confirmed" ? "confirmed" : "pending",
    bitcoinHeight: r.bitcoin_height === null ? null : Number(r.bitcoin_height),
    bitcoinMerkleRoot: r.bitcoin_merkle_root,
    bitcoinHeader: r.bitcoin_header ?? null,
    confirmedAt: r.confirmed_at
  }
}

const toSubmission = (r: SubmissionRow): Submission => ({
  dailyRootId: Number(r.daily_root_id),
  calendarUrl: r.calendar_url,
  status: r.status as SubmissionStatus,
  timestamp: r.timestamp === null ? null : new Uint8Array(r.timestamp),
  attempts: Number(r.attempts),
  lastError: r.last_error,
  submittedAt: r.submitted_at
})

export class AnchoringRepo extends Effect.Service<AnchoringRepo>()("Anchoring/AnchoringRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const unanchoredBatches = (windowEnd: string) =>
      Effect.map(
        sql<{ id: number | string; merkle_root: string }>`SELECT id, merkle_root FROM batches
          WHERE daily_root_id IS NULL AND window_end <= ${windowEnd} ORDER BY id`,
        (rows) => rows.map((r) => ({ id: Number(r.id), merkleRoot: r.merkle_root }))
      )

    /** Creates the day's root, links its batches, and queues one submission per calendar, atomically. */
    const createDailyRoot = (input: {
      readonly windowEnd: string
      readonly tree: MerkleTree
      readonly batches: ReadonlyArray<{ readonly id: number; readonly merkleRoot: string }>
      readonly calendars: ReadonlyArray<string>
      readonly now: string
    }) =>
      sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<{ id: number | string }>`INSERT INTO daily_roots
          (window_end, root, leaves, batch_count, created_at)
          VALUES (${input.windowEnd}, ${input.tree.rootHex}, ${Buffer.from(input.tree.levels[0]!)},
            ${input.batches.length}, ${input.now})
          RETURNING id`
        const id = Number(row!.id)
        const pairs = JSON.stringify(input.batches.map((b) => [b.id, input.tree.leafIndex(b.merkleRoot)]))
        const linked = yield* (isPg
          ? sql<{ n: number | string }>`WITH u AS (
              UPDATE batches b SET daily_root_id = ${id}, daily_leaf_index = v.idx
              FROM (SELECT (e->>0)::bigint AS bid, (e->>1)::int AS idx FROM jsonb_array_elements(${pairs}::jsonb) e) v
              WHERE b.id = v.bid AND b.daily_root_id IS NULL
              RETURNING 1)
            SELECT COUNT(*) AS n FROM u`
          : sql<{ n: number | string }>`UPDATE batches SET daily_root_id = ${id}, daily_leaf_index = j.value ->> '$[1]'
              FROM json_each(${pairs}) j
              WHERE batches.id = j.value ->> '$[0]' AND batches.daily_root_id IS NULL
              RETURNING 1 AS n`.pipe(Effect.map((r) => [{ n: r.length }])))
        if (Number(linked[0]?.n ?? 0) !== input.batches.length) {
          return yield* Effect.die(new Error("some batches of this day were anchored elsewhere"))
        }
        for (const url of input.calendars) {
          yield* sql`INSERT INTO calendar_submissions (daily_root_id, calendar_url, status, updated_at)
            VALUES (${id}, ${url}, 'unsubmitted', ${input.now})`
        }
        return id
      }))

    const openRoots = Effect.map(
      sql<DailyRootRow>`SELECT * FROM daily_roots WHERE status <> 'confirmed' ORDER BY id`,
      (rows) => rows.map(toDailyRoot)
    )

    const dailyRootById = (id: number) =>
      Effect.map(sql<DailyRootRow>`SELECT * FROM daily_roots WHERE id = ${id}`, (rows) =>
        rows[0] ? toDailyRoot(rows[0]) : undefined)

    const submissions = (dailyRootId: number) =>
      Effect.map(
        sql<SubmissionRow>`SELECT * FROM calendar_submissions WHERE daily_root_id = ${dailyRootId} ORDER BY calendar_url`,
        (rows) => rows.map(toSubmission)
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
      sql.withTransaction(Effect.gen(function*() {
        const won = yield* sql`UPDATE daily_roots SET status = 'confirmed', bitcoin_height = ${c.height},
            bitcoin_merkle_root = ${c.merkleRoot}, bitcoin_header = ${c.header}, confirmed_at = ${c.at}
          WHERE id = ${dailyRootId} AND status <> 'confirmed' RETURNING id`
        if (won.length === 0) return 0
        yield* sql`UPDATE attestations SET level = 'T2', t2_at = ${c.at}, t2_block = ${c.height}
          WHERE level = 'T1' AND batch_id IN (SELECT id FROM batches WHERE daily_root_id = ${dailyRootId})`
        yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at)
          SELECT 't2_complete', seq, ${c.at} FROM attestations
          WHERE batch_id IN (SELECT id FROM batches WHERE daily_root_id = ${dailyRootId})`
        return 1
      }))

    const counts = Effect.map(
      sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM daily_roots`,
      (rows) => ({ daily_roots: Number(rows[0]?.n ?? 0) })
    )

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
