/**
 * Webhooks and their deliveries. A delivery copies the URL and signing secret
 * of its webhook, so retries in flight survive the webhook's deletion (secret
 * rotation, spec §6.5); the signing secret has to be kept to sign with.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    api_key_id TEXT NOT NULL,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    label TEXT,
    signing_secret TEXT NOT NULL,
    failure_count INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    deleted_at TEXT
  )`,
  `CREATE INDEX webhooks_by_key ON webhooks (api_key_id) WHERE deleted_at IS NULL`,
  `CREATE TABLE webhook_deliveries (
    id ${t.serial},
    webhook_id TEXT NOT NULL,
    outbox_id ${t.bigint} NOT NULL,
    event_type TEXT NOT NULL,
    attestation_seq ${t.bigint} NOT NULL,
    url TEXT NOT NULL,
    signing_secret TEXT NOT NULL,
    body TEXT,
    status TEXT NOT NULL,
    response_code INTEGER,
    response_excerpt TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    last_attempt_at TEXT,
    next_attempt_at TEXT NOT NULL,
    claimed_until TEXT,
    UNIQUE (webhook_id, outbox_id)
  )`,
  `CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying')`,
  `CREATE INDEX webhook_deliveries_history ON webhook_deliveries (webhook_id, id)`
])
