/**
 * The webhook dispatcher: fans outbox events out into deliveries, then sends
 * due deliveries (leased, so instances never send one attempt twice at once),
 * signs the exact body bytes, and schedules retries after 1, 5 and 15 minutes
 * (ATTESTD_WEBHOOK_RETRY_DELAYS). A delivery is in the database before its
 * POST, and a lease that lapses (crash between POST and record) sends it again:
 * at-least-once.
 *
 * Fair to every key: attempts run in SEND_CONCURRENCY slots, a freed slot is
 * refilled at once from claimDue (round-robin over keys and webhooks, with
 * in-flight caps per webhook and per key), so an endpoint that never answers
 * holds only its share of the slots; and its circuit (Repo.recordAttempt) opens
 * after repeated failures, so it stops taking slots at all until a probe passes.
 *
 * An event is kept OUTBOX_RETENTION after it was fanned out, then deleted: nothing reads it
 * again, and kept for good the events took a fifth of the registry's disk.
 *
 * One instance fans out at a time (WebhookRepo.fanOut takes a transaction-level lock).
 * While the database is out of reach the dispatcher pauses (Platform/Outage.ts): its
 * passes fail quietly until one succeeds.
 */
import * as Metrics from "../Platform/Metrics.js"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Context, Duration, Effect, Layer, Option, Queue } from "effect"
import type { LookupFunction } from "node:net"
import { lookup as dnsLookup, type LookupAddress } from "node:dns"
import { formatMillis } from "../Domain/Time.js"
import { AppConfig } from "../Platform/Config.js"
import { makeBatcher } from "../Platform/Batcher.js"
import { makeOutageLog } from "../Platform/Outage.js"
import * as Outbound from "../Platform/Outbound.js"
import {
  DELIVERY_TIMEOUT_MS,
  eventBody,
  isPublicAddress,
  RESPONSE_EXCERPT_BYTES,
  SEND_CONCURRENCY,
  signBody,
  USER_AGENT,
  webhookUrlShape
} from "./Domain.js"
import { type AttemptRecord, type Delivery, WebhookRepo } from "./Repo.js"

const FAN_OUT_BATCH = 5000
/**
 * How long a claimed delivery stays with the worker that claimed it. An attempt ends
 * within DELIVERY_TIMEOUT_MS, so twice that is enough; a worker killed mid-attempt
 * leaves its claims to another (or to itself restarted) this much later.
 */
const LEASE_MS = 2 * DELIVERY_TIMEOUT_MS
const POLL_MS = 500
/** How long a fanned-out event stays in the outbox, and how often (and how many at a time) older ones are deleted. */
export const OUTBOX_RETENTION = Duration.days(7)
const TRIM_EVERY = Duration.hours(1)
const TRIM_BATCH = 10_000
/**
 * Freed slots are gathered before claiming again, so one claim query serves several: until
 * CLAIM_BATCH attempts have ended or CLAIM_GAP_MS has passed since the last claim. The count
 * matters under a backlog: with the gap alone, one webhook (WEBHOOK_IN_FLIGHT in flight) could
 * never get more than WEBHOOK_IN_FLIGHT deliveries per CLAIM_GAP_MS (320/s).
 */
const CLAIM_BATCH = 8
const CLAIM_GAP_MS = 50

/** A lookup that refuses non-public addresses, so the address checked is the address connected to. */
export const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  // node:net calls a lookup with `all` set or not, and its callback takes the list or one address accordingly
  const done = callback as unknown as (err: Error | null, address?: string | ReadonlyArray<LookupAddress>, family?: number) => void
  dnsLookup(hostname, { ...options, all: true }, (err, list) => {
    if (err) return done(err)
    const bad = list.find((a) => !isPublicAddress(a.address))
    if (bad) return done(new Error(`refusing non-public address ${bad.address} for ${hostname}`))
    if ("all" in options && options.all === true) return done(null, list)
    return done(null, list[0]!.address, list[0]!.family)
  })
}

export interface PostResult {
  readonly status: number
  readonly excerpt: string
}

/** POSTs `body` through the outbound client; no redirects are followed; the response body is read up to a small cap. */
export const postWebhook = (url: URL, body: string, headers: Record<string, string>) =>
  Outbound.exchange(
    HttpClientRequest.post(url).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(body, "application/json")),
    { timeout: Duration.millis(DELIVERY_TIMEOUT_MS), maxBytes: RESPONSE_EXCERPT_BYTES, overflow: "truncate" }
  ).pipe(Effect.map((reply): PostResult => ({ status: reply.status, excerpt: new TextDecoder().decode(reply.body) })))

