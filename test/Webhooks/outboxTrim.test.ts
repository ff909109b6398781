/**
 * The outbox keeps a fanned-out event OUTBOX_RETENTION (7 days), then deletes it: nothing
 * reads it again, and kept for good the events took a fifth of the registry's disk. An event
 * not fanned out yet is never deleted, however old; one fanned out within the week stays; the
 * pass deletes in batches until nothing older is left. On both stores, with the TestClock.
 */
import { layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect } from "effect"
import { formatMillis } from "../../src/Domain/Time.js"
import { expect } from "vitest"
import { OUTBOX_RETENTION, WebhookDispatcher } from "../../src/Webhooks/Dispatcher.js"
import { dialects } from "../helpers/databases.js"
import { advance, attestMany, insertEvent, newKey, webhookServiceLayer } from "../helpers/webhookFixtures.js"

const DAY = 86_400_000

const outboxRows = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ attestation_seq: number | string; dispatched: number | string }>`
    SELECT attestation_seq, CASE WHEN dispatched_at IS NULL THEN 0 ELSE 1 END AS dispatched FROM outbox ORDER BY id`
).pipe(Effect.map((rows) => rows.map((r) => ({ seq: Number(r.attestation_seq), dispatched: Number(r.dispatched) === 1 }))), Effect.orDie)

for (const dialect of await dialects()) {
  layer(webhookServiceLayer(dialect), { timeout: Duration.seconds(120) })(`outbox retention (${dialect}, TestClock)`, (it) => {
    it.effect("deletes events fanned out more than 7 days ago, and only those", () =>
      Effect.gen(function*() {
        expect(Duration.toMillis(OUTBOX_RETENTION)).toBe(7 * DAY)
        const dispatcher = yield* WebhookDispatcher
        const key = yield* newKey
        const atts = yield* attestMany(key, 12)
        // 10 events fanned out on day 0
        for (const a of atts.slice(0, 10)) yield* insertEvent(a.seq)
        expect(yield* dispatcher.fanOutOnce).toBe(10)
        // day 3: one event fanned out then, one left undispatched (as if no instance fanned out)
        yield* advance(3 * DAY)
        yield* insertEvent(atts[10]!.seq)
        expect(yield* dispatcher.fanOutOnce).toBe(1)
        const sql = yield* SqlClient.SqlClient
        yield* insertEvent(atts[11]!.seq)

        // day 6: nothing is older than the week yet
        yield* advance(3 * DAY)
        expect(yield* dispatcher.trimOnce).toBe(0)
        expect(yield* outboxRows).toHaveLength(12)

        // day 8: the day-0 events go; the day-3 one stays, and so does the undispatched one
        yield* advance(2 * DAY)
        expect(yield* dispatcher.trimOnce).toBe(10)
        expect(yield* outboxRows).toEqual([{ seq: atts[10]!.seq, dispatched: true }, { seq: atts[11]!.seq, dispatched: false }])

        // day 20: the day-3 event goes; the undispatched one is still there to be fanned out
        yield* advance(12 * DAY)
        expect(yield* dispatcher.trimOnce).toBe(1)
        expect(yield* outboxRows).toEqual([{ seq: atts[11]!.seq, dispatched: false }])
        expect(yield* dispatcher.fanOutOnce).toBe(1)
        yield* sql`DELETE FROM outbox`
      }))

    it.effect("a pass deletes a backlog larger than one batch", () =>
      Effect.gen(function*() {
        const dispatcher = yield* WebhookDispatcher
        const sql = yield* SqlClient.SqlClient
        const key = yield* newKey
        const [a] = yield* attestMany(key, 1)
        // 25,000 events fanned out now, written straight away (a fan-out of them would deliver nothing: no webhook)
        const now = formatMillis(yield* Clock.currentTimeMillis)
        yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at, dispatched_at)
          SELECT 't1_complete', ${a!.seq}, ${now}, ${now}
          FROM (SELECT 1 FROM registry LIMIT 1) one, (${sql.literal(
            dialect === "pg"
              ? "SELECT g FROM generate_series(1, 25000) g"
              : "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 25000) SELECT g FROM s"
          )}) series`
        yield* advance(8 * DAY)
        yield* insertEvent(a!.seq)
        expect(yield* dispatcher.trimOnce).toBe(25_000)
        expect(yield* outboxRows).toEqual([{ seq: a!.seq, dispatched: false }])
      }))
  })
}
