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
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer } from "effect"
import type { RateLimitInfo } from "../Domain/Errors.js"

export interface Verdict extends RateLimitInfo {
  readonly allowed: boolean
}

const WINDOW_SECONDS = 60

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
  // Map order is recency order: a hit moves its key to the end.
  const state = new Map<string, Window>()
  let hits = 0
  const lastSecond = (w: Window) => w.buckets.length === 0 ? -Infinity : w.buckets[w.buckets.length - 2]!
  /** Drops expired windows from the least recently used end, up to the first key used in the last minute. */
  const sweep = (nowSecond: number) => {
    for (const [k, w] of state) {
      const last = lastSecond(w)
      if (last <= nowSecond - w.window) state.delete(k)
      else if (last > nowSecond - WINDOW_SECONDS) break
    }
  }
  const hitAt = (key: string, limit: number, second: number, windowSeconds: number, cost: number): Verdict => {
    if (++hits % 1_000 === 0) sweep(second)
    let w = state.get(key)
    if (w) state.delete(key)
    else {
      if (state.size >= maxKeys) sweep(second)
      while (state.size >= maxKeys) state.delete(state.keys().next().value!)
      w = { window: windowSeconds, buckets: [] }
    }
    state.set(key, w)
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
    const pairs: Array<readonly [number, number]> = []
    for (let i = 0; i < w.buckets.length; i += 2) pairs.push([w.buckets[i]!, w.buckets[i + 1]!])
    return verdictOf(limit, second, pairs, admitted, windowSeconds)
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
  const inWindow = buckets.filter(([s]) => s > nowSecond - windowSeconds && s <= nowSecond)
  const used = inWindow.reduce((acc, [, n]) => acc + n, 0)
  const oldest = inWindow.reduce((acc, [s, n]) => (n > 0 && s < acc ? s : acc), nowSecond)
  const reset = oldest + windowSeconds
  return {
    allowed: admitted,
    limit,
    remaining: Math.max(0, limit - used),
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

  static readonly sql = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      let calls = 0
      return {
        hit: (key, limit, windowSeconds = WINDOW_SECONDS, cost = 1) =>
          Effect.gen(function*() {
            const second = Math.floor((yield* Clock.currentTimeMillis) / 1000)
            const since = second - windowSeconds
            if (++calls % 5_000 === 0) {
              yield* Effect.ignore(sql`DELETE FROM rate_buckets WHERE second <= ${second - 3600}`)
            }
            // Count first, then add; a compensating decrement undoes an over-limit add from a race.
            const rows = yield* sql<{ second: number | string; n: number | string }>`
              WITH up AS (
                INSERT INTO rate_buckets (bucket_key, second, n) VALUES (${key}, ${second}, ${cost})
                ON CONFLICT (bucket_key, second) DO UPDATE SET n = rate_buckets.n + ${cost}
                RETURNING second, n
              )
              SELECT second, n FROM up
              UNION ALL
              SELECT second, n FROM rate_buckets WHERE bucket_key = ${key} AND second > ${since} AND second < ${second}`
            const buckets = rows.map((r) => [Number(r.second), Number(r.n)] as const)
            const used = buckets.reduce((a, [, n]) => a + n, 0)
            if (used <= limit) return verdictOf(limit, second, buckets, true, windowSeconds)
            yield* sql`UPDATE rate_buckets SET n = n - ${cost} WHERE bucket_key = ${key} AND second = ${second}`
            const undone = buckets.map(([s, n]) => [s, s === second ? n - cost : n] as const)
            return verdictOf(limit, second, undone, false, windowSeconds)
          }).pipe(Effect.orDie)
      }
    })
  )
}
