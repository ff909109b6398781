/** Keys, signing keys, attestations and per-key claims; quota and rate-limit counters. */
import { ddl } from "./ddl.js"

export default ddl({
  sqlite: [
    `CREATE TABLE api_keys (
      id TEXT PRIMARY KEY,
      key_hash TEXT NOT NULL UNIQUE,
      label TEXT NOT NULL,
      scopes TEXT,
      org_id TEXT,
      env TEXT,
      allow_ips TEXT,
      rate_limit INTEGER,
      monthly_quota INTEGER,
      created_at TEXT NOT NULL,
      revoked_at TEXT
    )`,
    `CREATE TABLE signing_keys (
      kid TEXT PRIMARY KEY,
      jwk TEXT NOT NULL,
      created_at TEXT NOT NULL,
      active INTEGER NOT NULL DEFAULT 1
    )`,
    `CREATE TABLE attestations (
      seq INTEGER PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      hash_hex TEXT NOT NULL UNIQUE,
      registered_at TEXT NOT NULL,
      signature TEXT NOT NULL,
      signing_key_id TEXT NOT NULL,
      format_version TEXT NOT NULL,
      level TEXT NOT NULL DEFAULT 'T0',
      batch_id INTEGER,
      leaf_index INTEGER,
      t1_at TEXT,
      t2_at TEXT,
      t2_block INTEGER
    )`,
    `CREATE INDEX attestations_pending_t0 ON attestations (seq) WHERE level = 'T0'`,
    `CREATE TABLE claims (
      id INTEGER PRIMARY KEY,
      attestation_seq INTEGER NOT NULL REFERENCES attestations (seq),
      api_key_id TEXT NOT NULL REFERENCES api_keys (id),
      org_id TEXT,
      source TEXT,
      extra_data TEXT,
      client_encrypted INTEGER NOT NULL DEFAULT 0,
      etag TEXT NOT NULL,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      deleted_at TEXT
    )`,
    `CREATE UNIQUE INDEX claims_live ON claims (attestation_seq, api_key_id) WHERE deleted_at IS NULL`,
    `CREATE INDEX claims_by_key ON claims (api_key_id, attestation_seq)`,
    `CREATE TABLE quota_usage (
      api_key_id TEXT NOT NULL,
      month TEXT NOT NULL,
      used INTEGER NOT NULL,
      PRIMARY KEY (api_key_id, month)
    )`,
    `CREATE TABLE rate_buckets (
      bucket_key TEXT NOT NULL,
      second INTEGER NOT NULL,
      n INTEGER NOT NULL,
      PRIMARY KEY (bucket_key, second)
    )`
  ],
  pg: [
    `CREATE TABLE api_keys (
      id TEXT PRIMARY KEY,
      key_hash TEXT NOT NULL UNIQUE,
      label TEXT NOT NULL,
      scopes TEXT,
      org_id TEXT,
      env TEXT,
      allow_ips TEXT,
      rate_limit INTEGER,
      monthly_quota BIGINT,
      created_at TEXT NOT NULL,
      revoked_at TEXT
    )`,
    `CREATE TABLE signing_keys (
      kid TEXT PRIMARY KEY,
      jwk TEXT NOT NULL,
      created_at TEXT NOT NULL,
      active BOOLEAN NOT NULL DEFAULT TRUE
    )`,
    `CREATE TABLE attestations (
      seq BIGSERIAL PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      hash_hex TEXT NOT NULL UNIQUE,
      registered_at TEXT NOT NULL,
      signature TEXT NOT NULL,
      signing_key_id TEXT NOT NULL,
      format_version TEXT NOT NULL,
      level TEXT NOT NULL DEFAULT 'T0',
      batch_id BIGINT,
      leaf_index INTEGER,
      t1_at TEXT,
      t2_at TEXT,
      t2_block INTEGER
    )`,
    `CREATE INDEX attestations_pending_t0 ON attestations (seq) WHERE level = 'T0'`,
    `CREATE TABLE claims (
      id BIGSERIAL PRIMARY KEY,
      attestation_seq BIGINT NOT NULL REFERENCES attestations (seq),
      api_key_id TEXT NOT NULL REFERENCES api_keys (id),
      org_id TEXT,
      source TEXT,
      extra_data TEXT,
      client_encrypted BOOLEAN NOT NULL DEFAULT FALSE,
      etag TEXT NOT NULL,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      deleted_at TEXT
    )`,
    `CREATE UNIQUE INDEX claims_live ON claims (attestation_seq, api_key_id) WHERE deleted_at IS NULL`,
    `CREATE INDEX claims_by_key ON claims (api_key_id, attestation_seq)`,
    `CREATE TABLE quota_usage (
      api_key_id TEXT NOT NULL,
      month TEXT NOT NULL,
      used BIGINT NOT NULL,
      PRIMARY KEY (api_key_id, month)
    )`,
    `CREATE UNLOGGED TABLE rate_buckets (
      bucket_key TEXT NOT NULL,
      second BIGINT NOT NULL,
      n INTEGER NOT NULL,
      PRIMARY KEY (bucket_key, second)
    )`
  ]
})
