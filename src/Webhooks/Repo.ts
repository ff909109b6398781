/**
 * Webhooks, the fan-out of outbox events into deliveries (one transaction,
 * idempotent per webhook and event), claiming due deliveries with a lease
 * (FOR UPDATE SKIP LOCKED on Postgres), and recording attempts.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, flow, Schema } from "effect"
import { tryTransactionLock } from "../Platform/Leases.js"
import { retryingConflicts } from "../Platform/Sql.js"
import { AttestationId } from "../Domain/AttestationId.js"
import { HashHex } from "../Domain/HashHex.js"
import { column, CountRow, DbInt, decodeRows, orDieOnMismatch, orUndefined } from "../Platform/Rows.js"
import { formatMillis } from "../Domain/Time.js"
import { CIRCUIT_THRESHOLD, circuitOpenMillis, DELIVERY_HISTORY, KEY_IN_FLIGHT, WEBHOOK_IN_FLIGHT } from "./Domain.js"
import { WEBHOOK_EVENTS } from "./Limits.js"

const Event = Schema.Literal(...WEBHOOK_EVENTS)

/** What one attempt of a delivery came to, as WebhookRepo.recordAttempts records it. */
export interface AttemptRecord {
  readonly delivery: Delivery
  readonly outcome: {
    readonly status: Delivery["status"]
    readonly responseCode: number | null
    readonly excerpt: string | null
    readonly now: string
    readonly nowMillis: number
    readonly nextAttemptAt: string
  }
}

/** A `webhooks` row (events stored as a JSON array). */
export const WebhookRow = Schema.Struct({
  id: Schema.String,
  apiKeyId: column("api_key_id", Schema.String),
  url: Schema.String,
  events: Schema.parseJson(Schema.Array(Event)),
  label: Schema.NullOr(Schema.String),
  failureCount: column("failure_count", DbInt),
  createdAt: column("created_at", Schema.String)
})
export interface Webhook extends Schema.Schema.Type<typeof WebhookRow> {}

/** A `webhook_deliveries` row. */
export const DeliveryRow = Schema.Struct({
  id: DbInt,
  webhookId: column("webhook_id", Schema.String),
  eventType: column("event_type", Event),
  attestationSeq: column("attestation_seq", DbInt),
  url: Schema.String,
  signingSecret: column("signing_secret", Schema.String),
  body: Schema.NullOr(Schema.String),
  status: Schema.Literal("pending", "succeeded", "retrying", "failed"),
  responseCode: column("response_code", Schema.NullOr(DbInt)),
  attempts: DbInt,
  createdAt: column("created_at", Schema.String),
  lastAttemptAt: column("last_attempt_at", Schema.NullOr(Schema.String)),
  nextAttemptAt: column("next_attempt_at", Schema.String)
})
export interface Delivery extends Schema.Schema.Type<typeof DeliveryRow> {}

const IdRow = Schema.Struct({ id: DbInt })
/** The transaction-level advisory lock of the fan-out (one instance at a time). */
const FAN_OUT_LOCK = 727005
const FactsRow = Schema.Struct({
  seq: DbInt,
  id: AttestationId,
  hash_hex: HashHex,
  tsa_gen_time: Schema.NullOr(Schema.String),
  t2_block: Schema.NullOr(DbInt),
  t2_at: Schema.NullOr(Schema.String)
})
const CircuitRow = Schema.Struct({
  consecutiveFailures: column("consecutive_failures", DbInt),
  opens: column("circuit_opens", DbInt),
  openUntil: column("circuit_open_until", Schema.NullOr(Schema.String))
})
const OwnedKey = Schema.Struct({ apiKeyId: Schema.String, id: Schema.String })

