/**
 * The public rate limit (ATTESTD_PUBLIC_RATE_LIMIT): requests per minute per
 * client address on public routes — and on keyed routes for requests that do
 * not present valid credentials — with batch verify counted by its hashes.
 * An `Authorization` header never exempts a request by itself: the edge
 * charges every request except those to keyed routes carrying a bearer
 * credential, and the Authenticator charges those whose credential fails.
 */
import { Clock, Effect, Option } from "effect"
import { isIP } from "node:net"
import { RateLimited } from "../Domain/Errors.js"
import { AppConfig, type AppConfigShape } from "../Platform/Config.js"
import type { RequestMetaShape } from "./RequestMeta.js"
import { RateLimiter, type Verdict, WINDOW_SECONDS } from "./RateLimiter.js"

/** The first four groups of an IPv6 address, or undefined when it is not one. */
const ipv6Prefix64 = (ip: string): string | undefined => {
  if (isIP(ip) !== 6) return undefined
  const [head = "", tail] = ip.split("::")
  const h = head === "" ? [] : head.split(":")
  const t = tail === undefined || tail === "" ? [] : tail.split(":")
  // An embedded IPv4 address fills the last two groups.
  const width = (parts: Array<string>) => parts.reduce((n, p) => n + (p.includes(".") ? 2 : 1), 0)
  const groups = tail === undefined ? h : [...h, ...Array<string>(Math.max(0, 8 - width(h) - width(t))).fill("0"), ...t]
  return groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(":")
}

/**
 * The bucket of a client address: the address itself for IPv4, its /64 for IPv6
 * (one subscriber usually holds a whole /64, so single IPv6 addresses are free to rotate).
 */
export const publicBucketOf = (ip: string): string => {
  const prefix = ipv6Prefix64(ip)
  return prefix === undefined ? `ip:${ip}` : `ip6:${prefix}::/64`
}

/** The most addresses remembered as refused (per limit, that is per server). */
const BLOCKED_MAX = 10_000

const refusal = (limit: number, cost: number, info: { limit: number; remaining: number; reset: number; retryAfter: number }) =>
  new RateLimited({
    message: cost > 1
      ? `public rate limit of ${limit} per minute exceeded for this address (batch verify counts each hash)`
      : `public rate limit of ${limit} requests per minute exceeded for this address`,
    details: { limit, retry_after: info.retryAfter },
    rateLimit: info
  })

export interface PublicLimitShape {
  /**
   * Counts `cost` (default 1) against the caller's address when the public limit
   * is on; 429 RATE_LIMIT when over. Writes the verdict for the X-RateLimit-*
   * headers and marks the request as charged.
   */
  readonly charge: (meta: RequestMetaShape, cost?: number) => Effect.Effect<void, RateLimited>
}

/** The public limit of `config` over `limiter`. */
export const makePublicLimit = (config: AppConfigShape, limiter: RateLimiter["Type"]): PublicLimitShape => {
  /**
   * Addresses whose window is full, until the second it frees a request: while
   * there, a request is refused without asking the store (no SQL round trips on
   * Postgres for a flood of refused requests). Exact for a sliding window: with
   * nothing left, no request fits before the reset.
   */
  const blocked = new Map<string, number>()

  /** The refusal while `bucket` is remembered as full at `second`, else undefined (forgetting it once it frees a request). */
  const blockedRefusal = (bucket: string, limit: number, cost: number, second: number, meta: RequestMetaShape): RateLimited | undefined => {
    const until = blocked.get(bucket)
    if (until === undefined) return undefined
    if (second < until) {
      const info = { limit, remaining: 0, reset: until, retryAfter: until - second }
      meta.rateLimit = info
      return refusal(limit, cost, info)
    }
    blocked.delete(bucket)
    return undefined
  }

  /** Keeps a verdict for the X-RateLimit-* headers and remembers a full window; the refusal when it refused. */
  const verdictRefusal = (
    bucket: string,
    limit: number,
    cost: number,
    second: number,
    meta: RequestMetaShape,
    verdict: Verdict
  ): RateLimited | undefined => {
    const info = { limit: verdict.limit, remaining: verdict.remaining, reset: verdict.reset, retryAfter: verdict.retryAfter }
    meta.rateLimit = info
    if (verdict.allowed) return undefined
    if (verdict.remaining === 0 && verdict.reset > second) {
      if (blocked.size >= BLOCKED_MAX) blocked.delete(blocked.keys().next().value!)
      blocked.set(bucket, verdict.reset)
    }
    return refusal(limit, cost, info)
  }

  return {
    charge: (meta, cost = 1) => {
      if (Option.isNone(config.publicRateLimit) || cost <= 0) return Effect.void
      const limit = config.publicRateLimit.value
      const bucket = publicBucketOf(meta.clientIp)
      meta.publicCharged = true
      return Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const second = Math.floor(now / 1000)
        const refused = blockedRefusal(bucket, limit, cost, second, meta)
        if (refused) return Effect.fail(refused)
        return Effect.flatMap(limiter.hit(bucket, limit, WINDOW_SECONDS, cost), (verdict) => {
          const over = verdictRefusal(bucket, limit, cost, second, meta, verdict)
          return over ? Effect.fail(over) : Effect.void
        })
      })
    }
  }
}

/** The server's public limit: one per server, so every route and the edge share its memory of full windows. */
export class PublicLimit extends Effect.Service<PublicLimit>()("Auth/PublicLimit", {
  effect: Effect.gen(function*() {
    return makePublicLimit(yield* AppConfig, yield* RateLimiter)
  })
}) {}
