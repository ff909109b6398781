/** Organisations: inventory index, HMAC-derived lists with their access log, brand configurations. */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE INDEX claims_org_inventory ON claims (org_id, attestation_seq) WHERE deleted_at IS NULL`,
  `CREATE TABLE derived_lists (
    id TEXT PRIMARY KEY,
    api_key_id TEXT NOT NULL,
    org_id TEXT NOT NULL,
    label TEXT,
    key_hash TEXT NOT NULL,
    item_count INTEGER NOT NULL,
    signing_key_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    signed_payload_sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    revoked_at TEXT
  )`,
  `CREATE INDEX derived_lists_by_org ON derived_lists (org_id, created_at)`,
  `CREATE TABLE derived_values (
    list_id TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (list_id, value)
  )`,
  `CREATE TABLE derived_list_access (
    id ${t.serial},
    list_id TEXT NOT NULL,
    at TEXT NOT NULL,
    client_ip TEXT NOT NULL,
    outcome TEXT NOT NULL,
    matched INTEGER,
    total INTEGER
  )`,
  `CREATE INDEX derived_list_access_by_list ON derived_list_access (list_id, id)`,
  `CREATE TABLE brands (
    slug TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
])
