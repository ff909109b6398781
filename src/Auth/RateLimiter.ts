/**
 * Sliding-window request limits: per-second buckets summed over the last 60 s.
 * In memory for a single process (SQLite), in the database for several
 * instances on one Postgres. Only admitted requests are counted.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer } from "effect"
import type { RateLimitInfo } from "../Domain/Errors.js"

export interface Verdict extends RateLimitInfo {
  readonly allowed: boolean
}

const WINDOW_SECONDS = 60

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
  /** Counts one request against `key` unless that would exceed `limit` per window (default one minute). */
  readonly hit: (key: string, limit: number, windowSeconds?: number) => Effect.Effect<Verdict>
}>() {
  static readonly memory = Layer.sync(RateLimiter, () => {
    const state = new Map<string, Map<number, number>>()
    let sweeps = 0
    const sweep = (nowSecond: number) => {
      for (const [k, buckets] of state) {
        for (const s of buckets.keys()) if (s <= nowSecond - 3600) buckets.delete(s)
        if (buckets.size === 0) state.delete(k)
      }
    }
    return {
      hit: (key, limit, windowSeconds = WINDOW_SECONDS) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const second = Math.floor(now / 1000)
          if (++sweeps % 10_000 === 0) sweep(second)
          let buckets = state.get(key)
          if (!buckets) state.set(key, buckets = new Map())
          for (const s of buckets.keys()) if (s <= second - windowSeconds) buckets.delete(s)
          let used = 0
          for (const n of buckets.values()) used += n
          const admitted = used < limit
          if (admitted) buckets.set(second, (buckets.get(second) ?? 0) + 1)
          return verdictOf(limit, second, [...buckets.entries()], admitted, windowSeconds)
        })
    }
  })

  static readonly sql = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      let calls = 0
      return {
        hit: (key, limit, windowSeconds = WINDOW_SECONDS) =>
          Effect.gen(function*() {
            const second = Math.floor((yield* Clock.currentTimeMillis) / 1000)
            const since = second - windowSeconds
            if (++calls % 5_000 === 0) {
              yield* Effect.ignore(sql`DELETE FROM rate_buckets WHERE second <= ${second - 3600}`)
            }
            // Count first, then add; a compensating decrement undoes an over-limit add from a race.
            const rows = yield* sql<{ second: number | string; n: number | string }>`
              WITH up AS (
                INSERT INTO rate_buckets (bucket_key, second, n) VALUES (${key}, ${second}, 1)
                ON CONFLICT (bucket_key, second) DO UPDATE SET n = rate_buckets.n + 1
                RETURNING second, n
              )
              SELECT second, n FROM up
              UNION ALL
              SELECT second, n FROM rate_buckets WHERE bucket_key = ${key} AND second > ${since} AND second < ${second}`
            const buckets = rows.map((r) => [Number(r.second), Number(r.n)] as const)
            const used = buckets.reduce((a, [, n]) => a + n, 0)
            if (used <= limit) return verdictOf(limit, second, buckets, true, windowSeconds)
            yield* sql`UPDATE rate_buckets SET n = n - 1 WHERE bucket_key = ${key} AND second = ${second}`
            const undone = buckets.map(([s, n]) => [s, s === second ? n - 1 : n] as const)
            return verdictOf(limit, second, undone, false, windowSeconds)
          }).pipe(Effect.orDie)
      }
    })
  )
}
