/**
 * Fair delivery (issue 11 §4): one key's endpoints that never answer must not
 * delay another key's deliveries, and a webhook that keeps failing is backed
 * off by its circuit, which still records every attempt's outcome.
 *
 * Service level with the TestClock, as retries.test.ts: the test drives
 * fanOutOnce / sendDueOnce (one pass = one claim of up to SEND_CONCURRENCY
 * deliveries, awaited) and moves the clock over the 10 s attempt timeouts. The
 * bound on the healthy key's delay is counted in passes, never in wall time.
 */
import { layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Fiber, Option } from "effect"
import { expect } from "vitest"
import { formatMillis } from "../../src/Domain/Time.js"
import { WebhookDispatcher } from "../../src/Webhooks/Dispatcher.js"
import {
  CIRCUIT_BASE_MS,
  CIRCUIT_THRESHOLD,
  KEY_IN_FLIGHT,
  WEBHOOK_IN_FLIGHT
} from "../../src/Webhooks/Domain.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { dialects } from "../helpers/databases.js"
import {
  advance,
  attestMany,
  closeOpenDeliveries,
  insertEvent,
  type Key,
  newKey,
  realSleep,
  receiver,
  register as registerWebhook,
  webhookServiceLayer
} from "../helpers/webhookFixtures.js"
import { startBlackHole } from "../helpers/webhookReceiver.js"

const MIN = 60_000
const TIMEOUT = 10_000

const nowMillis = Clock.currentTimeMillis
const blackHole = Effect.acquireRelease(Effect.promise(() => startBlackHole()), (b) => Effect.promise(() => b.close()))

const register = (apiKeyId: string, url: string) => registerWebhook(apiKeyId, url, ["t1_complete"])

/** Attests `n` new hashes for `key`, writes a t1_complete outbox event for each and fans them out. */
const queueEvents = (key: Key, n: number) =>
  Effect.gen(function*() {
    for (const a of yield* attestMany(key, n)) yield* insertEvent(a.seq)
    yield* Effect.flatMap(WebhookDispatcher, (d) => d.fanOutOnce)
  })

const sendDue = Effect.flatMap(WebhookDispatcher, (d) => d.sendDueOnce)

/** One pass, whatever it claimed: the clock moves 10 s at a time until every attempt of the pass ended. */
const drivePass = Effect.gen(function*() {
  const fiber = yield* Effect.fork(sendDue)
  while (true) {
    yield* realSleep(150)
    const done = yield* Fiber.poll(fiber)
    if (Option.isSome(done)) return yield* Fiber.join(fiber)
    yield* advance(TIMEOUT)
  }
})

const queued = (webhookIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: number | string; status: string; attempts: number | string; response_code: number | null; response_excerpt: string | null; next_attempt_at: string }>`
      SELECT id, status, attempts, response_code, response_excerpt, next_attempt_at FROM webhook_deliveries
      WHERE ${sql.in("webhook_id", webhookIds)} ORDER BY id`
  }).pipe(Effect.orDie)

const circuitOf = (id: string) => Effect.orDie(Effect.flatMap(WebhookRepo, (r) => r.circuitOf(id)))

