/**
 * Tokens granted by the RFC 3161 time-stamping authority (CONTRACT §6): each
 * by its serial (lowercase hex, no leading zeros; unique, so a serial is never
 * handed out twice), with the attestations that register it.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE timestamp_tokens (
    serial TEXT PRIMARY KEY,
    gen_time TEXT NOT NULL,
    policy TEXT NOT NULL,
    hash_algorithm TEXT NOT NULL,
    hashed_message TEXT NOT NULL,
    token ${t.blob} NOT NULL,
    token_sha256 TEXT NOT NULL,
    token_attestation_id TEXT NOT NULL,
    imprint_attestation_id TEXT
  )`
])