/** The client webhooks go out through: in production its agent connects to public addresses only. */
export const webhookClientLayer = (production: boolean) =>
  production ? Outbound.layerWithLookup(publicOnlyLookup) : Outbound.layer

export class WebhookDispatcher extends Effect.Service<WebhookDispatcher>()("Webhooks/WebhookDispatcher", {
  scoped: Effect.gen(function*() {
    const repo = yield* WebhookRepo
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const production = config.mode === "production"
    const client = yield* Layer.build(webhookClientLayer(production)).pipe(Effect.map((ctx) => Context.get(ctx, HttpClient.HttpClient)))
    const delays = config.webhookRetryDelays
    const now = Effect.map(Clock.currentTimeMillis, formatMillis)
    const outage = yield* makeOutageLog("webhook dispatching")

    const fanOutOnce = Effect.gen(function*() {
      let total = 0
      for (let i = 0; i < 100; i++) {
        const n = yield* Effect.orDie(repo.fanOut(FAN_OUT_BATCH, yield* now))
        total += n
        if (n < FAN_OUT_BATCH) break
      }
      return total
    })

    // Attempts that start together read their attestations in one statement and freeze their
    // bodies in one transaction, and attempts that end together are recorded in one: a commit
    // (and on SQLite its fsync) per group, not two per delivery.
    const freezeBody = yield* makeBatcher({
      process: (bodies: ReadonlyArray<{ readonly id: number; readonly body: string }>) => Effect.as(repo.setBodies(bodies), bodies),
      maxBatch: SEND_CONCURRENCY,
      workers: 1
    })
    const record = yield* makeBatcher({
      process: (records: ReadonlyArray<AttemptRecord>) => Effect.as(repo.recordAttempts(records), records),
      maxBatch: SEND_CONCURRENCY,
      // Postgres: a transaction is several round trips per attempt; a second one overlaps them
      workers: sql.onDialectOrElse({ pg: () => 2, orElse: () => 1 })
    })

    const factsOf = yield* makeBatcher({ process: repo.attestationFacts, maxBatch: SEND_CONCURRENCY, workers: 1 })

    const bodyOf = (d: Delivery) =>
      Effect.gen(function*() {
        if (d.body !== null) return d.body
        const facts = yield* Effect.orDie(factsOf(d.attestationSeq))
        const body = eventBody({
          event: d.eventType,
          deliveryId: d.id,
          attestationId: facts?.id ?? "",
          hashHex: facts?.hash_hex ?? "",
          tsaTimestamp: facts?.tsa_gen_time ?? null,
          bitcoinBlock: facts?.t2_block === null || facts?.t2_block === undefined ? null : Number(facts.t2_block),
          confirmedAt: facts?.t2_at ?? null,
          createdAt: d.createdAt
        })
        yield* Effect.orDie(freezeBody({ id: d.id, body }))
        return body
      })

    /** One attempt of one delivery, recorded. */
    const attempt = (d: Delivery) =>
      Effect.gen(function*() {
        const body = yield* bodyOf(d)
        // no DNS here: in production the client's lookup refuses non-public addresses as it connects
        const check = webhookUrlShape(d.url, production, config.webhookPorts)
        const result = check.ok
          ? yield* postWebhook(check.url, body, {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "x-service-event": d.eventType,
            "x-service-delivery": String(d.id),
            "x-service-signature": signBody(body, d.signingSecret)
          }).pipe(Effect.provideService(HttpClient.HttpClient, client), Effect.either)
          : ({ _tag: "Left", left: new Error(check.reason) } as const)
        const ok = result._tag === "Right" && result.right.status >= 200 && result.right.status < 300
        const t = yield* Clock.currentTimeMillis
        const attempts = d.attempts + 1
        const status: Delivery["status"] = ok ? "succeeded" : attempts <= delays.length ? "retrying" : "failed"
        const next = status === "retrying" ? t + Duration.toMillis(delays[attempts - 1]!) : t
        yield* Effect.orDie(record({
          delivery: d,
          outcome: {
            status,
            responseCode: result._tag === "Right" ? result.right.status : null,
            excerpt: result._tag === "Right" ? result.right.excerpt : result.left.message.slice(0, RESPONSE_EXCERPT_BYTES),
            now: formatMillis(t),
            nowMillis: t,
            nextAttemptAt: formatMillis(next)
          }
        }))
        Metrics.inc(Metrics.webhookDeliveries, { outcome: status })
        if (!ok) {
          yield* Effect.logWarning(
            `webhook delivery ${d.id} attempt ${attempts} failed (${result._tag === "Right" ? `HTTP ${result.right.status}` : result.left.message}); ${status}`
          )
        }
        return status
      })

    const claim = (limit: number) =>
      Effect.gen(function*() {
        const t = yield* Clock.currentTimeMillis
        return yield* Effect.orDie(repo.claimDue(formatMillis(t), formatMillis(t + LEASE_MS), limit))
      })

    /** One pass: claims what is due (fairly, up to the slots) and waits for every attempt. */
    const sendDueOnce = Effect.gen(function*() {
      const due = yield* claim(SEND_CONCURRENCY)
      yield* Effect.forEach(due, attempt, { concurrency: SEND_CONCURRENCY, discard: true })
      return due.length
    })

    const fanOutLogged = outage.attempt(fanOutOnce).pipe(
      Effect.catchAllCause((c) => Effect.logWarning("webhook fan-out failed", c))
    )

    /** Deletes the events fanned out more than OUTBOX_RETENTION ago, TRIM_BATCH per transaction; returns how many. */
    const trimOnce = Effect.gen(function*() {
      const before = formatMillis((yield* Clock.currentTimeMillis) - Duration.toMillis(OUTBOX_RETENTION))
      let trimmed = 0
      while (true) {
        const n = yield* Effect.orDie(repo.trimDispatched(before, TRIM_BATCH))
        trimmed += n
        if (n === 0) return trimmed
      }
    })

    const trimLogged = outage.attempt(trimOnce).pipe(
      Effect.catchAllCause((c) => Effect.logWarning("trimming the dispatched webhook events failed", c))
    )

    /**
     * Fans out every POLL_MS and keeps the slots busy: whenever attempts end (CLAIM_BATCH
     * of them, or fewer once CLAIM_GAP_MS has passed) or POLL_MS passes, the free slots
     * are offered to claimDue again, so a healthy endpoint never waits for a slow one's
     * attempts to time out.
     */
    const run = Effect.gen(function*() {
      const freed = yield* Queue.sliding<void>(1)
      let inFlight = 0
      let endedSinceClaim = 0
      let lastFanOut = -Infinity
      let lastTrim = yield* Clock.currentTimeMillis
      while (true) {
        const t = yield* Clock.currentTimeMillis
        if (t - lastFanOut >= POLL_MS) {
          yield* fanOutLogged
          lastFanOut = t
        }
        if (t - lastTrim >= Duration.toMillis(TRIM_EVERY)) {
          yield* trimLogged
          lastTrim = t
        }
        const free = SEND_CONCURRENCY - inFlight
        endedSinceClaim = 0
        if (free > 0) {
          const due = yield* outage.attempt(claim(free)).pipe(
            Effect.map(Option.getOrElse((): ReadonlyArray<Delivery> => [])),
            Effect.catchAllCause((c) => Effect.as(Effect.logWarning("webhook delivery pass failed", c), []))
          )
          for (const d of due) {
            inFlight++
            yield* Effect.fork(
              outage.attempt(attempt(d)).pipe(
                Effect.catchAllCause((c) => Effect.logWarning(`webhook delivery ${d.id} failed`, c)),
                Effect.ensuring(Effect.suspend(() => {
                  inFlight--
                  endedSinceClaim++
                  return Queue.offer(freed, undefined)
                }))
              )
            )
          }
        }
        yield* Queue.take(freed).pipe(Effect.timeout(Duration.millis(POLL_MS)), Effect.ignore)
        while (endedSinceClaim < CLAIM_BATCH) {
          const left = CLAIM_GAP_MS - ((yield* Clock.currentTimeMillis) - t)
          if (left <= 0) break
          yield* Queue.take(freed).pipe(Effect.timeout(Duration.millis(left)), Effect.ignore)
        }
      }
    })

    return { fanOutOnce, sendDueOnce, trimOnce, attempt, run }
  }),
  dependencies: [WebhookRepo.Default]
}) {}
