/**
 * Two dispatchers on one Postgres database (as two instances behind a load
 * balancer), each running its own loop (WebhookDispatcher.run) with the live
 * clock. Attempts that end together are recorded in one transaction, up to two
 * such transactions at once per instance; they must still count one by one and
 * never send a leased delivery twice:
 * - a healthy webhook's backlog is delivered exactly once per delivery;
 * - a webhook answering 500 sees each of its attempts recorded, and its
 *   circuit's count of failures in a row equals the attempts it received.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Fiber, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AppLive } from "../../src/main.js"
import { AppConfig, type AppConfigShape } from "../../src/Platform/Config.js"
import { WebhookDispatcher } from "../../src/Webhooks/Dispatcher.js"
import { CIRCUIT_THRESHOLD, DELIVERY_HISTORY } from "../../src/Webhooks/Domain.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"
import { attestMany, insertEvent, newKey, register } from "../helpers/webhookFixtures.js"
import { sleep } from "../helpers/process.js"
import { type Receiver, startReceiver } from "../helpers/webhookReceiver.js"

const BACKLOG = DELIVERY_HISTORY + 20 // the history of finished deliveries is trimmed to DELIVERY_HISTORY as well

describe.runIf(await postgresAvailable())("webhook delivery from two instances on one Postgres database", () => {
  let db: TestDatabase
  const instance = (config: AppConfigShape) => ManagedRuntime.make(AppLive(config, { workers: false }))
  let one: ReturnType<typeof instance>
  let two: ReturnType<typeof instance>
  let healthy: Receiver
  let failing: Receiver

  beforeAll(async () => {
    db = await createPgDatabase()
    const config = AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir })
    one = instance(config)
    two = instance(config)
    healthy = await startReceiver({ answer: () => 200 })
    failing = await startReceiver({ answer: () => 500 })
  })
  afterAll(async () => {
    await one?.dispose()
    await two?.dispose()
    await healthy?.close()
    await failing?.close()
    await db?.drop()
  })

  it("deliver a healthy webhook's backlog once each, and count a failing webhook's attempts one by one", { timeout: 60_000 }, async () => {
    const setup = Effect.gen(function*() {
      const key = yield* newKey
      const hooks = [yield* register(key.id, healthy.url, ["t1_complete"]), yield* register(key.id, failing.url, ["t1_complete"])]
      for (const a of yield* attestMany(key, BACKLOG)) yield* insertEvent(a.seq)
      return hooks.map((w) => w.id)
    })
    const [healthyId, failingId] = await one.runPromise(setup)

    const loops = [one.runFork(Effect.flatMap(WebhookDispatcher, (d) => d.run)), two.runFork(Effect.flatMap(WebhookDispatcher, (d) => d.run))]
    const state = () =>
      one.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ webhook_id: string; status: string; attempts: number | string; claimed: number | string; n: number | string }>`
          SELECT webhook_id, status, attempts, COUNT(claimed_until) AS claimed, COUNT(*) AS n FROM webhook_deliveries
          GROUP BY webhook_id, status, attempts`).pipe(Effect.orDie))
    let rows = await state()
    const settled = (rs: typeof rows) =>
      healthy.requests.length >= BACKLOG && rs.every((r) => (r.webhook_id === healthyId ? r.status === "succeeded" : true) && Number(r.claimed) === 0)
    for (let i = 0; i < 300 && !settled(rows); i++) {
      await sleep(100)
      rows = await state()
    }
    await one.runPromise(Fiber.interruptAll(loops))

    // the healthy webhook: every delivery once, to the endpoint and on record (the newest DELIVERY_HISTORY kept)
    expect(rows.filter((r) => r.webhook_id === healthyId).map((r) => [r.status, Number(r.attempts), Number(r.n)])).toEqual([
      ["succeeded", 1, DELIVERY_HISTORY]
    ])
    expect(healthy.requests).toHaveLength(BACKLOG)
    expect(new Set(healthy.requests.map((r) => r.headers["x-service-delivery"])).size).toBe(BACKLOG)

    // the failing webhook: its circuit opened; every attempt it received is on record and counted
    const attemptedFailing = rows
      .filter((r) => r.webhook_id === failingId && Number(r.attempts) > 0)
      .reduce((n, r) => n + Number(r.n) * Number(r.attempts), 0)
    expect(attemptedFailing).toBe(failing.requests.length)
    expect(attemptedFailing).toBeGreaterThanOrEqual(CIRCUIT_THRESHOLD)
    const circuit = await one.runPromise(Effect.flatMap(WebhookRepo, (r) => r.circuitOf(failingId!)).pipe(Effect.orDie))
    expect(circuit).toMatchObject({ consecutiveFailures: attemptedFailing, opens: 1 })
    expect(rows.filter((r) => r.webhook_id === failingId).reduce((n, r) => n + Number(r.n), 0)).toBe(BACKLOG)
  })
})
