/**
 * The Authenticator service: key lookup by hash, revocation, environment,
 * IP allowlist, the per-key sliding-window limit, and share tokens.
 */
import { Clock, Effect, Option } from "effect"
import { AuthError, Forbidden, RateLimited } from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { RequestMetas, type RequestMetaShape } from "./RequestMeta.js"
import type { Principal } from "./Api.js"
import { ApiKeyRepo } from "./ApiKeyRepo.js"
import { ipAllowed } from "../Platform/ClientAddress.js"
import { API_KEY_PATTERN, type ApiKey, digestsEqual, hashSecret } from "./Domain.js"
import { RateLimiter, type Verdict } from "./RateLimiter.js"
import { PublicLimit } from "./PublicLimit.js"
import { formatMillis } from "../Domain/Time.js"
import { SHARE_TOKEN_PATTERN, SHARE_TOKEN_RATE_LIMIT } from "./ShareTokenLimits.js"
import { ShareTokenRepo, shareTokenState } from "./ShareTokenRepo.js"

const invalidKey = new AuthError({ message: "invalid or missing API key" })

/** Whether an Authorization header presents a `Bearer` credential. */
export const hasBearer = (authorization: string | undefined): authorization is string =>
  authorization !== undefined && authorization.startsWith("Bearer ")

/** The credential of a `Bearer` Authorization header, or undefined for none or another scheme. */
export const bearerCredential = (authorization: string | undefined): string | undefined =>
  hasBearer(authorization) ? authorization.slice(7).trim() : undefined

