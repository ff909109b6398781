/**
 * Sliding-window request limits: per-second buckets summed over the last 60 s.
 * In memory for a single process (SQLite), in the database for several
 * instances on one Postgres. Only admitted requests are counted; a hit may
 * weigh more than one (batch verify counts its hashes).
 *
 * The in-memory store is bounded: windows that have expired are swept, and at
 * most MEMORY_LIMITER_MAX_KEYS keys are kept — beyond that the least recently
 * used key's window is forgotten (which can only make its limit more lenient,
 * never refuse a request), so distinct (spoofed) addresses cannot grow it without bound.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Deferred, Effect, Layer, Schema } from "effect"
import type { RateLimitInfo } from "../Domain/Errors.js"
import {
  absorb,
  type Batch,
  combined,
  countInto,
  countView,
  type KeyView,
  makeView,
  markWritten,
  settle,
  sumIn,
  takePending,
  unseenBy,
  type WindowCount
} from "./LimiterView.js"
import { RecencyMap } from "../Platform/RecencyMap.js"
import { column, DbInt, decodeRows } from "../Platform/Rows.js"
import { makeOutageLog } from "../Platform/Outage.js"

export interface Verdict extends RateLimitInfo {
  readonly allowed: boolean
}

export const WINDOW_SECONDS = 60

/** The most keys the in-memory limiter keeps (about 300 bytes each: ~30 MB at most). */
export const MEMORY_LIMITER_MAX_KEYS = 100_000

interface Window {
  /** The window length this key is counted over (the longest seen). */
  window: number
  /** Admitted hits as [second, count, second, count, …], seconds ascending (one array: less memory per key). */
  buckets: Array<number>
}

/** The in-memory limiter: `hit` as in RateLimiter, plus `size` (keys held) for tests and metrics. */
export const makeMemoryLimiter = (options: { readonly maxKeys?: number } = {}) => {
  const maxKeys = Math.max(1, options.maxKeys ?? MEMORY_LIMITER_MAX_KEYS)
  // Recency order: a hit moves its key to the end.
  const state = new RecencyMap<string, Window>()
  let hits = 0
  const lastSecond = (w: Window) => w.buckets.length === 0 ? -Infinity : w.buckets[w.buckets.length - 2]!
  /** Drops expired windows from the least recently used end, up to the first key used in the last minute. */
  const sweep = (nowSecond: number) => {
    for (const [k, w] of state.entries()) {
      const last = lastSecond(w)
      if (last <= nowSecond - w.window) state.delete(k)
      else if (last > nowSecond - WINDOW_SECONDS) break
    }
  }
  const hitAt = (key: string, limit: number, second: number, windowSeconds: number, cost: number): Verdict => {
    if (++hits % 1_000 === 0) sweep(second)
    let w = state.get(key)
    if (w === undefined) {
      if (state.size >= maxKeys) sweep(second)
      while (state.size >= maxKeys) state.delete(state.oldest()!)
      w = { window: windowSeconds, buckets: [] }
    }
    state.touch(key, w)
    if (windowSeconds > w.window) w.window = windowSeconds
    const b = w.buckets
    let drop = 0
    while (drop < b.length && b[drop]! <= second - windowSeconds) drop += 2
    if (drop > 0) b.splice(0, drop)
    let used = 0
    for (let i = 1; i < b.length; i += 2) used += b[i]!
    const admitted = used + cost <= limit
    if (admitted) {
      if (b.length === 0) w.buckets = [second, cost] // a literal: exactly two slots
      else if (b[b.length - 2] === second) b[b.length - 1]! += cost
      else b.push(second, cost)
    }
    // the verdict read from the flat buckets in place: no list of pairs per hit
    const count: WindowCount = { used: 0, oldest: second }
    for (let i = 0; i < w.buckets.length; i += 2) countInto(count, w.buckets[i]!, w.buckets[i + 1]!, second, windowSeconds)
    return verdictFrom(limit, second, count, admitted, windowSeconds)
  }
  return {
    hit: (key: string, limit: number, windowSeconds: number = WINDOW_SECONDS, cost: number = 1): Effect.Effect<Verdict> =>
      Effect.map(Clock.currentTimeMillis, (now) => hitAt(key, limit, Math.floor(now / 1000), windowSeconds, cost)),
    size: () => state.size
  }
}

