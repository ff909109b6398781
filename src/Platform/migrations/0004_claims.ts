/** Private claim data: tags per claim, share tokens and their access log. */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE tags (
    claim_id ${t.bigint} NOT NULL REFERENCES claims (id),
    api_key_id TEXT NOT NULL,
    attestation_seq ${t.bigint} NOT NULL,
    key TEXT NOT NULL,
    value TEXT,
    value_enc TEXT,
    value_nonce TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (claim_id, key)
  )`,
  `CREATE INDEX tags_query ON tags (api_key_id, key, value, attestation_seq) WHERE value IS NOT NULL`,
  `CREATE TABLE share_tokens (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    api_key_id TEXT NOT NULL,
    attestation_ids TEXT NOT NULL,
    recipient_label TEXT,
    expires_at TEXT NOT NULL,
    max_uses INTEGER,
    uses INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    revoked_at TEXT
  )`,
  `CREATE INDEX share_tokens_by_key ON share_tokens (api_key_id, created_at)`,
  `CREATE TABLE share_token_access (
    id ${t.serial},
    token_id TEXT NOT NULL,
    at TEXT NOT NULL,
    client_ip TEXT NOT NULL,
    attestation_id TEXT NOT NULL,
    path TEXT NOT NULL
  )`,
  `CREATE INDEX share_token_access_by_token ON share_token_access (token_id, id)`
])
