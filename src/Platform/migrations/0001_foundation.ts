/** Keys, signing keys, attestations and per-key claims; quota and rate-limit counters. */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    label TEXT NOT NULL,
    scopes TEXT,
    org_id TEXT,
    env TEXT,
    allow_ips TEXT,
    rate_limit INTEGER,
    monthly_quota ${t.bigint},
    created_at TEXT NOT NULL,
    revoked_at TEXT
  )`,
  `CREATE TABLE signing_keys (
    kid TEXT PRIMARY KEY,
    jwk TEXT NOT NULL,
    created_at TEXT NOT NULL,
    active ${t.boolean} NOT NULL DEFAULT ${t.true}
  )`,
  `CREATE TABLE attestations (
    seq ${t.serial},
    id TEXT NOT NULL UNIQUE,
    hash_hex TEXT NOT NULL UNIQUE,
    registered_at TEXT NOT NULL,
    signature TEXT NOT NULL,
    signing_key_id TEXT NOT NULL,
    format_version TEXT NOT NULL,
    level TEXT NOT NULL DEFAULT 'T0',
    batch_id ${t.bigint},
    leaf_index INTEGER,
    t1_at TEXT,
    t2_at TEXT,
    t2_block INTEGER
  )`,
  `CREATE INDEX attestations_pending_t0 ON attestations (seq) WHERE level = 'T0'`,
  `CREATE TABLE claims (
    id ${t.serial},
    attestation_seq ${t.bigint} NOT NULL REFERENCES attestations (seq),
    api_key_id TEXT NOT NULL REFERENCES api_keys (id),
    org_id TEXT,
    source TEXT,
    extra_data TEXT,
    client_encrypted ${t.boolean} NOT NULL DEFAULT ${t.false},
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
    used ${t.bigint} NOT NULL,
    PRIMARY KEY (api_key_id, month)
  )`,
  // counters of the current second only: losing them in a crash costs nothing
  `CREATE ${t.unlogged}TABLE rate_buckets (
    bucket_key TEXT NOT NULL,
    second ${t.bigint} NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (bucket_key, second)
  )`
])
