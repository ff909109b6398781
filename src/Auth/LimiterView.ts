/**
 * One instance's view of one key's window in the shared (Postgres) rate
 * limiter: the bookkeeping only, no I/O (RateLimiter.ts does the statements).
 *
 * What the instance knows of the key's hits, per second, is three parts:
 *  - `synced`: the database's counts as the newest reads saw them;
 *  - batches in flight: hits taken for one write. A batch counts here until a
 *    read made after its write was acknowledged is folded in (that read counts
 *    it from then on), or until its write fails (then it is not counted);
 *  - `pending`: hits admitted here and not yet taken for a write.
 *
 * `merged` adds the three. For an instance alone on the database, once its
 * reads have come back, it is what the database holds once everything is
 * written, whatever order the writes and reads came back in — so two runs of the same sequential requests give the
 * same verdicts (test/Auth/limiterView.test.ts holds that against a model).
 * The exact path decides from its own read plus what the view holds that the
 * read cannot have seen (`unseenBy`), not from `merged`: with concurrent exact
 * hits on one key, the view may briefly hold another hit's over-limit add that
 * is about to be undone, and deciding from it would refuse a hit under the limit.
 * Other instances' hits appear at their next read.
 */
import { Deferred, Effect, FiberId } from "effect"

type Counts = Map<number, number>

export interface Batch {
  readonly hits: ReadonlyMap<number, number>
  /** When (performance.now) the write of these hits was acknowledged; undefined until then. */
  writtenAt: number | undefined
  /** Done once the write is acknowledged or has failed: the exact path waits for it before it reads. */
  readonly settled: Deferred.Deferred<void>
}

export interface KeyView {
  /** The window length this key is counted over (the longest seen). */
  window: number
  /** The database's admitted hits in the window as reads saw them: second → count. */
  readonly synced: Counts
  /** When (performance.now) the newest read folded into `synced` was made. */
  syncedAt: number
  pending: Counts
  readonly inFlight: Set<Batch>
  /**
   * Batches a folded read has seen (so `synced` counts them and they left flight), kept
   * SEEN_KEPT_MS after their write for the reads still out that were made before it: such
   * a read, folded later, cannot have seen them either (`unseenBy`).
   */
  readonly seen: Set<Batch>
  /** What this instance may still admit before the next sync. */
  allowance: number
}

export const makeView = (window: number, at: number): KeyView => ({
  window,
  synced: new Map(),
  syncedAt: at,
  pending: new Map(),
  inFlight: new Set(),
  seen: new Set(),
  allowance: 0
})

/** How long (ms) a batch a read has seen is kept for reads made before its write that are still out. */
export const SEEN_KEPT_MS = 30_000

const add = (into: Counts, from: Iterable<readonly [number, number]>) => {
  for (const [s, n] of from) into.set(s, (into.get(s) ?? 0) + n)
  return into
}

/** The hits in the window ending at `second` (inclusive). */
export const sumIn = (pairs: Iterable<readonly [number, number]>, second: number, window: number) => {
  let n = 0
  for (const [s, c] of pairs) if (s > second - window && s <= second) n += c
  return n
}

/** A window's hits, and the oldest second in it that holds one (the window's last second when none does). */
export interface WindowCount {
  used: number
  oldest: number
}

/** Counts `n` hits at second `s` into `count` if `s` lies in the window of `window` seconds ending at `second`. */
export const countInto = (count: WindowCount, s: number, n: number, second: number, window: number): void => {
  if (s <= second - window || s > second) return
  count.used += n
  if (n > 0 && s < count.oldest) count.oldest = s
}

/**
 * The window over everything the view counts (what `merged` adds up), read in
 * place. The limiter's local path runs this on every hit, where building the
 * merged list allocated a few KiB. Counts are never negative, so a second holds
 * a hit in the sum exactly when it holds one in some part.
 */