for (const dialect of await dialects()) {
  layer(webhookServiceLayer(dialect), { timeout: Duration.seconds(120) })(`fair webhook delivery (${dialect}, TestClock)`, (it) => {
    it.scoped("a black-hole key with 10 webhooks and 800 queued deliveries: another key's delivery goes out in the first pass; the black hole holds at most its share; its circuits then keep it out", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const hole = yield* blackHole
        const healthy = yield* receiver(() => 200)
        const keyA = yield* newKey
        const hooksA = []
        for (let i = 0; i < 10; i++) hooksA.push(yield* register(keyA.id, `${hole.url}/a${i}`))
        yield* queueEvents(keyA, 80)
        expect(yield* queued(hooksA.map((w) => w.id))).toHaveLength(800)
        const keyB = yield* newKey
        const hookB = yield* register(keyB.id, `${healthy.url}/b`)
        yield* queueEvents(keyB, 1) // queued after all of A's, at the same time

        // pass 1: B is delivered while A's attempts still hang (the clock has not moved, no timeout fired)
        const fiber = yield* Effect.fork(sendDue)
        yield* Effect.promise(() => healthy.waitForRequests(1, 15_000))
        yield* Effect.promise(() => hole.waitForAccepted(KEY_IN_FLIGHT))
        yield* realSleep(300)
        expect(hole.accepted()).toBe(KEY_IN_FLIGHT) // A's share, not all 16 slots
        expect(hole.closedByClient()).toBe(0)
        yield* advance(TIMEOUT)
        expect(yield* Fiber.join(fiber)).toBe(KEY_IN_FLIGHT + 1)
        expect((yield* queued([hookB.id]))[0]).toMatchObject({ status: "succeeded", attempts: 1 })

        // A's webhooks keep timing out; each circuit opens after CIRCUIT_THRESHOLD failures in a row
        let passes = 1
        while ((yield* drivePass) > 0) {
          passes++
          expect(passes).toBeLessThanOrEqual(Math.ceil((10 * CIRCUIT_THRESHOLD) / KEY_IN_FLIGHT) + 2)
        }
        const now = formatMillis(yield* nowMillis)
        for (const w of hooksA) {
          const c = (yield* circuitOf(w.id))!
          expect(c.consecutiveFailures).toBeGreaterThanOrEqual(CIRCUIT_THRESHOLD)
          expect(c.openUntil! > now).toBe(true)
        }
        // nothing of A was dropped; every attempt made is recorded as a timed-out attempt
        const rowsA = yield* queued(hooksA.map((w) => w.id))
        expect(rowsA).toHaveLength(800)
        expect(rowsA.every((d) => d.status === "pending" || d.status === "retrying")).toBe(true)
        const attempted = rowsA.filter((d) => Number(d.attempts) > 0)
        expect(attempted.reduce((n, d) => n + Number(d.attempts), 0)).toBe(hole.accepted())
        expect(attempted.every((d) => d.status === "retrying" && d.response_code === null && /timed out/.test(d.response_excerpt ?? ""))).toBe(true)

        // with A's circuits open, B's next delivery is the only thing a pass sends
        yield* queueEvents(keyB, 1)
        const before = hole.accepted()
        expect(yield* sendDue).toBe(1)
        yield* Effect.promise(() => healthy.waitForRequests(2, 5000))
        expect(hole.accepted()).toBe(before)
      }))

    it.scoped("concurrent claims (as from several instances) never exceed a webhook's cap nor claim one delivery twice", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const key = yield* newKey
        const w = yield* register(key.id, "http://127.0.0.1:9/never-sent")
        yield* queueEvents(key, 100)
        const repo = yield* WebhookRepo
        const t = yield* nowMillis
        const claims = yield* Effect.all(
          Array.from({ length: 6 }, () => Effect.orDie(repo.claimDue(formatMillis(t), formatMillis(t + MIN), 64))),
          { concurrency: "unbounded" }
        )
        const ids = claims.flat().map((d) => d.id)
        expect(ids.length).toBeGreaterThan(0)
        expect(ids.length).toBeLessThanOrEqual(WEBHOOK_IN_FLIGHT)
        expect(new Set(ids).size).toBe(ids.length)
        expect(claims.flat().every((d) => d.webhookId === w.id)).toBe(true)
        // the leases free the webhook again once they lapse
        const later = yield* Effect.orDie(repo.claimDue(formatMillis(t + MIN), formatMillis(t + 2 * MIN), 64))
        expect(later).toHaveLength(WEBHOOK_IN_FLIGHT)
      }))

    it.scoped("the circuit: opens after repeated timeouts, delays (never drops or charges) queued deliveries, probes one at a time with a growing period, closes on success", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => "hang")
        const key = yield* newKey
        const w = yield* register(key.id, r.url)
        yield* queueEvents(key, CIRCUIT_THRESHOLD - 1)
        const t0 = yield* nowMillis
        const pass = (expected: number) =>
          Effect.gen(function*() {
            const seen = r.requests.length
            const fiber = yield* Effect.fork(sendDue)
            yield* Effect.promise(() => r.waitForRequests(seen + expected, 10_000))
            yield* realSleep(150)
            expect(r.requests.length).toBe(seen + expected) // at most WEBHOOK_IN_FLIGHT, or 1 when half-open
            yield* advance(TIMEOUT)
            expect(yield* Fiber.join(fiber)).toBe(expected)
          })

        // 4 failures in a row: still closed
        yield* pass(CIRCUIT_THRESHOLD - 1)
        expect(yield* circuitOf(w.id)).toMatchObject({ consecutiveFailures: CIRCUIT_THRESHOLD - 1, opens: 0, openUntil: null })
        // 36 more queued: the next pass sends WEBHOOK_IN_FLIGHT of them; the 5th failure in a row opens it at t0 + 20 s
        yield* queueEvents(key, 36)
        yield* pass(WEBHOOK_IN_FLIGHT)
        const attempted = CIRCUIT_THRESHOLD - 1 + WEBHOOK_IN_FLIGHT
        const openUntil = formatMillis(t0 + 2 * TIMEOUT + CIRCUIT_BASE_MS)
        expect(yield* circuitOf(w.id)).toMatchObject({ consecutiveFailures: attempted, opens: 1, openUntil })
        let rows = yield* queued([w.id])
        expect(rows).toHaveLength(40)
        expect(rows.filter((d) => Number(d.attempts) === 1 && d.status === "retrying" && d.response_code === null)).toHaveLength(attempted)
        expect(rows.filter((d) => Number(d.attempts) === 0 && d.status === "pending")).toHaveLength(40 - attempted)
        expect(rows.every((d) => d.next_attempt_at >= openUntil)).toBe(true) // delayed, and the record says until when
        expect(rows.filter((d) => d.next_attempt_at === openUntil)).toHaveLength(40 - attempted)

        // open: nothing goes out, however often the dispatcher asks
        expect(yield* sendDue).toBe(0)
        yield* advance(CIRCUIT_BASE_MS - 1)
        expect(yield* sendDue).toBe(0)
        expect(r.requests).toHaveLength(attempted)

        // half-open: one probe; it times out, so the circuit opens again for twice as long
        yield* advance(1)
        yield* pass(1)
        const reopened = formatMillis(t0 + 2 * TIMEOUT + CIRCUIT_BASE_MS + TIMEOUT + 2 * CIRCUIT_BASE_MS)
        expect(yield* circuitOf(w.id)).toMatchObject({ consecutiveFailures: attempted + 1, opens: 2, openUntil: reopened })
        expect(yield* sendDue).toBe(0)

        // the endpoint recovers: the next probe succeeds and closes the circuit; the backlog drains fairly
        r.setAnswer(() => 200)
        yield* advance(2 * CIRCUIT_BASE_MS)
        expect(yield* sendDue).toBe(1)
        expect(yield* circuitOf(w.id)).toMatchObject({ consecutiveFailures: 0, opens: 0, openUntil: null })
        for (let i = 0; i < 10 && r.requests.length < attempted + 1 + 40; i++) {
          expect(yield* sendDue).toBeLessThanOrEqual(WEBHOOK_IN_FLIGHT)
        }
        rows = yield* queued([w.id])
        expect(rows.every((d) => d.status === "succeeded" && d.response_code === 200)).toBe(true)
        // every request the endpoint saw is an attempt on record, none beyond the retry policy
        expect(rows.reduce((n, d) => n + Number(d.attempts), 0)).toBe(r.requests.length)
        expect(rows.every((d) => Number(d.attempts) <= 4)).toBe(true)
        expect((yield* Effect.orDie(Effect.flatMap(WebhookRepo, (repo) => repo.listOwned(key.id))))[0]!.failureCount).toBe(0)
        expect((yield* nowMillis) - t0).toBeLessThan(5 * MIN)
      }))

    it.scoped("the dispatcher's own loop claims a backlog again as attempts end, without waiting for the clock (a webhook is not held to WEBHOOK_IN_FLIGHT per claim gap)", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => 200)
        const key = yield* newKey
        const w = yield* register(key.id, r.url)
        const backlog = 3 * WEBHOOK_IN_FLIGHT
        yield* queueEvents(key, backlog)
        // the TestClock never moves: claiming again may wait for attempts to end, not for time to pass
        const loop = yield* Effect.fork(Effect.flatMap(WebhookDispatcher, (d) => d.run))
        yield* Effect.promise(() => r.waitForRequests(backlog, 30_000))
        let rows = yield* queued([w.id])
        for (let i = 0; i < 100 && !rows.every((d) => d.status === "succeeded"); i++) {
          yield* realSleep(50)
          rows = yield* queued([w.id])
        }
        yield* Fiber.interrupt(loop)
        expect(rows).toHaveLength(backlog)
        expect(rows.every((d) => d.status === "succeeded" && Number(d.attempts) === 1)).toBe(true)
        expect(r.requests).toHaveLength(backlog) // each delivered once
      }))

    it.scoped("claimDue ranks only a webhook's first due deliveries, but first among those it may send: a deleted webhook's retry behind 20 unattempted deliveries is still claimed", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const key = yield* newKey
        const w = yield* register(key.id, "http://127.0.0.1:9/deleted")
        yield* queueEvents(key, WEBHOOK_IN_FLIGHT + 5)
        const repo = yield* WebhookRepo
        const sql = yield* SqlClient.SqlClient
        const t = yield* nowMillis
        const rows = yield* queued([w.id])
        const retry = rows[rows.length - 1]!
        // the newest delivery was attempted once and is due again last; the webhook is then deleted
        yield* Effect.orDie(sql`UPDATE webhook_deliveries SET attempts = 1, status = 'retrying' WHERE id = ${retry.id}`)
        yield* Effect.orDie(sql`UPDATE webhooks SET deleted_at = ${formatMillis(t)} WHERE id = ${w.id}`)
        const claimed = yield* Effect.orDie(repo.claimDue(formatMillis(t), formatMillis(t + MIN), 64))
        expect(claimed.map((d) => d.id)).toEqual([Number(retry.id)])
      }))

    it.scoped("attempts recorded in one transaction count one by one: the circuit opens at the CIRCUIT_THRESHOLD-th failure in a row, once, and a success of another webhook in the same group closes only its own", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const key = yield* newKey
        const failing = yield* register(key.id, "http://127.0.0.1:9/failing")
        const healthy = yield* register(key.id, "http://127.0.0.1:9/healthy")
        yield* queueEvents(key, CIRCUIT_THRESHOLD + 1)
        const repo = yield* WebhookRepo
        const sql = yield* SqlClient.SqlClient
        yield* Effect.orDie(sql`UPDATE webhooks SET consecutive_failures = 3 WHERE id = ${healthy.id}`)
        const t = yield* nowMillis
        const now = formatMillis(t)
        const claimed = yield* Effect.orDie(repo.claimDue(now, formatMillis(t + MIN), 64))
        const outcome = (status: "retrying" | "succeeded") => ({
          status,
          responseCode: status === "succeeded" ? 200 : 500,
          excerpt: null,
          now,
          nowMillis: t,
          nextAttemptAt: formatMillis(t + MIN)
        })
        const failures = claimed.filter((d) => d.webhookId === failing.id).slice(0, CIRCUIT_THRESHOLD)
        const success = claimed.find((d) => d.webhookId === healthy.id)!
        expect(failures).toHaveLength(CIRCUIT_THRESHOLD)
        const unattempted = claimed.find((d) => d.webhookId === failing.id && !failures.includes(d))!
        yield* Effect.orDie(sql`UPDATE webhook_deliveries SET claimed_until = NULL WHERE id = ${unattempted.id}`) // its lease lapsed
        // given out of order, as attempts end
        yield* Effect.orDie(repo.recordAttempts([
          { delivery: success, outcome: outcome("succeeded") },
          ...failures.toReversed().map((delivery) => ({ delivery, outcome: outcome("retrying") }))
        ]))
        expect(yield* circuitOf(failing.id)).toMatchObject({
          consecutiveFailures: CIRCUIT_THRESHOLD,
          opens: 1,
          openUntil: formatMillis(t + CIRCUIT_BASE_MS)
        })
        expect(yield* circuitOf(healthy.id)).toMatchObject({ consecutiveFailures: 0, opens: 0, openUntil: null })
        const rows = yield* queued([failing.id, healthy.id])
        const byId = new Map(rows.map((d) => [Number(d.id), d]))
        for (const d of failures) expect(byId.get(d.id)).toMatchObject({ status: "retrying", response_code: 500 })
        expect(byId.get(success.id)).toMatchObject({ status: "succeeded", response_code: 200 })
        expect(rows.filter((d) => Number(d.attempts) === 1)).toHaveLength(CIRCUIT_THRESHOLD + 1)
        // the failing webhook's one unattempted delivery waits for the circuit, and says until when
        expect(byId.get(unattempted.id)).toMatchObject({ status: "pending", next_attempt_at: formatMillis(t + CIRCUIT_BASE_MS) })
        expect(Number(byId.get(unattempted.id)!.attempts)).toBe(0)
      }))
  })
}
