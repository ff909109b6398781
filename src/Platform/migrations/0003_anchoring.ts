/** T2: daily roots over the T1 batch roots, and their OpenTimestamps calendar submissions. */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE daily_roots (
    id ${t.serial},
    window_end TEXT NOT NULL UNIQUE,
    root TEXT NOT NULL,
    leaves ${t.blob} NOT NULL,
    batch_count INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    bitcoin_height INTEGER,
    bitcoin_merkle_root TEXT,
    confirmed_at TEXT
  )`,
  `CREATE TABLE calendar_submissions (
    daily_root_id ${t.bigint} NOT NULL,
    calendar_url TEXT NOT NULL,
    status TEXT NOT NULL,
    timestamp ${t.blob},
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    submitted_at TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (daily_root_id, calendar_url)
  )`,
  `CREATE INDEX daily_roots_open ON daily_roots (id) WHERE status <> 'confirmed'`,
  `CREATE INDEX batches_unanchored ON batches (id) WHERE daily_root_id IS NULL`
])
