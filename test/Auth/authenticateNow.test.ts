/**
 * The Authenticator's two forms (src/Auth/Authenticator.ts): `authenticate`, an
 * Effect, and `authenticateNow`, the synchronous form the fast lane's attest uses
 * without a fiber. Two instances on one SQLite file, each with its own key cache
 * and limiter, get the same generated sequence of credentials, client addresses,
 * times and revocations: one through `authenticate` alone, the other through
 * `authenticateNow`, then `authenticate` where it answered UNDECIDED (as the fast
 * lane does). Each request must get the same principal or error, and leave the
 * same rate-limit verdict, key id and public charge on its meta; and the public
 * routes' `optionalKey` must give the same key as `optionalKeyNow`, then
 * `optionalKey` where that cannot decide.
 */
import { Effect, Layer, ManagedRuntime, Option } from "effect"
import fc from "fast-check"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { Authenticator } from "../../src/Auth/Authenticator.js"
import { KeyCacheLive } from "../../src/Auth/KeyCache.js"
import { RateLimiter } from "../../src/Auth/RateLimiter.js"
import { RequestMeta, type RequestMetaShape } from "../../src/Auth/RequestMeta.js"
import { UNDECIDED } from "../../src/Domain/Undecided.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { DatabaseLive } from "../../src/main.js"
import { clockAt } from "../helpers/clock.js"

const dir = mkdtempSync(join(tmpdir(), "attestd-authnow-"))
const url = `sqlite:${join(dir, "attestd.db")}`
const config = AppConfig.make({ databaseUrl: url, environment: "production", defaultRateLimit: 6, publicRateLimit: Option.some(4) })

const instance = () =>
  ManagedRuntime.make(
    Authenticator.Default.pipe(
      Layer.provideMerge(ApiKeyRepo.Default),
      Layer.provideMerge(KeyCacheLive(url, false)),
      Layer.provideMerge(RateLimiter.memory),
      Layer.provideMerge(DatabaseLive({ databaseUrl: url })),
      Layer.provideMerge(Layer.succeed(AppConfig, config))
    )
  )

/** The next turn of the event loop: the SQLite key cache checks its marker once per turn, as requests arrive in turns. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

let a: ReturnType<typeof instance>
let b: ReturnType<typeof instance>
const secrets: Array<string> = []
const ids: Array<string> = []

beforeAll(async () => {
  a = instance()
  b = instance()
  await a.runPromise(Effect.flatMap(ApiKeyRepo, (repo) =>
    Effect.forEach([
      { label: "plain" },
      { label: "limited", rateLimit: 2 },
      { label: "test env", env: "test" as const },
      { label: "one network", allowIps: ["10.9.9.0/24"] },
      { label: "to revoke" }
    ], (k) =>
      Effect.map(
        repo.create({ scopes: ["attest"], orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null, ...k }),
        (created) => {
          secrets.push(created.secret)
          ids.push(created.id)
        }
      ))))
  await b.runPromise(Effect.void)
}, 30_000)

afterAll(async () => {
  await a?.dispose()
  await b?.dispose()
  rmSync(dir, { recursive: true, force: true })
})

// the keys, one well-formed but unknown, a share token's shape, and two that cannot be keys
const credentials = (): ReadonlyArray<string> => [...secrets, "atk_live_" + "A".repeat(32), "shr_" + "B".repeat(40), "nonsense", "atk_0000"]

const steps = fc.array(
  fc.oneof(
    { weight: 12, arbitrary: fc.record({
      _tag: fc.constant("request" as const),
      credential: fc.integer({ min: 0, max: 8 }),
      ip: fc.constantFrom("10.9.9.7", "10.1.1.1", "2001:db8::5"),
      gap: fc.constantFrom(0, 0, 200, 5_000, 61_000)
    }) },
    { weight: 1, arbitrary: fc.constant({ _tag: "revoke" as const }) }
  ),
  { minLength: 1, maxLength: 16 }
)

const metaOf = (ip: string): RequestMetaShape => ({ requestId: "r", clientIp: ip, path: "/attest", rateLimit: undefined })

/** What a caller sees: the key's id or the error, and what the meta kept. */
const seen = (outcome: unknown, meta: RequestMetaShape) => ({
  outcome: typeof outcome === "object" && outcome !== null && "_tag" in outcome
    ? outcome._tag === "ApiKey"
      ? `key ${(outcome as unknown as { key: { id: string } }).key.id}`
      : `${String(outcome._tag)}: ${(outcome as unknown as Error).message}`
    : String(outcome),
  rateLimit: meta.rateLimit,
  keyId: meta.keyId,
  charged: meta.publicCharged === true
})

const viaEffect = (runtime: typeof a, presented: string, meta: RequestMetaShape, at: number) =>
  runtime.runPromise(Effect.flatMap(Authenticator, (auth) => auth.authenticate(presented)).pipe(
    Effect.merge,
    Effect.provideService(RequestMeta, meta),
    Effect.withClock(clockAt(at))
  ))

describe("authenticateNow, then authenticate where it cannot decide, answers as authenticate", () => {
  it("over generated sequences of credentials, addresses, times and a revocation", async () => {
    let at = 1_700_000_000_000
    let revoked = false
    const decided = { now: 0, undecided: 0 }
    const authB = await b.runPromise(Authenticator)
    await fc.assert(fc.asyncProperty(steps, async (ss) => {
      for (const step of ss) {
        await nextTurn()
        if (step._tag === "revoke") {
          if (!revoked) await a.runPromise(Effect.flatMap(ApiKeyRepo, (repo) => repo.revoke(ids[4]!)))
          revoked = true
          continue
        }
        at += step.gap
        const presented = credentials()[step.credential]!
        const metaA = metaOf(step.ip)
        const metaB = metaOf(step.ip)
        const expected = seen(await viaEffect(a, presented, metaA, at), metaA)
        const now = authB.authenticateNow(presented, metaB, at)
        decided[now === UNDECIDED ? "undecided" : "now"]++
        const actual = seen(now === UNDECIDED ? await viaEffect(b, presented, metaB, at) : now, metaB)
        expect({ presented: presented.slice(0, 12), ...actual }).toEqual({ presented: presented.slice(0, 12), ...expected })
        // the public routes' form: optionalKey, and optionalKeyNow then optionalKey
        const authorization = `Bearer ${presented}`
        const optionalA = await a.runPromise(Effect.flatMap(Authenticator, (auth) => auth.optionalKey(authorization)).pipe(
          Effect.provideService(RequestMeta, metaOf(step.ip))
        ))
        const optionalNow = authB.optionalKeyNow(authorization, step.ip)
        decided[optionalNow === UNDECIDED ? "undecided" : "now"]++
        const optionalB = optionalNow !== UNDECIDED ? optionalNow : await b.runPromise(
          Effect.flatMap(Authenticator, (auth) => auth.optionalKey(authorization)).pipe(Effect.provideService(RequestMeta, metaOf(step.ip)))
        )
        expect({ presented: presented.slice(0, 12), key: Option.map(optionalB, (k) => k.id) })
          .toEqual({ presented: presented.slice(0, 12), key: Option.map(optionalA, (k) => k.id) })
      }
    }), { numRuns: 40 })
    // both ways were taken: the cached keys at once, the rest (and first uses) through the Effect
    expect(decided.now).toBeGreaterThan(30)
    expect(decided.undecided).toBeGreaterThan(30)
  }, 60_000)
})