/** Pure verdict from the counts in the window: `buckets` maps second → admitted count. */
export const verdictOf = (
  limit: number,
  nowSecond: number,
  buckets: ReadonlyArray<readonly [second: number, n: number]>,
  admitted: boolean,
  windowSeconds: number = WINDOW_SECONDS
): Verdict => {
  const count: WindowCount = { used: 0, oldest: nowSecond }
  for (const [s, n] of buckets) countInto(count, s, n, nowSecond, windowSeconds)
  return verdictFrom(limit, nowSecond, count, admitted, windowSeconds)
}

/** The verdict from a window's count (countInto), at second `nowSecond`. */
const verdictFrom = (
  limit: number,
  nowSecond: number,
  count: WindowCount,
  admitted: boolean,
  windowSeconds: number
): Verdict => {
  const reset = count.oldest + windowSeconds
  return {
    allowed: admitted,
    limit,
    remaining: Math.max(0, limit - count.used),
    reset,
    retryAfter: admitted ? 0 : Math.max(1, reset - nowSecond)
  }
}

export class RateLimiter extends Effect.Tag("Auth/RateLimiter")<RateLimiter, {
  /**
   * Counts `cost` (default 1) against `key` unless that would exceed `limit` per window
   * (default one minute); a refused hit counts nothing.
   */
  readonly hit: (key: string, limit: number, windowSeconds?: number, cost?: number) => Effect.Effect<Verdict>
}>() {
  static readonly memory = Layer.sync(RateLimiter, () => {
    const limiter = makeMemoryLimiter()
    return { hit: limiter.hit }
  })

  /**
   * Several instances on one Postgres (see makeSqlLimiter): each hit is decided
   * locally while the key's view of the database is fresh and its local
   * allowance lasts; otherwise it makes the round trip.
   */
  static readonly sql = Layer.scoped(RateLimiter, Effect.flatMap(SqlClient.SqlClient, (sql) => makeSqlLimiter(sql)))
}

/** How long a key's view of the database counts as fresh, and how often local hits are written. */
export const SQL_LIMITER_FRESH_MS = 1_000
export const SQL_LIMITER_FLUSH_MS = 100
/** The share of a key's remaining allowance (at its last sync) an instance may admit before syncing again. */
export const SQL_LIMITER_LOCAL_SHARE = 0.1

/** A rate_buckets row: BIGINT second and count come back from Postgres as strings. */
const BucketRow = Schema.Struct({ second: DbInt, n: DbInt })
const bucketRows = decodeRows(BucketRow)
const keyedBucketRows = decodeRows(Schema.Struct({ ...BucketRow.fields, bucketKey: column("bucket_key", Schema.String) }))

/**
 * The Postgres limiter, batched (issue 12 §3). The exact path is one statement
 * per hit: add, read the window, undo if over. To spare that round trip on
 * every request, each instance keeps a view of each busy key (LimiterView.ts):
 * the window as the database held it at the last sync, plus the hits admitted
 * here since. While that view is under SQL_LIMITER_FRESH_MS old and its
 * allowance — a tenth of the key's remaining allowance at the last sync —
 * lasts, a hit is decided from it and written with others every
 * SQL_LIMITER_FLUSH_MS in one statement, which also refreshes the view.
 * Otherwise the hit takes the exact path, which first waits for the key's
 * writes in flight to be acknowledged, so that its read counts them.
 *
 * Tolerance: an instance decides without seeing what the others admitted since
 * their last sync, and each of those is at most its allowance, a tenth of what
 * remained then: with N instances at most (N − 1) × 10% of the limit can be
 * admitted over it, and only while all of them are hammering one key. When
 * under 10 units remain, the allowance is 0 and every hit is exact, so small
 * limits hold exactly. Refusals are never counted. Freshness and flushing use
 * real time; the window's seconds come from the Effect clock as before.
 */
