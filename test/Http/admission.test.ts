/**
 * The edge's admission in its two forms (src/Server/Edge.ts): admitRequest, an
 * Effect, and admitRequestNow, the synchronous form the fast lane's verify
 * uses without a fiber. For any sequence of requests, at any times, the
 * synchronous form followed (where it answers UNDECIDED) by the Effect, as the
 * fast lane runs them, refuses what the Effect alone refuses, with the same
 * error, and leaves the same rate-limit verdict on the request's meta. Two
 * limiters: the in-memory one (decides every hit at once) and one that never
 * does (as the Postgres limiter when its view is stale).
 */
import { Effect, Either, Option } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { Principal } from "../../src/Auth/Api.js"
import { Authenticator } from "../../src/Auth/Authenticator.js"
import { type ApiKey, SCOPES } from "../../src/Auth/Domain.js"
import { makeMemoryLimiter, RateLimiter } from "../../src/Auth/RateLimiter.js"
import { RequestMeta, type RequestMetaShape } from "../../src/Auth/RequestMeta.js"
import { AuthError, NotFound } from "../../src/Domain/Errors.js"
import { UNDECIDED } from "../../src/Domain/Undecided.js"
import { type BodyGate, BodyGates } from "../../src/Http/BodyGates.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { admitRequest, admitRequestNow, type EdgeHeaders, requestMetaOf } from "../../src/Server/Edge.js"
import { clockAt } from "../helpers/clock.js"

const config = AppConfig.make({ publicRateLimit: Option.some(4) })

/**
 * Two keys are known (one with every scope, one with metadata:read alone) and decided
 * at once by the synchronous form; every other credential is refused, by the Effect
 * (the synchronous form leaves it UNDECIDED, as the real one does: a refused
 * credential is counted against the public limit there). The real Authenticator's
 * two forms are held equal in test/Auth/authenticateNow.test.ts; here what matters is
 * that both admissions call them at the same step.
 */
const principals: Record<string, Principal> = {
  atk_live_all: { _tag: "ApiKey", key: { id: "key_all", scopes: [...SCOPES] } as unknown as ApiKey },
  atk_live_meta: { _tag: "ApiKey", key: { id: "key_meta", scopes: ["metadata:read"] } as unknown as ApiKey }
}
const authenticator = {
  authenticate: (presented: string) =>
    principals[presented] ? Effect.succeed(principals[presented]) : Effect.fail(new AuthError({ message: "invalid API key" })),
  authenticateNow: (presented: string) => principals[presented] ?? UNDECIDED,
  optionalKey: () => Effect.succeed(Option.none()),
  resolveKey: () => Effect.fail(new AuthError({ message: "invalid API key" }))
} as unknown as Authenticator

const gates: ReadonlyMap<string, BodyGate> = new Map([
  ["derivedListsPublic.match", () => Effect.fail(new NotFound({ message: "no such list" }))]
])

interface Req {
  readonly method: string
  readonly url: string
  readonly headers: EdgeHeaders
  readonly ip: string
  readonly at: number
}

const request: fc.Arbitrary<Omit<Req, "at"> & { readonly gap: number }> = fc.record({
  method: fc.constantFrom("POST", "POST", "GET", "PUT"),
  url: fc.tuple(
    fc.constantFrom("/v1/verify", "/verify", "/v1/verify/batch", "/v1/attest", "/attest", "/v1/nope", "/v1/attestation/att_x/status",
      "/v1/derived-lists/dl_x/match"),
    fc.constantFrom("", "", "?x=1", "?q=%00")
  ).map(([p, q]) => p + q),
  headers: fc.record({
    "content-length": fc.constantFrom(undefined, "0", "80", "5000", "2000000"),
    authorization: fc.constantFrom(undefined, undefined, "Bearer atk_nope", "Basic dXNlcjpwYXNz", "Bearer atk_live_all", "Bearer atk_live_meta")
  }).map((h) => Object.fromEntries(Object.entries(h).filter(([, v]) => v !== undefined)) as EdgeHeaders),
  ip: fc.constantFrom("10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2"),
  gap: fc.constantFrom(0, 0, 100, 1_000, 20_000, 61_000)
})

