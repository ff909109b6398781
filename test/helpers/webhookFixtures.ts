/**
 * Service-level set-up the webhook suites share: the service over a fresh
 * database, a key, a webhook registered for it, attestations and their outbox
 * events, all on the clock in the context (a TestClock where the suite installs
 * one), and the receivers the deliveries go to.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer, TestClock } from "effect"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { formatMillis } from "../../src/Domain/Time.js"
import { newSigningSecret, newWebhookId, type WebhookEvent } from "../../src/Webhooks/Domain.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { AppLive } from "../../src/main.js"
import { AppConfig, type AppConfigShape } from "../../src/Platform/Config.js"
import { createDatabase, type TestDatabase } from "./databases.js"
import { randomHex32 } from "./process.js"
import { type Answer, type Received, startReceiver } from "./webhookReceiver.js"

/** The database under a webhook suite's service, and the config the service runs with. */
export class WebhookDatabase extends Context.Tag("test/WebhookDatabase")<WebhookDatabase, { readonly db: TestDatabase; readonly config: AppConfigShape }>() {}

const WebhookDatabaseLive = (dialect: "sqlite" | "pg", config: Partial<AppConfigShape>) =>
  Layer.scoped(
    WebhookDatabase,
    Effect.acquireRelease(
      Effect.promise(async () => {
        const db = await createDatabase(dialect)
        // The suites move the TestClock by hours and rotate no key: a key-table read every 2 s
        // would run thousands of times inside each jump.
        return { db, config: AppConfig.make({ signingKeyPoll: Duration.days(7), ...config, databaseUrl: db.url, dataDir: db.dataDir }) }
      }),
      (f) => Effect.promise(() => f.db.drop())
    )
  )

/**
 * The service (no background fibers: the suite drives the dispatcher) over a fresh database,
 * dropped at the end; `config` overrides the defaults (the database's own fields excepted).
 */
export const webhookServiceLayer = (dialect: "sqlite" | "pg", config: Partial<AppConfigShape> = {}) =>
  Layer.unwrapEffect(Effect.map(WebhookDatabase, (f) => AppLive(f.config, { workers: false }))).pipe(
    Layer.provideMerge(WebhookDatabaseLive(dialect, config))
  )

/** Waits on the real clock (a receiver's socket is real, whatever the TestClock says). */
export const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))
export const advance = (ms: number) => TestClock.adjust(Duration.millis(ms))

/** A receiver on 127.0.0.1 for the scope, answering each request with `answer`. */
export const receiver = (answer: (r: Received, i: number) => Answer) =>
  Effect.acquireRelease(Effect.promise(() => startReceiver({ answer })), (r) => Effect.promise(() => r.close()))

/** Every delivery still open at the end of a test is closed, so the next test (clock back at 0) does not pick it up. */
export const closeOpenDeliveries = Effect.addFinalizer(() =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE webhook_deliveries SET status = 'failed' WHERE status IN ('pending', 'retrying')`).pipe(
    Effect.ignore
  )
)

/** A new API key with every scope, as the repositories return it. */
export const newKey = Effect.gen(function*() {
  const keys = yield* ApiKeyRepo
  const created = yield* keys.create({ label: "wh", scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
  return (yield* keys.findByHash(hashSecret(created.secret)))!
}).pipe(Effect.orDie)

export type Key = Effect.Effect.Success<typeof newKey>

/** Registers a webhook for `apiKeyId` (straight through the repository) and returns it, secret included. */
export const register = (apiKeyId: string, url: string, events: ReadonlyArray<WebhookEvent> = ["t1_complete", "t2_complete"]) =>
  Effect.gen(function*() {
    const w = {
      id: newWebhookId(),
      apiKeyId,
      url,
      events,
      label: null,
      failureCount: 0,
      createdAt: formatMillis(yield* Clock.currentTimeMillis),
      signingSecret: newSigningSecret()
    }
    yield* (yield* WebhookRepo).create(w)
    return w
  }).pipe(Effect.orDie)

/** Attests `n` new hashes for `key`; the attestations, in order. */
export const attestMany = (key: Key, n: number) =>
  Effect.flatMap(Attestor, (a) =>
    a.attest({ key, hashes: Array.from({ length: n }, () => randomHex32()), source: null, extraData: null, clientEncrypted: false })
  ).pipe(Effect.map((results) => results.map((r) => r.attestation)), Effect.orDie)

/** Writes the outbox event `event` for the attestation `seq`, as sealing or anchoring would. */
export const insertEvent = (seq: number, event: WebhookEvent = "t1_complete") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const now = formatMillis(yield* Clock.currentTimeMillis)
    yield* sql`INSERT INTO outbox (event_type, attestation_seq, created_at) VALUES (${event}, ${seq}, ${now})`
  }).pipe(Effect.orDie)
