/**
 * The webhook dispatcher at service level with the TestClock (spec 6.3, 6.5,
 * 2.10): retries after 1, 5 and 15 minutes with one delivery id and the same
 * body bytes and signature; failure after 4 attempts; the 10 s attempt
 * timeout; secret rotation; fan-out rules; the history of 100.
 *
 * AppLive(config, { workers: false }); the test drives fanOutOnce / sendDueOnce
 * and moves the TestClock. Receivers are real HTTP servers on 127.0.0.1.
 */
import { layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Fiber, Option } from "effect"
import { expect } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { verifyWebhook } from "../../src/Client/Webhooks.js"
import { formatMillis } from "../../src/Domain/Time.js"
import { Sealer } from "../../src/Sealing/Sealer.js"
import { WebhookDispatcher } from "../../src/Webhooks/Dispatcher.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { dialects } from "../helpers/databases.js"
import {
  advance,
  closeOpenDeliveries,
  insertEvent,
  type Key,
  newKey,
  realSleep,
  receiver,
  register,
  webhookServiceLayer
} from "../helpers/webhookFixtures.js"
import { randomHex32 } from "../helpers/process.js"
import { type Received, type Receiver, signatureMatches } from "../helpers/webhookReceiver.js"

const MIN = 60_000

const attest = (key: Key, hash = randomHex32()) =>
  Effect.map(
    Effect.flatMap(Attestor, (a) => a.attest({ key, hashes: [hash], source: null, extraData: null, clientEncrypted: false })),
    (r) => r[0]!.attestation
  )

const deliveriesOf = (webhookId: string) => Effect.orDie(Effect.flatMap(WebhookRepo, (r) => r.deliveries(webhookId)))

