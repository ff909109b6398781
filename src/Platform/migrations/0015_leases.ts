/**
 * Leases (Platform/Leases.ts): which instance runs a background job now. `token` grows by
 * one at every take-over and fences the job's writes; `expires_at` is in milliseconds of
 * the database's clock, the one clock every instance reads.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token ${t.bigint} NOT NULL,
    expires_at ${t.bigint} NOT NULL
  )`
])