export const makeSqlLimiter = (sql: SqlClient.SqlClient) =>
  Effect.gen(function*() {
    const views = new RecencyMap<string, KeyView>()
    let calls = 0
    const outage = yield* makeOutageLog("rate-limit flush")

    const viewOf = (key: string, window: number, at: number) => {
      let v = views.get(key)
      if (v === undefined) {
        if (views.size >= MEMORY_LIMITER_MAX_KEYS) views.delete(views.oldest()!)
        v = makeView(window, at)
        views.touch(key, v)
      }
      v.window = Math.max(v.window, window)
      return v
    }
    /** Adds batches of hits to their keys' rows, in one statement. */
    const upsert = (batches: Iterable<readonly [string, Batch]>) =>
      sql`INSERT INTO rate_buckets ${sql.insert([...batches].flatMap(([key, b]) => [...b.hits].map(([second, n]) => ({ bucket_key: key, second, n }))))}
        ON CONFLICT (bucket_key, second) DO UPDATE SET n = rate_buckets.n + excluded.n`

    const writeAndRead = (taken: ReadonlyMap<string, readonly [KeyView, Batch]>, longest: number) =>
      Effect.gen(function*() {
        const second = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        yield* upsert([...taken].map(([key, [, b]]) => [key, b] as const))
        const writtenAt = performance.now()
        for (const [, b] of taken.values()) markWritten(b, writtenAt)
        const readAt = performance.now()
        const rows = yield* keyedBucketRows(sql`
          SELECT bucket_key, second, n FROM rate_buckets WHERE ${sql.in("bucket_key", [...taken.keys()])} AND second > ${second - longest}`)
        const byKey = new Map<string, Array<readonly [number, number]>>()
        for (const r of rows) {
          let l = byKey.get(r.bucketKey)
          if (!l) byKey.set(r.bucketKey, l = [])
          l.push([r.second, r.n])
        }
        for (const [key, [v]] of taken) absorb(v, byKey.get(key) ?? [], second, readAt)
      })

    /** Writes every key's pending hits in one statement and reads their windows back. */
    const flush = Effect.suspend(() => {
      const taken = new Map<string, readonly [KeyView, Batch]>()
      let longest = 0
      for (const [key, v] of views.entries()) {
        const batch = takePending(v)
        if (batch === undefined) continue
        longest = Math.max(longest, v.window)
        taken.set(key, [v, batch])
      }
      if (taken.size === 0) return Effect.void
      return Effect.ensuring(
        writeAndRead(taken, longest),
        Effect.sync(() => taken.forEach(([v, batch]) => settle(v, batch)))
      )
    }).pipe(
      // hits it could not write go uncounted; a database outage is logged once, not every flush
      outage.attempt,
      Effect.catchAllCause((cause) => Effect.logWarning("rate-limit flush failed; hits it could not write go uncounted", cause))
    )
    const tick = Effect.async<void>((resume) => {
      const t = setTimeout(() => resume(Effect.void), SQL_LIMITER_FLUSH_MS)
      return Effect.sync(() => clearTimeout(t))
    })
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(tick, flush)))
    yield* Effect.addFinalizer(() => flush)

    /**
     * The exact path: once the key's writes in flight are acknowledged, this
     * hit and the key's pending ones, with the window read back.
     */
    const exact = (key: string, limit: number, windowSeconds: number, cost: number, second: number) =>
      Effect.suspend(() => {
        const v = views.get(key)
        const unsettled = v === undefined ? [] : [...v.inFlight].filter((b) => b.writtenAt === undefined)
        return Effect.zipRight(
          Effect.forEach(unsettled, (b) => Deferred.await(b.settled), { discard: true }),
          Effect.suspend(() => {
            const v = views.get(key)
            const batch = takePending(v)
            const hit = exactHit(key, limit, windowSeconds, cost, second, batch)
            return batch === undefined ? hit : Effect.ensuring(hit, Effect.sync(() => settle(v!, batch)))
          })
        )
      }).pipe(Effect.orDie)
    const exactHit = (key: string, limit: number, windowSeconds: number, cost: number, second: number, batch: Batch | undefined) =>
      Effect.gen(function*() {
        const since = second - windowSeconds
        if (++calls % 5_000 === 0) {
          yield* Effect.ignore(sql`DELETE FROM rate_buckets WHERE second <= ${second - 3600}`)
        }
        if (batch !== undefined) {
          yield* upsert([[key, batch]])
          markWritten(batch, performance.now())
        }
        const readAt = performance.now()
        // Count first, then add; a compensating decrement undoes an over-limit add from a race.
        const rows = yield* bucketRows(sql`
          WITH up AS (
            INSERT INTO rate_buckets (bucket_key, second, n) VALUES (${key}, ${second}, ${cost})
            ON CONFLICT (bucket_key, second) DO UPDATE SET n = rate_buckets.n + ${cost}
            RETURNING second, n
          )
          SELECT second, n FROM up
          UNION ALL
          SELECT second, n FROM rate_buckets WHERE bucket_key = ${key} AND second > ${since} AND second < ${second}`)
        const v = viewOf(key, windowSeconds, readAt)
        // The read, plus what this instance admitted that the read cannot have seen.
        const unseen = unseenBy(v, readAt)
        const buckets = rows.map((r) => [r.second, r.n] as const)
        const admitted = sumIn(buckets, second, windowSeconds) + sumIn(unseen, second, windowSeconds) <= limit
        const read = admitted ? buckets : buckets.map(([s, n]) => [s, s === second ? n - cost : n] as const)
        if (!admitted) yield* sql`UPDATE rate_buckets SET n = n - ${cost} WHERE bucket_key = ${key} AND second = ${second}`
        absorb(v, read, second, readAt)
        v.allowance = Math.floor(Math.max(0, limit - countView(v, second, v.window).used) * SQL_LIMITER_LOCAL_SHARE)
        return verdictOf(limit, second, combined(read, unseen), admitted, windowSeconds)
      })

    /** A hit decided from this instance's view of the key, or undefined when it must take the exact path (nothing counted). */
    const localHit = (key: string, limit: number, windowSeconds: number, cost: number, second: number): Verdict | undefined => {
      const v = views.get(key)
      if (v === undefined || v.window < windowSeconds || v.allowance < cost || performance.now() - v.syncedAt > SQL_LIMITER_FRESH_MS) {
        return undefined
      }
      // read in place (countView), not through a merged list: this runs on every request
      const count = countView(v, second, windowSeconds)
      const admitted = count.used + cost <= limit
      if (!admitted) return verdictFrom(limit, second, count, false, windowSeconds)
      v.pending.set(second, (v.pending.get(second) ?? 0) + cost)
      v.allowance -= cost
      views.touch(key, v) // recency order, for the cap
      countInto(count, second, cost, second, windowSeconds)
      return verdictFrom(limit, second, count, true, windowSeconds)
    }

    return {
      hit: (key: string, limit: number, windowSeconds: number = WINDOW_SECONDS, cost: number = 1): Effect.Effect<Verdict> =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const second = Math.floor(now / 1000)
          const local = localHit(key, limit, windowSeconds, cost, second)
          return local === undefined ? exact(key, limit, windowSeconds, cost, second) : Effect.succeed(local)
        })
    }
  })
