/** Attestation and claim records as the service sees them. */
import { Schema } from "effect"
import { AttestationId } from "../Domain/AttestationId.js"
import { HashHex } from "../Domain/HashHex.js"
import { column, DbBool, DbInt } from "../Platform/Rows.js"

export type Level = "T0" | "T1" | "T2"
export const Level = Schema.Literal("T0", "T1", "T2")

/** An `attestations` row as the domain's Attestation (Postgres returns BIGINT as strings). */
export const AttestationRow = Schema.Struct({
  seq: DbInt,
  id: AttestationId,
  hashHex: column("hash_hex", HashHex),
  registeredAt: column("registered_at", Schema.String),
  signature: Schema.String,
  signingKeyId: column("signing_key_id", Schema.String),
  formatVersion: column("format_version", Schema.String),
  level: Level,
  batchId: column("batch_id", Schema.NullOr(DbInt)),
  leafIndex: column("leaf_index", Schema.NullOr(DbInt)),
  t1At: column("t1_at", Schema.NullOr(Schema.String)),
  t2At: column("t2_at", Schema.NullOr(Schema.String)),
  t2Block: column("t2_block", Schema.NullOr(DbInt)),
  /** The numeric handle of an imported historical attestation; null for every other one. */
  legacyId: column("legacy_id", Schema.NullOr(DbInt))
})
export type Attestation = typeof AttestationRow.Type

/** The columns a verify answers with: the group read decodes these, not the whole row. */
export const AttestationStatusRow = AttestationRow.pipe(Schema.pick("seq", "id", "hashHex", "registeredAt", "level"))
export type AttestationStatus = typeof AttestationStatusRow.Type
export const ATTESTATION_STATUS_COLUMNS = "seq, id, hash_hex, registered_at, level"

/** `legacy_id` on the imported historical attestations that have one, absent otherwise. */
export const legacyOf = (a: Attestation): { legacy_id?: number } => (a.legacyId === null ? {} : { legacy_id: a.legacyId })

/** A `claims` row as the domain's Claim (extra_data is stored as JSON text on both stores). */
export const ClaimRow = Schema.Struct({
  id: DbInt,
  attestationSeq: column("attestation_seq", DbInt),
  apiKeyId: column("api_key_id", Schema.String),
  source: Schema.NullOr(Schema.String),
  extraData: column("extra_data", Schema.NullOr(Schema.parseJson())),
  clientEncrypted: column("client_encrypted", DbBool),
  etag: Schema.String,
  createdAt: column("created_at", Schema.String),
  updatedAt: column("updated_at", Schema.String)
})
export type Claim = typeof ClaimRow.Type

export const SOURCE_MAX = 100
export const EXTRA_DATA_MAX_BYTES = 16 * 1024
export const BATCH_MAX = 100