const requests = fc.array(request, { minLength: 1, maxLength: 40 }).map((rs) => {
  let at = 1_700_000_000_000
  return rs.map(({ gap, ...r }): Req => ({ ...r, at: at += gap }))
})

const admitEffect = (limiter: RateLimiter["Type"], r: Req, meta: RequestMetaShape) =>
  Effect.runSync(admitRequest(config, r.method, r.url, r.headers, meta).pipe(
    Effect.provideService(RateLimiter, limiter),
    Effect.provideService(Authenticator, authenticator),
    Effect.provideService(BodyGates, gates),
    Effect.provideService(RequestMeta, meta),
    Effect.withClock(clockAt(r.at))
  ))

/** What a caller sees of an admission: the refusal, if any, and the verdict kept for the headers. */
const seen = (refused: unknown, meta: RequestMetaShape) => ({
  refused: refused === undefined ? undefined : { tag: (refused as { _tag: string })._tag, message: (refused as Error).message },
  principal: meta.principal?._tag === "ApiKey" ? meta.principal.key.id : undefined,
  rateLimit: meta.rateLimit,
  charged: meta.publicCharged === true
})

describe("admitRequestNow, then admitRequest where it cannot decide, answers as admitRequest", () => {
  for (const kind of ["decides at once", "never decides at once"] as const) {
    it(`with a limiter that ${kind}`, () => {
      const decided = { now: 0, undecided: 0 }
      fc.assert(fc.property(requests, (rs) => {
        const alone = RateLimiter.of({ hit: makeMemoryLimiter().hit })
        const memory = makeMemoryLimiter()
        const both = RateLimiter.of(kind === "decides at once" ? { hit: memory.hit, hitNow: memory.hitNow } : { hit: memory.hit })
        for (const r of rs) {
          const metaA = requestMetaOf(config, r.url, r.ip, r.headers)
          const metaB = { ...metaA }
          const expected = seen(admitEffect(alone, r, metaA), metaA)
          const now = admitRequestNow(config, both, gates, r.method, r.url, r.headers, metaB, r.at, authenticator.authenticateNow)
          decided[now === UNDECIDED ? "undecided" : "now"]++
          const actual = seen(now === UNDECIDED ? admitEffect(both, r, metaB) : now, metaB)
          expect({ request: r, ...actual }).toEqual({ request: r, ...expected })
        }
      }), { numRuns: 200 })
      // both ways were taken, many times (~1,200 requests in all; a limiter that never decides
      // at once leaves every request charged against the public limit to the Effect)
      if (kind === "decides at once") expect(decided.now).toBeGreaterThan(300)
      expect(decided.undecided).toBeGreaterThan(100)
    })
  }

  it("decides a public verify at once with the in-memory limiter, and leaves a keyed or gated route to the Effect", () => {
    const memory = makeMemoryLimiter()
    const limiter = RateLimiter.of({ hit: memory.hit, hitNow: memory.hitNow })
    const at = 1_700_000_000_000
    const now = (method: string, url: string, headers: EdgeHeaders = {}) =>
      admitRequestNow(config, limiter, gates, method, url, headers, requestMetaOf(config, url, "10.0.0.9", headers), at)
    expect(now("POST", "/v1/verify", { "content-length": "80" })).toBeUndefined()
    expect(Either.right(now("POST", "/v1/verify", { "content-length": "2000000" }))).toMatchObject(Either.right({ _tag: "PayloadTooLarge" }))
    expect(now("POST", "/v1/attest", { "content-length": "80" })).toBe(UNDECIDED)
    expect(now("POST", "/v1/derived-lists/dl_x/match", { "content-length": "80" })).toBe(UNDECIDED)
  })
})