export class WebhookRepo extends Effect.Service<WebhookRepo>()("Webhooks/WebhookRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const create = (w: Webhook & { readonly signingSecret: string }) =>
      sql`INSERT INTO webhooks (id, api_key_id, url, events, label, signing_secret, created_at)
        VALUES (${w.id}, ${w.apiKeyId}, ${w.url}, ${JSON.stringify(w.events)}, ${w.label}, ${w.signingSecret}, ${w.createdAt})`

    const listOwned = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: WebhookRow,
        execute: (apiKeyId) => sql`SELECT * FROM webhooks WHERE api_key_id = ${apiKeyId} AND deleted_at IS NULL ORDER BY created_at, id`
      }),
      orDieOnMismatch
    )

    const findOwnedRow = SqlSchema.findOne({
      Request: OwnedKey,
      Result: WebhookRow,
      execute: ({ apiKeyId, id }) => sql`SELECT * FROM webhooks WHERE id = ${id} AND api_key_id = ${apiKeyId} AND deleted_at IS NULL`
    })
    const findOwned = (apiKeyId: string, id: string) => orUndefined(findOwnedRow({ apiKeyId, id }))

    const countOwned = flow(
      SqlSchema.single({
        Request: Schema.String,
        Result: CountRow,
        execute: (apiKeyId) => sql`SELECT COUNT(*) AS n FROM webhooks WHERE api_key_id = ${apiKeyId} AND deleted_at IS NULL`
      }),
      Effect.map((row) => row.n),
      orDieOnMismatch
    )

    /**
     * Soft-deletes a webhook and cancels its queued deliveries — those never
     * attempted — as failed, never sent. Retries already under way keep going
     * with the old secret (spec §6 secret rotation: retries in flight for the
     * old webhook still use the old secret).
     */
    const remove = (apiKeyId: string, id: string, now: string) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const rows = yield* sql`UPDATE webhooks SET deleted_at = ${now}
          WHERE id = ${id} AND api_key_id = ${apiKeyId} AND deleted_at IS NULL RETURNING id`
        if (rows.length === 0) return false
        yield* sql`UPDATE webhook_deliveries SET status = 'failed', response_excerpt = 'cancelled: webhook deleted',
            next_attempt_at = ${now}, claimed_until = NULL
          WHERE webhook_id = ${id} AND status = 'pending' AND attempts = 0`
        return true
      })))

    const deliveries = flow(
      SqlSchema.findAll({
        Request: Schema.String,
        Result: DeliveryRow,
        execute: (webhookId) =>
          sql`SELECT * FROM webhook_deliveries WHERE webhook_id = ${webhookId} ORDER BY id DESC LIMIT ${DELIVERY_HISTORY}`
      }),
      orDieOnMismatch
    )

    /**
     * Turns up to `limit` undispatched outbox events into deliveries for every
     * live webhook whose key holds a live claim on the attestation; marks the
     * events dispatched. Returns how many events were handled.
     */
    const fanOut = (limit: number, now: string) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        // one instance at a time: another's transaction holding the lock is fanning out the same events
        if (!(yield* tryTransactionLock(FAN_OUT_LOCK))) return 0
        const events = yield* decodeRows(IdRow)(sql`SELECT id FROM outbox WHERE dispatched_at IS NULL
          ORDER BY id LIMIT ${limit} ${isPg ? sql.unsafe("FOR UPDATE SKIP LOCKED") : sql.unsafe("")}`)
        if (events.length === 0) return 0
        const ids = events.map((e) => e.id)
        const first = ids[0]!
        const last = ids[ids.length - 1]!
        yield* sql`INSERT INTO webhook_deliveries
            (webhook_id, outbox_id, event_type, attestation_seq, url, signing_secret, status, created_at, next_attempt_at)
          SELECT w.id, o.id, o.event_type, o.attestation_seq, w.url, w.signing_secret, 'pending', ${now},
            CASE WHEN w.circuit_open_until > ${now} THEN w.circuit_open_until ELSE ${now} END
          FROM outbox o
          JOIN claims c ON c.attestation_seq = o.attestation_seq AND c.deleted_at IS NULL
          JOIN webhooks w ON w.api_key_id = c.api_key_id AND w.deleted_at IS NULL
          JOIN api_keys k ON k.id = w.api_key_id AND k.revoked_at IS NULL
          WHERE o.id >= ${first} AND o.id <= ${last} AND o.dispatched_at IS NULL
            AND w.events LIKE ${sql.literal("'%\"' || o.event_type || '\"%'")}
          ON CONFLICT (webhook_id, outbox_id) DO NOTHING`
        yield* sql`UPDATE outbox SET dispatched_at = ${now} WHERE id >= ${first} AND id <= ${last} AND dispatched_at IS NULL`
        return ids.length
      })))

    /**
     * Deletes events dispatched before `before` among the `limit` oldest of the outbox;
     * returns how many. Events are dispatched in id order, so the oldest are the front of
     * the table and a pass reads only its front, never the whole outbox.
     */
    const trimDispatched = (before: string, limit: number) =>
      retryingConflicts(Effect.map(
        sql<{ readonly id: unknown }>`DELETE FROM outbox WHERE id IN (
          SELECT id FROM (SELECT id, dispatched_at FROM outbox ORDER BY id LIMIT ${limit}) front
          WHERE dispatched_at < ${before})
        RETURNING id`,
        (rows) => rows.length
      ))

    /**
     * Claims up to `limit` due deliveries with a lease until `leaseUntil`; another
     * instance skips them. Fair: a webhook gets at most WEBHOOK_IN_FLIGHT attempts
     * in flight (leases held by any instance; 1 while its circuit is half-open, none
     * while open), a key at most KEY_IN_FLIGHT, and the due deliveries are taken
     * round-robin — per webhook within a key, and the keys with the fewest attempts
     * in flight first — so one key's backlog never queues another key's deliveries
     * behind it. On Postgres the rows are locked (SKIP LOCKED) and the lease
     * conditions checked again after locking, so two instances never exceed a cap.
     */
    const claimDue = (now: string, leaseUntil: string, limit: number) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        // A webhook never takes more than WEBHOOK_IN_FLIGHT at once, so only its first
        // WEBHOOK_IN_FLIGHT due deliveries are ranked, each webhook's read as an index range,
        // and the leases counted through their own index: a claim does not grow with the
        // backlog (ranking every due delivery had made it the limit of a large one).
        const queued = (columns: string) => sql`SELECT ${sql.unsafe(columns)} FROM webhook_deliveries q
          WHERE q.webhook_id = w.id AND q.status IN ('pending', 'retrying') AND q.next_attempt_at <= ${now}
            AND (q.claimed_until IS NULL OR q.claimed_until <= ${now})
            AND (q.attempts > 0 OR w.deleted_at IS NULL)
          ORDER BY q.next_attempt_at, q.id
          LIMIT ${sql.unsafe(String(WEBHOOK_IN_FLIGHT))}`
        // SQLite has no LATERAL, but evaluates a rowid IN (correlated subquery) once per webhook;
        // Postgres would evaluate that once per delivery row, and takes LATERAL
        const firstDue = isPg
          ? sql`CROSS JOIN LATERAL (${queued("q.id, q.next_attempt_at")}) d`
          : sql`JOIN webhook_deliveries d ON d.id IN (${queued("q.id")})`
        // SQLite without statistics (it has none unless ANALYZE ran) counts the leases by
        // scanning the whole queue in webhook order, to spare a sort; named, it reads the range
        const leasedIndex = sql.unsafe(isPg ? "" : "INDEXED BY webhook_deliveries_leased")
        const candidates = sql`
          WITH busy AS (
            SELECT webhook_id, COUNT(*) AS n FROM webhook_deliveries ${leasedIndex}
            WHERE status IN ('pending', 'retrying') AND claimed_until > ${now}
            GROUP BY webhook_id
          ),
          key_busy AS (
            SELECT w.api_key_id, SUM(b.n) AS n FROM busy b JOIN webhooks w ON w.id = b.webhook_id GROUP BY w.api_key_id
          ),
          due AS (
            SELECT d.id, d.next_attempt_at, w.api_key_id,
              ROW_NUMBER() OVER (PARTITION BY w.id ORDER BY d.next_attempt_at, d.id) AS rw,
              (CASE WHEN w.consecutive_failures >= ${sql.unsafe(String(CIRCUIT_THRESHOLD))} THEN 1
                ELSE ${sql.unsafe(String(WEBHOOK_IN_FLIGHT))} END) - COALESCE(b.n, 0) AS webhook_free
            FROM webhooks w
            ${firstDue}
            LEFT JOIN busy b ON b.webhook_id = w.id
            WHERE w.circuit_open_until IS NULL OR w.circuit_open_until <= ${now}
          ),
          ranked AS (
            SELECT u.id, u.next_attempt_at, COALESCE(kb.n, 0) AS key_busy,
              ROW_NUMBER() OVER (PARTITION BY u.api_key_id ORDER BY u.rw, u.next_attempt_at, u.id) AS rk
            FROM due u LEFT JOIN key_busy kb ON kb.api_key_id = u.api_key_id
            WHERE u.rw <= u.webhook_free
          )
          SELECT id FROM ranked WHERE key_busy + rk <= ${sql.unsafe(String(KEY_IN_FLIGHT))}
          ORDER BY key_busy + rk, next_attempt_at, id LIMIT ${limit}`
        const rows = yield* decodeRows(DeliveryRow)(
          isPg
            ? sql`SELECT d.* FROM webhook_deliveries d
              WHERE d.id IN (${candidates}) AND d.status IN ('pending', 'retrying')
                AND (d.claimed_until IS NULL OR d.claimed_until <= ${now})
              FOR UPDATE SKIP LOCKED`
            : Effect.flatMap(decodeRows(IdRow)(candidates), (ids) =>
              ids.length === 0
                ? Effect.succeed([])
                : sql`SELECT d.* FROM webhook_deliveries d WHERE ${sql.in("d.id", ids.map((r) => r.id))}`)
        )
        if (rows.length === 0) return rows
        yield* sql`UPDATE webhook_deliveries SET claimed_until = ${leaseUntil} WHERE ${sql.in("id", rows.map((r) => r.id))}`
        return rows
      })))

    /**
     * Freezes the bodies of deliveries the first time they are sent, so retries send the same
     * bytes: one transaction for all (the dispatcher groups the attempts that start together).
     */
    const setBodies = (bodies: ReadonlyArray<{ readonly id: number; readonly body: string }>) =>
      retryingConflicts(sql.withTransaction(Effect.forEach(bodies, ({ body, id }) =>
        sql`UPDATE webhook_deliveries SET body = ${body} WHERE id = ${id} AND body IS NULL`, { discard: true })))

    /** What the event bodies of these attestations tell (by seq, in the order asked; undefined where none). */
    const attestationFacts = (seqs: ReadonlyArray<number>) =>
      seqs.length === 0
        ? Effect.succeed([])
        : Effect.map(
          decodeRows(FactsRow)(sql`SELECT a.seq, a.id, a.hash_hex, b.tsa_gen_time, a.t2_block, a.t2_at FROM attestations a
            LEFT JOIN batches b ON b.id = a.batch_id WHERE ${sql.in("a.seq", [...new Set(seqs)])}`),
          (rows) => {
            const bySeq = new Map(rows.map((r) => [r.seq, r]))
            return seqs.map((seq) => bySeq.get(seq))
          }
        )

    /**
     * Records one attempt, and feeds the webhook's circuit: a success closes it;
     * a failure counts, and the CIRCUIT_THRESHOLD-th in a row (or a failed probe of
     * a half-open circuit) opens it for circuitOpenMillis(opens). While it is open
     * its queued deliveries are delayed to the end of the period (their
     * next_attempt_at says so); their attempts stay as they are.
     */
    const recordOne = ({ delivery: d, outcome }: AttemptRecord) =>
      Effect.gen(function*() {
        yield* sql`UPDATE webhook_deliveries SET status = ${outcome.status}, response_code = ${outcome.responseCode},
            response_excerpt = ${outcome.excerpt}, attempts = attempts + 1, last_attempt_at = ${outcome.now},
            next_attempt_at = ${outcome.nextAttemptAt}, claimed_until = NULL
          WHERE id = ${d.id}`
        if (outcome.status === "failed") {
          yield* sql`UPDATE webhooks SET failure_count = failure_count + 1 WHERE id = ${d.webhookId}`
        }
        if (outcome.status === "succeeded") {
          yield* sql`UPDATE webhooks SET consecutive_failures = 0, circuit_opens = 0, circuit_open_until = NULL
            WHERE id = ${d.webhookId} AND (consecutive_failures <> 0 OR circuit_open_until IS NOT NULL)`
        } else {
          // the row stays locked (Postgres) until commit, so concurrent failures count one by one
          const [w] = yield* decodeRows(CircuitRow)(sql`
            UPDATE webhooks SET consecutive_failures = consecutive_failures + 1 WHERE id = ${d.webhookId}
            RETURNING consecutive_failures, circuit_opens, circuit_open_until`)
          let openUntil = w?.openUntil ?? null
          if (w && w.consecutiveFailures >= CIRCUIT_THRESHOLD && (openUntil === null || openUntil <= outcome.now)) {
            const opens = w.opens
            openUntil = formatMillis(outcome.nowMillis + circuitOpenMillis(opens))
            yield* sql`UPDATE webhooks SET circuit_opens = ${opens + 1}, circuit_open_until = ${openUntil} WHERE id = ${d.webhookId}`
          }
          if (openUntil !== null && openUntil > outcome.now) {
            yield* sql`UPDATE webhook_deliveries SET next_attempt_at = ${openUntil}
              WHERE webhook_id = ${d.webhookId} AND status IN ('pending', 'retrying') AND next_attempt_at < ${openUntil}
                AND (claimed_until IS NULL OR claimed_until <= ${outcome.now})`
          }
        }
      })

    /** History: the newest DELIVERY_HISTORY per webhook; deliveries still in flight are never dropped. */
    const trimHistory = (webhookId: string) =>
      sql`DELETE FROM webhook_deliveries WHERE webhook_id = ${webhookId}
        AND status IN ('succeeded', 'failed')
        AND id < (SELECT MIN(id) FROM (SELECT id FROM webhook_deliveries WHERE webhook_id = ${webhookId}
                  ORDER BY id DESC LIMIT ${DELIVERY_HISTORY}) newest)`

    /**
     * Records attempts in one transaction (the dispatcher groups the attempts that end
     * together), each as if alone and in webhook order, so that two transactions take the
     * webhooks' row locks in the same order (Postgres) and cannot deadlock; then trims each
     * webhook's history once.
     */
    const recordAttempts = (records: ReadonlyArray<AttemptRecord>) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const sorted = [...records].sort((a, b) =>
          a.delivery.webhookId < b.delivery.webhookId ? -1 : a.delivery.webhookId > b.delivery.webhookId ? 1 : a.delivery.id - b.delivery.id
        )
        yield* Effect.forEach(sorted, recordOne, { discard: true })
        yield* Effect.forEach(new Set(sorted.map((r) => r.delivery.webhookId)), trimHistory, { discard: true })
      })))

    /** The circuit of a webhook (tests and operators). */
    const circuitOf = flow(
      SqlSchema.findOne({
        Request: Schema.String,
        Result: CircuitRow,
        execute: (webhookId) => sql`SELECT consecutive_failures, circuit_opens, circuit_open_until FROM webhooks WHERE id = ${webhookId}`
      }),
      orUndefined
    )

    return { create, countOwned, listOwned, findOwned, remove, deliveries, fanOut, trimDispatched, claimDue, setBodies, attestationFacts, recordAttempts, circuitOf }
  })
}) {}
