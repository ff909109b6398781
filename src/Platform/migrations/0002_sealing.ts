/** T1: sealed Merkle batches, their tree nodes in 1024-node chunks, and the event outbox. */
import { ddl } from "./ddl.js"

export default ddl({
  sqlite: [
    `CREATE TABLE batches (
      id INTEGER PRIMARY KEY,
      window_end TEXT NOT NULL UNIQUE,
      merkle_root TEXT NOT NULL,
      leaf_count INTEGER NOT NULL,
      tsa_token BLOB NOT NULL,
      tsa_provider TEXT NOT NULL,
      tsa_gen_time TEXT NOT NULL,
      sealed_at TEXT NOT NULL,
      daily_root_id INTEGER,
      daily_leaf_index INTEGER
    )`,
    `CREATE TABLE merkle_chunks (
      batch_id INTEGER NOT NULL,
      level INTEGER NOT NULL,
      chunk INTEGER NOT NULL,
      nodes BLOB NOT NULL,
      PRIMARY KEY (batch_id, level, chunk)
    )`,
    `CREATE INDEX attestations_by_batch ON attestations (batch_id)`,
    `CREATE TABLE outbox (
      id INTEGER PRIMARY KEY,
      event_type TEXT NOT NULL,
      attestation_seq INTEGER NOT NULL,
      created_at TEXT NOT NULL,
      dispatched_at TEXT
    )`,
    `CREATE INDEX outbox_pending ON outbox (id) WHERE dispatched_at IS NULL`
  ],
  pg: [
    `CREATE TABLE batches (
      id BIGSERIAL PRIMARY KEY,
      window_end TEXT NOT NULL UNIQUE,
      merkle_root TEXT NOT NULL,
      leaf_count INTEGER NOT NULL,
      tsa_token BYTEA NOT NULL,
      tsa_provider TEXT NOT NULL,
      tsa_gen_time TEXT NOT NULL,
      sealed_at TEXT NOT NULL,
      daily_root_id BIGINT,
      daily_leaf_index INTEGER
    )`,
    `CREATE TABLE merkle_chunks (
      batch_id BIGINT NOT NULL,
      level INTEGER NOT NULL,
      chunk INTEGER NOT NULL,
      nodes BYTEA NOT NULL,
      PRIMARY KEY (batch_id, level, chunk)
    )`,
    `CREATE INDEX attestations_by_batch ON attestations (batch_id)`,
    `CREATE TABLE outbox (
      id BIGSERIAL PRIMARY KEY,
      event_type TEXT NOT NULL,
      attestation_seq BIGINT NOT NULL,
      created_at TEXT NOT NULL,
      dispatched_at TEXT
    )`,
    `CREATE INDEX outbox_pending ON outbox (id) WHERE dispatched_at IS NULL`
  ]
})
