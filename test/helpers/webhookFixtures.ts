/**
 * Service-level set-up the webhook suites share: a key, a webhook registered for
 * it, attestations and their outbox events, all on the clock in the context
 * (a TestClock where the suite installs one).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { formatMillis } from "../../src/Domain/Time.js"
import { newSigningSecret, newWebhookId, type WebhookEvent } from "../../src/Webhooks/Domain.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { randomHex32 } from "./process.js"

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