const excerptOf = (id: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ response_excerpt: string | null }>`SELECT response_excerpt FROM webhook_deliveries WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0]?.response_excerpt ?? null),
    Effect.orDie
  )

const failureCountOf = (apiKeyId: string, webhookId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ failure_count: number | string }>`SELECT failure_count FROM webhooks WHERE id = ${webhookId} AND api_key_id = ${apiKeyId}`
    return Number(rows[0]!.failure_count)
  }).pipe(Effect.orDie)

const fanOut = Effect.flatMap(WebhookDispatcher, (d) => d.fanOutOnce)
const sendDue = Effect.flatMap(WebhookDispatcher, (d) => d.sendDueOnce)

/** Waits (real time) until `r` holds `n` requests — sendDueOnce already awaited them, so this is a formality. */
const requestsOf = (r: Receiver, n: number) => Effect.promise(() => r.waitForRequests(n, 5000))

const sameDelivery = (got: ReadonlyArray<Received>) => {
  expect(new Set(got.map((x) => x.headers["x-service-delivery"])).size).toBe(1)
  expect(new Set(got.map((x) => x.raw.toString("base64"))).size).toBe(1)
  expect(new Set(got.map((x) => x.headers["x-service-signature"])).size).toBe(1)
}

// ---------------------------------------------------------------------------

for (const dialect of await dialects()) {
  layer(webhookServiceLayer(dialect), { timeout: Duration.seconds(60) })(`webhook dispatcher (${dialect}, TestClock)`, (it) => {
    it.scoped("500, 500, 200: three attempts 1 min and 5 min apart, one delivery id, identical bytes and signature", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver((_x, i) => (i < 2 ? 500 : 200))
        const key = yield* newKey
        const w = yield* register(key.id, `${r.url}/in`)
        const a = yield* attest(key)
        // a real seal (demo TSA) writes the t1_complete event
        const t0 = yield* Clock.currentTimeMillis // the TestClock is shared by the tests of this layer
        const sealed = yield* Effect.flatMap(Sealer, (s) => s.sealWindow(t0 + 1))
        expect(sealed._tag).toBe("Sealed")
        expect(yield* fanOut).toBeGreaterThanOrEqual(1)
        expect(yield* fanOut).toBe(0) // idempotent: nothing left
        const [d0] = yield* deliveriesOf(w.id)
        expect(d0).toMatchObject({ status: "pending", attempts: 0, eventType: "t1_complete" })

        yield* sendDue // t = 0: attempt 1 → 500
        yield* requestsOf(r, 1)
        const [d1] = yield* deliveriesOf(w.id)
        expect(d1).toMatchObject({ status: "retrying", attempts: 1, responseCode: 500, nextAttemptAt: formatMillis(t0 + MIN) })

        yield* advance(MIN - 1)
        yield* sendDue
        expect(r.requests).toHaveLength(1) // not yet due
        yield* advance(1)
        yield* sendDue // t = 1 min: attempt 2 → 500
        yield* requestsOf(r, 2)
        const [d2] = yield* deliveriesOf(w.id)
        expect(d2).toMatchObject({ status: "retrying", attempts: 2, responseCode: 500, nextAttemptAt: formatMillis(t0 + 6 * MIN) })

        yield* advance(5 * MIN - 1)
        yield* sendDue
        expect(r.requests).toHaveLength(2)
        yield* advance(1)
        yield* sendDue // t = 6 min: attempt 3 → 200
        const got = yield* requestsOf(r, 3)
        expect(got).toHaveLength(3)
        sameDelivery(got)
        const [d3] = yield* deliveriesOf(w.id)
        expect(d3).toMatchObject({ status: "succeeded", attempts: 3, responseCode: 200, lastAttemptAt: formatMillis(t0 + 6 * MIN) })
        expect(got[0]!.headers["x-service-delivery"]).toBe(String(d3!.id))
        for (const x of got) {
          expect(x.url).toBe("/in")
          expect(signatureMatches(x.headers["x-service-signature"], x.raw, w.signingSecret)).toBe(true)
          // created_at is the (test-clock) enqueue time, so verify "as of" then
          const v = verifyWebhook(x.raw, x.headers as Record<string, string>, w.signingSecret, { now: new Date(t0 + 6 * MIN), toleranceSeconds: 3600 })
          expect(v.ok, JSON.stringify(v)).toBe(true)
        }
        expect(got[0]!.json).toMatchObject({ event: "t1_complete", delivery_id: d3!.id, attestation_id: a.id, hash_hex: a.hashHex })
        expect(got[0]!.json.tsa_timestamp).toEqual(expect.any(String))
        // nothing more, ever
        yield* advance(60 * MIN)
        yield* sendDue
        expect(r.requests).toHaveLength(3)
        expect(yield* failureCountOf(key.id, w.id)).toBe(0)
      }))

    it.scoped("500 always: 4 attempts (1 + retries after 1, 5, 15 min), then failed and the webhook's failure_count is 1", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => 500)
        const key = yield* newKey
        const w = yield* register(key.id, r.url)
        const a = yield* attest(key)
        yield* insertEvent(a.seq)
        yield* fanOut
        const t0 = yield* Clock.currentTimeMillis
        const times: Array<number> = []
        const at = [0, MIN, 5 * MIN, 15 * MIN]
        for (const [i, step] of at.entries()) {
          yield* advance(step)
          yield* sendDue
          yield* requestsOf(r, i + 1)
          times.push((yield* Clock.currentTimeMillis) - t0)
        }
        expect(times).toEqual([0, MIN, 6 * MIN, 21 * MIN])
        expect(r.requests).toHaveLength(4)
        sameDelivery(r.requests)
        const [d] = yield* deliveriesOf(w.id)
        expect(d).toMatchObject({ status: "failed", attempts: 4, responseCode: 500 })
        expect(yield* failureCountOf(key.id, w.id)).toBe(1)
        const listed = yield* Effect.orDie(Effect.flatMap(WebhookRepo, (repo) => repo.listOwned(key.id)))
        expect(listed.find((x) => x.id === w.id)?.failureCount).toBe(1)
        // no fifth attempt
        yield* advance(24 * 60 * MIN)
        yield* sendDue
        expect(r.requests).toHaveLength(4)
      }))

    it.scoped("a hanging receiver: the attempt is cut at 10 s (TestClock), recorded as a failed attempt, retried later", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver((_x, i) => (i === 0 ? "hang" : 200))
        const key = yield* newKey
        const w = yield* register(key.id, r.url)
        const a = yield* attest(key)
        yield* insertEvent(a.seq)
        yield* fanOut
        const t0 = yield* Clock.currentTimeMillis
        const fiber = yield* Effect.fork(sendDue)
        const [first] = yield* requestsOf(r, 1)
        yield* advance(10_000 - 1)
        yield* realSleep(150)
        expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true) // still waiting at 9.999 s
        expect(first!.wasAborted()).toBe(false)
        yield* advance(1)
        expect(yield* Fiber.join(fiber)).toBeGreaterThanOrEqual(1)
        yield* Effect.promise(() => Promise.race([first!.aborted, new Promise((_, rej) => setTimeout(() => rej(new Error("request not aborted")), 3000))]))
        const [d] = yield* deliveriesOf(w.id)
        expect(d).toMatchObject({ status: "retrying", attempts: 1, responseCode: null, nextAttemptAt: formatMillis(t0 + 10_000 + MIN) })
        expect(yield* excerptOf(d!.id)).toMatch(/timed out/)
        // the retry one minute later succeeds with the same delivery
        yield* advance(MIN)
        yield* sendDue
        const got = yield* requestsOf(r, 2)
        sameDelivery(got)
        expect((yield* deliveriesOf(w.id))[0]).toMatchObject({ status: "succeeded", attempts: 2, responseCode: 200 })
      }))

    it.scoped("secret rotation: register B for the same URL, delete A — A's pending retry still goes out signed with A's secret", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver((_x, i) => (i === 0 ? 502 : 200))
        const key = yield* newKey
        const repo = yield* WebhookRepo
        const A = yield* register(key.id, r.url)
        const a1 = yield* attest(key)
        yield* insertEvent(a1.seq)
        yield* fanOut
        yield* sendDue // A's attempt 1 → 502
        const [firstA] = yield* requestsOf(r, 1)
        expect(signatureMatches(firstA!.headers["x-service-signature"], firstA!.raw, A.signingSecret)).toBe(true)

        const B = yield* register(key.id, r.url)
        expect(yield* Effect.orDie(repo.remove(key.id, A.id, formatMillis(yield* Clock.currentTimeMillis)))).toBe(true)
        expect((yield* Effect.orDie(repo.listOwned(key.id))).map((w) => w.id)).toEqual([B.id])

        yield* advance(MIN)
        yield* sendDue // A's retry
        const [, retryA] = yield* requestsOf(r, 2)
        sameDelivery([firstA!, retryA!])
        expect(signatureMatches(retryA!.headers["x-service-signature"], retryA!.raw, A.signingSecret)).toBe(true)
        expect(signatureMatches(retryA!.headers["x-service-signature"], retryA!.raw, B.signingSecret)).toBe(false)
        expect((yield* deliveriesOf(A.id))[0]).toMatchObject({ status: "succeeded", attempts: 2 })

        // a new event after the rotation goes to B only, signed with B's secret
        const a2 = yield* attest(key)
        yield* insertEvent(a2.seq)
        yield* fanOut
        yield* sendDue
        const [, , fromB] = yield* requestsOf(r, 3)
        expect(fromB!.json.attestation_id).toBe(a2.id)
        expect(signatureMatches(fromB!.headers["x-service-signature"], fromB!.raw, B.signingSecret)).toBe(true)
        expect(fromB!.headers["x-service-delivery"]).not.toBe(firstA!.headers["x-service-delivery"])
        expect(yield* deliveriesOf(A.id)).toHaveLength(1)
        expect(yield* deliveriesOf(B.id)).toHaveLength(1)
        yield* realSleep(50)
        expect(r.requests).toHaveLength(3)
      }))

    it.scoped("deleting a webhook cancels its queued deliveries (never sent, recorded failed); claimDue skips unattempted deliveries of deleted webhooks", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => 200)
        const key = yield* newKey
        const repo = yield* WebhookRepo
        const sql = yield* SqlClient.SqlClient
        const A = yield* register(key.id, `${r.url}/a`)
        const B = yield* register(key.id, `${r.url}/b`)
        const a1 = yield* attest(key)
        yield* insertEvent(a1.seq)
        yield* fanOut
        expect(yield* deliveriesOf(A.id)).toHaveLength(1)
        expect(yield* deliveriesOf(B.id)).toHaveLength(1)
        // A through the API path; B deleted behind remove()'s back (a fan-out racing a delete)
        expect(yield* Effect.orDie(repo.remove(key.id, A.id, formatMillis(yield* Clock.currentTimeMillis)))).toBe(true)
        yield* Effect.orDie(sql`UPDATE webhooks SET deleted_at = ${formatMillis(yield* Clock.currentTimeMillis)} WHERE id = ${B.id}`)
        expect(yield* sendDue).toBe(0)
        expect((yield* deliveriesOf(A.id))[0]).toMatchObject({ status: "failed", attempts: 0 })
        expect(yield* excerptOf((yield* deliveriesOf(A.id))[0]!.id)).toMatch(/cancelled/)
        yield* advance(60 * MIN)
        expect(yield* sendDue).toBe(0)
        yield* realSleep(50)
        expect(r.requests).toHaveLength(0)
      }))

    it.scoped("fan-out: one delivery per live webhook of each key holding a live claim, filtered by event type", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => 200)
        const holder = yield* newKey
        const other = yield* newKey
        const both = yield* register(holder.id, `${r.url}/both`)
        const t2only = yield* register(holder.id, `${r.url}/t2`, ["t2_complete"])
        const outsider = yield* register(other.id, `${r.url}/outsider`)
        const a = yield* attest(holder)
        yield* insertEvent(a.seq, "t1_complete")
        yield* insertEvent(a.seq, "t2_complete")
        yield* fanOut
        expect((yield* deliveriesOf(both.id)).map((d) => d.eventType).sort()).toEqual(["t1_complete", "t2_complete"])
        expect((yield* deliveriesOf(t2only.id)).map((d) => d.eventType)).toEqual(["t2_complete"])
        expect(yield* deliveriesOf(outsider.id)).toEqual([])
        yield* sendDue
        const got = yield* requestsOf(r, 3)
        expect(got.map((x) => `${x.url} ${x.headers["x-service-event"]}`).sort()).toEqual(
          ["/both t1_complete", "/both t2_complete", "/t2 t2_complete"]
        )
        for (const x of got.filter((x) => x.url === "/both")) expect(signatureMatches(x.headers["x-service-signature"], x.raw, both.signingSecret)).toBe(true)
        expect(new Set(got.map((x) => x.headers["x-service-delivery"])).size).toBe(3)
        // t2_complete body shape
        const t2 = got.find((x) => x.url === "/t2")!
        expect(Object.keys(t2.json).sort()).toEqual(["attestation_id", "bitcoin_block", "confirmed_at", "created_at", "delivery_id", "event", "hash_hex"])
        yield* realSleep(50)
        expect(r.requests).toHaveLength(3)
      }))

    it.scoped("history: only the last 100 deliveries per webhook are kept", () =>
      Effect.gen(function*() {
        yield* closeOpenDeliveries
        const r = yield* receiver(() => 200)
        const key = yield* newKey
        const w = yield* register(key.id, r.url, ["t1_complete"])
        const attestor = yield* Attestor
        const hashes = Array.from({ length: 105 }, () => randomHex32())
        const atts = yield* attestor.attest({ key, hashes, source: null, extraData: null, clientEncrypted: false })
        for (const x of atts) yield* insertEvent(x.attestation.seq)
        yield* fanOut
        expect(yield* deliveriesOf(w.id)).toHaveLength(100) // the list shows at most 100
        for (let i = 0; i < 60 && r.requests.length < 105; i++) yield* sendDue // at most WEBHOOK_IN_FLIGHT per pass
        yield* requestsOf(r, 105)
        const sql = yield* SqlClient.SqlClient
        const [n] = yield* Effect.orDie(sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM webhook_deliveries WHERE webhook_id = ${w.id}`)
        expect(Number(n!.n)).toBe(100)
        const kept = yield* deliveriesOf(w.id)
        expect(kept.every((d) => d.status === "succeeded")).toBe(true)
        expect(new Set(r.requests.map((x) => x.headers["x-service-delivery"])).size).toBe(105)
      }))
  })
}
