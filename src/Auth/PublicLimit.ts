/**
 * The public rate limit (ATTESTD_PUBLIC_RATE_LIMIT): requests per minute per
 * client address on public routes — and on keyed routes for requests that do
 * not present valid credentials — with batch verify counted by its hashes.
 * An `Authorization` header never exempts a request by itself: the edge
 * charges every request except those to keyed routes carrying a bearer
 * credential, and the Authenticator charges those whose credential fails.
 */
import { Effect, Option } from "effect"
import { isIP } from "node:net"
import { RateLimited } from "../Domain/Errors.js"
import type { AppConfigShape } from "../Platform/Config.js"
import type { RequestMetaShape } from "../Http/RequestMeta.js"
import type { RateLimiter } from "./RateLimiter.js"

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

/**
 * Counts `cost` against the caller's address when the public limit is on; 429
 * RATE_LIMIT when over. Writes the verdict for the X-RateLimit-* headers and
 * marks the request as charged.
 */
export const chargePublic = (
  config: AppConfigShape,
  limiter: RateLimiter["Type"],
  meta: RequestMetaShape,
  cost: number = 1
): Effect.Effect<void, RateLimited> => {
  if (Option.isNone(config.publicRateLimit) || cost <= 0) return Effect.void
  const limit = config.publicRateLimit.value
  meta.publicCharged = true
  return Effect.flatMap(limiter.hit(publicBucketOf(meta.clientIp), limit, 60, cost), (verdict) => {
    const info = { limit: verdict.limit, remaining: verdict.remaining, reset: verdict.reset, retryAfter: verdict.retryAfter }
    meta.rateLimit = info
    if (verdict.allowed) return Effect.void
    return Effect.fail(
      new RateLimited({
        message: cost > 1
          ? `public rate limit of ${limit} per minute exceeded for this address (batch verify counts each hash)`
          : `public rate limit of ${limit} requests per minute exceeded for this address`,
        details: { limit, retry_after: verdict.retryAfter },
        rateLimit: info
      })
    )
  })
}