export const countView = (v: KeyView, second: number, window: number): WindowCount => {
  const count: WindowCount = { used: 0, oldest: second }
  const into = (n: number, s: number) => countInto(count, s, n, second, window)
  v.synced.forEach(into)
  for (const b of v.inFlight) b.hits.forEach(into)
  v.pending.forEach(into)
  return count
}

/**
 * Everything the view counts: synced + in flight + pending, seconds ascending. The
 * limiter reads its window in place (countView); this list is what that reading
 * stands for, and test/Auth/limiterView.test.ts holds the two equal.
 */
export const merged = (v: KeyView): Array<readonly [number, number]> => {
  const m = new Map(v.synced)
  for (const b of v.inFlight) add(m, b.hits)
  add(m, v.pending)
  return [...m].sort((a, b) => a[0] - b[0])
}

/**
 * What this instance admitted that a read made at `readAt` cannot have seen: the
 * batches not acknowledged by then (in flight, or since seen by a newer read folded
 * before this one), and the pending hits.
 */
export const unseenBy = (v: KeyView, readAt: number): Array<readonly [number, number]> => {
  const m: Counts = new Map()
  for (const b of v.inFlight) if (b.writtenAt === undefined || b.writtenAt > readAt) add(m, b.hits)
  for (const b of v.seen) if (b.writtenAt! > readAt) add(m, b.hits)
  return [...add(m, v.pending)]
}

/** Adds two lists of (second, count), seconds ascending. */
export const combined = (a: Iterable<readonly [number, number]>, b: Iterable<readonly [number, number]>) =>
  [...add(add(new Map(), a), b)].sort((x, y) => x[0] - y[0])

/** Moves the pending hits into a new batch in flight, or returns undefined when there are none. */
export const takePending = (v: KeyView | undefined): Batch | undefined => {
  if (v === undefined || v.pending.size === 0) return undefined
  const batch: Batch = { hits: v.pending, writtenAt: undefined, settled: Deferred.unsafeMake<void>(FiberId.none) }
  v.pending = new Map()
  v.inFlight.add(batch)
  return batch
}

/** The batch's write was acknowledged at `at`. */
export const markWritten = (batch: Batch, at: number) => {
  batch.writtenAt = at
  Deferred.unsafeDone(batch.settled, Effect.void)
}

/**
 * The batch's write is over. Unacknowledged, it failed: its hits leave flight
 * uncounted. Acknowledged, it stays until a read made after it is folded in.
 */
export const settle = (v: KeyView, batch: Batch) => {
  if (batch.writtenAt === undefined) v.inFlight.delete(batch)
  Deferred.unsafeDone(batch.settled, Effect.void)
}

/**
 * Folds a read of the database, made (sent) at `readAt`, into the view. Reads
 * of one key run concurrently and may come back out of order; a second's
 * count only grows (but for an over-limit add undone at once), so each second
 * keeps the highest count any read saw. Batches acknowledged before the read
 * was made are in it, so they leave flight (and are kept as `seen` for older reads
 * still out); so do batches wholly out of the window.
 */
export const absorb = (v: KeyView, rows: Iterable<readonly [number, number]>, second: number, readAt: number) => {
  for (const [s, n] of rows) if (n > (v.synced.get(s) ?? 0)) v.synced.set(s, n)
  for (const s of v.synced.keys()) if (s <= second - v.window) v.synced.delete(s)
  const outOfWindow = (b: Batch) => [...b.hits.keys()].every((s) => s <= second - v.window)
  for (const b of v.inFlight) {
    const read = b.writtenAt !== undefined && b.writtenAt <= readAt
    if (read || outOfWindow(b)) v.inFlight.delete(b)
    if (read && !outOfWindow(b)) v.seen.add(b)
  }
  for (const b of v.seen) if (b.writtenAt! < readAt - SEEN_KEPT_MS || outOfWindow(b)) v.seen.delete(b)
  if (readAt > v.syncedAt) v.syncedAt = readAt
}

