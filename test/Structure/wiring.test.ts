/**
 * main.ts's wiring builds each service once. Services bring their own
 * dependencies (`Effect.Service` `dependencies`), so one layer is named in
 * several places: Signer by the Attestor, HealthChecks and main.ts, the
 * repositories by their services and the handlers. Layers are memoized by
 * reference within one runtime, so each is built once; a second Signer (other
 * keys in memory), a second Attestor (a second group-commit queue), a second
 * RateLimiter (limits counted apart) or a second ApiKeyRepo (a key cache that
 * misses revocations) would break that quietly. This records every context the
 * server's layers produce while it starts, and requires one instance per service.
 */
import { Context, Duration, Effect, Layer, ManagedRuntime, type Scope } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { ServerLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { Signer } from "../../src/Platform/Signer.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"

/**
 * Tags that a layer decorates on purpose, so two values are seen while building:
 * the metered TSA client and calendar wrap the plain ones, and configured
 * Bitcoin header sources take the place of the simulated chain's.
 */
const DECORATED = ["Platform/TsaClient", "Platform/OtsCalendar", "Platform/BitcoinHeaderSources"]

/** Tags that must hold one instance, checked by name so a renamed tag cannot pass unchecked. */
const SINGLETONS = [
  "Platform/Signer",
  "Platform/KeyCustody",
  "Attestations/Attestor",
  "Attestations/AttestationRepo",
  "Auth/ApiKeyRepo",
  "Auth/Authenticator",
  "Auth/RateLimiter",
  "Auth/PublicLimit",
  "Platform/HealthChecks",
  "Sealing/Sealer",
  "Anchoring/Anchorer",
  "Webhooks/WebhookDispatcher",
  "Platform/MetricsListener"
]

/** The method every layer's build goes through (Effect's MemoMap has it; its type does not show it). */
interface Memoizing {
  getOrElseMemoize(layer: Layer.Layer<any, any, any>, scope: Scope.Scope): Effect.Effect<Context.Context<any>, any, any>
}

/** A MemoMap that records the context every layer produces, through every level of the build. */
const recordingMemoMap = () => {
  const built: Array<Context.Context<never>> = []
  const real = Effect.runSync(Layer.makeMemoMap) as unknown as Memoizing
  const recording: Memoizing = Object.create(real, {
    getOrElseMemoize: {
      value: (layer: Layer.Layer<any, any, any>, scope: Scope.Scope) =>
        // called with `this` = the recording map, so the layers inside are recorded too
        Effect.tap(real.getOrElseMemoize.call(recording, layer, scope), (context) => {
          built.push(context)
        })
    }
  })
  return { memoMap: recording as unknown as Layer.MemoMap, built }
}

/** Each tag seen while building, with how many distinct instances of it were produced. */
const instancesByTag = async <ROut, E>(layer: Layer.Layer<ROut, E, never>) => {
  const { built, memoMap } = recordingMemoMap()
  const runtime = ManagedRuntime.make(layer, memoMap)
  try {
    await runtime.runtime()
  } finally {
    await runtime.dispose()
  }
  const instances = new Map<string, Set<unknown>>()
  for (const context of built) {
    for (const [key, value] of context.unsafeMap) instances.set(key, (instances.get(key) ?? new Set()).add(value))
  }
  return { layers: built.length, counts: new Map([...instances].map(([key, set]) => [key, set.size])) }
}

/** attestd's own tags (libraries' tags, `@effect/...` and `effect/...`, are theirs to share or not). */
const ours = (key: string) => !key.startsWith("@effect/") && !key.startsWith("effect/")

const duplicated = (counts: Map<string, number>) =>
  [...counts].filter(([key, n]) => n > 1 && ours(key) && !DECORATED.includes(key)).map(([key, n]) => `${key} x${n}`).sort()

const databases: Array<TestDatabase> = []
afterAll(async () => {
  for (const db of databases) await db.drop()
})

const serverOn = async (dialect: "sqlite" | "pg") => {
  const db = await createDatabase(dialect)
  databases.push(db)
  const config = AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, port: 0, sealInterval: Duration.hours(24) })
  return ServerLive(config, { workers: false })
}

for (const dialect of await dialects()) {
  describe(`wiring (${dialect})`, () => {
    it("the server's layers build every service once", async () => {
      const { counts, layers } = await instancesByTag(await serverOn(dialect))
      expect(layers).toBeGreaterThan(30)
      expect(SINGLETONS.filter((tag) => counts.get(tag) !== 1)).toEqual([])
      expect(duplicated(counts)).toEqual([])
    })

    it("the check sees a service built twice, even deep inside another layer", async () => {
      // A layer that exports nothing, over a fresh Signer and a fresh Attestor (with its own group-commit queue).
      const hidden = Layer.effectDiscard(Effect.void).pipe(
        Layer.provide(Layer.fresh(Attestor.DefaultWithoutDependencies)),
        Layer.provide(Layer.fresh(Signer.Default))
      )
      const server = await serverOn(dialect)
      const { counts } = await instancesByTag(Layer.merge(server, hidden.pipe(Layer.provide(server))))
      expect(duplicated(counts)).toEqual(["Platform/Signer x2", "Attestations/Attestor x2"].sort())
    })
  })
}
