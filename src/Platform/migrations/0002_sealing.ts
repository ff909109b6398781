/** T1: sealed Merkle batches, their tree nodes in 1024-node chunks, and the event outbox. */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE batches (
    id ${t.serial},
    window_end TEXT NOT NULL UNIQUE,
    merkle_root TEXT NOT NULL,
    leaf_count INTEGER NOT NULL,
    tsa_token ${t.blob} NOT NULL,
    tsa_provider TEXT NOT NULL,
    tsa_gen_time TEXT NOT NULL,
    sealed_at TEXT NOT NULL,
    daily_root_id ${t.bigint},
    daily_leaf_index INTEGER
  )`,
  `CREATE TABLE merkle_chunks (
    batch_id ${t.bigint} NOT NULL,
    level INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    nodes ${t.blob} NOT NULL,
    PRIMARY KEY (batch_id, level, chunk)
  )`,
  `CREATE INDEX attestations_by_batch ON attestations (batch_id)`,
  `CREATE TABLE outbox (
    id ${t.serial},
    event_type TEXT NOT NULL,
    attestation_seq ${t.bigint} NOT NULL,
    created_at TEXT NOT NULL,
    dispatched_at TEXT
  )`,
  `CREATE INDEX outbox_pending ON outbox (id) WHERE dispatched_at IS NULL`
])
