/**
 * Bitcoin block headers with every T2 day, and the demo instance's simulated
 * chain (blocks and its calendar's submissions) so a restart loses nothing.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `ALTER TABLE daily_roots ADD COLUMN bitcoin_header TEXT`,
  `CREATE TABLE simulated_blocks (
    height INTEGER PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    header TEXT NOT NULL,
    created_at TEXT NOT NULL
  )`,
  `CREATE TABLE simulated_submissions (
    commitment TEXT PRIMARY KEY,
    calendar_url TEXT NOT NULL,
    submitted_at_ms ${t.bigint} NOT NULL,
    height INTEGER,
    proof ${t.blob}
  )`,
  `CREATE INDEX simulated_submissions_pending ON simulated_submissions (submitted_at_ms) WHERE height IS NULL`
])