/** The password of a `Basic` Authorization header (the user name is ignored), or undefined. */
export const basicPassword = (authorization: string | undefined): string | undefined => {
  if (authorization === undefined || !/^basic /i.test(authorization)) return undefined
  const decoded = Buffer.from(authorization.slice(6).trim(), "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  return colon < 0 ? undefined : decoded.slice(colon + 1).trim()
}

/**
 * The credential an Authorization header presents to a route: its bearer token
 * or, where the route takes HTTP Basic, the Basic password; undefined for none.
 */
export const presentedCredential = (authorization: string | undefined, basic: boolean): string | undefined =>
  bearerCredential(authorization) ?? (basic ? basicPassword(authorization) : undefined)

export class Authenticator extends Effect.Service<Authenticator>()("Auth/Authenticator", {
  effect: Effect.gen(function*() {
    const repo = yield* ApiKeyRepo
    const shareTokens = yield* ShareTokenRepo
    const config = yield* AppConfig
    const limiter = yield* RateLimiter
    const publicLimit = yield* PublicLimit
    const currentRequestMeta = (yield* RequestMetas).current

    /** 403 for a key restricted to another environment or to other addresses, else undefined. */
    const keyRefusal = (key: ApiKey, clientIp: string): Forbidden | undefined => {
      if (key.env !== null && key.env !== config.environment) {
        return new Forbidden({ message: `this key is restricted to the ${key.env} environment; this server is ${config.environment}` })
      }
      if (key.allowIps !== null && key.allowIps.length > 0 && !ipAllowed(key.allowIps, clientIp)) {
        return new Forbidden({ message: `requests from ${clientIp || "this address"} are not allowed for this key` })
      }
      return undefined
    }

    /** Whether a stored key answers the presented secret's hash: found, the same digest, not revoked. */
    const keyMatches = (key: ApiKey | undefined, hash: string): key is ApiKey =>
      key !== undefined && digestsEqual(key.keyHash, hash) && key.revokedAt === null

    /** Resolves a presented API key, or fails with 401; checks env and allowlist (403). */
    const resolveKey = (presented: string): Effect.Effect<ApiKey, AuthError | Forbidden> => {
      if (!API_KEY_PATTERN.test(presented)) return Effect.fail(invalidKey)
      const hash = hashSecret(presented)
      return Effect.flatMap(Effect.orDie(repo.findByHash(hash)), (key): Effect.Effect<ApiKey, AuthError | Forbidden> => {
        if (!keyMatches(key, hash)) return Effect.fail(invalidKey)
        if (key.env === null && (key.allowIps === null || key.allowIps.length === 0)) return Effect.succeed(key)
        return Effect.flatMap(currentRequestMeta, (meta) => {
          const refused = keyRefusal(key, meta.clientIp)
          return refused ? Effect.fail(refused) : Effect.succeed(key)
        })
      })
    }

    /** Keeps a key's rate-limit verdict for the X-RateLimit-* headers; 429 when it refused. */
    const keyVerdictRefusal = (verdict: Verdict, meta: RequestMetaShape): RateLimited | undefined => {
      const info = { limit: verdict.limit, remaining: verdict.remaining, reset: verdict.reset, retryAfter: verdict.retryAfter }
      meta.rateLimit = info
      return verdict.allowed ? undefined : new RateLimited({
        message: `rate limit of ${verdict.limit} requests per minute exceeded`,
        details: { limit: verdict.limit, retry_after: verdict.retryAfter },
        rateLimit: info
      })
    }

    /** Counts the request against the key's per-minute limit (429 when over). */
    const admit = (key: ApiKey): Effect.Effect<void, RateLimited> =>
      Effect.flatMap(limiter.hit(`key:${key.id}`, key.rateLimit ?? config.defaultRateLimit), (verdict) =>
        Effect.flatMap(currentRequestMeta, (meta) => {
          const refused = keyVerdictRefusal(verdict, meta)
          return refused ? Effect.fail(refused) : Effect.void
        }))

    /** A share token: valid (not expired, revoked or exhausted) or 401; 100 requests/minute per token. */
    const resolveShareToken = (presented: string) =>
      Effect.gen(function*() {
        if (!SHARE_TOKEN_PATTERN.test(presented)) return yield* invalidKey
        const hash = hashSecret(presented)
        const token = yield* Effect.orDie(shareTokens.findByHash(hash))
        const now = formatMillis(yield* Clock.currentTimeMillis)
        if (!token || !digestsEqual(token.tokenHash, hash)) return yield* invalidKey
        const state = shareTokenState(token, now)
        if (state !== "active") return yield* new AuthError({ message: `share token is ${state}`, details: { state } })
        const verdict = yield* limiter.hit(`shr:${token.id}`, SHARE_TOKEN_RATE_LIMIT)
        const meta = yield* currentRequestMeta
        meta.rateLimit = verdict
        if (!verdict.allowed) {
          return yield* new RateLimited({
            message: `share token rate limit of ${SHARE_TOKEN_RATE_LIMIT} requests per minute exceeded`,
            rateLimit: verdict
          })
        }
        return token
      })

    const authenticateOnce = (presented: string): Effect.Effect<Principal, AuthError | Forbidden | RateLimited> =>
      presented.startsWith("shr_")
        ? Effect.map(resolveShareToken(presented), (token): Principal => ({ _tag: "ShareToken", token }))
        : Effect.flatMap(resolveKey(presented), (key) =>
          Effect.flatMap(currentRequestMeta, (meta) => {
            if (meta.requestId !== "-") meta.keyId = key.id
            const principal: Principal = { _tag: "ApiKey", key }
            return Effect.as(admit(key), principal)
          }))

    /**
     * A credential that fails (401, or 403 for its environment or address) is counted
     * against the caller's public limit, unless the edge counted the request already:
     * presenting something that looks like a key never bypasses that limit.
     */
    const authenticate = (presented: string) =>
      authenticateOnce(presented).pipe(
        Effect.tapError((e) =>
          e._tag === "AuthError" || e._tag === "Forbidden"
            ? Effect.flatMap(currentRequestMeta, (meta) => meta.publicCharged ? Effect.void : publicLimit.charge(meta))
            : Effect.void
        )
      )

    /**
     * For public endpoints: the caller's key when a valid one is presented, never counted
     * against the key or failed (the request is counted per address by the edge either way).
     */
    const noKey = Effect.succeed(Option.none<ApiKey>())
    /** The key a request presents, if any and valid (public routes: a bad key is no key). */
    const optionalKey = (authorization: string | undefined): Effect.Effect<Option.Option<ApiKey>> => {
      const presented = bearerCredential(authorization)
      return presented === undefined ? noKey : resolveKey(presented).pipe(Effect.option)
    }

    return { authenticate, optionalKey, resolveKey }
  }),
  dependencies: [ApiKeyRepo.Default, ShareTokenRepo.Default]
}) {}
