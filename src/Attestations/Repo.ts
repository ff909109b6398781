/** SQL for attestations and claims, one definition for SQLite and Postgres. */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Schema } from "effect"
import type { AttestationRef } from "../Domain/AttestationId.js"
import { bytesToHex, randomBytes } from "../Domain/Bytes.js"
import { decodeRows, DbInt } from "../Platform/Rows.js"
import {
  type Attestation,
  ATTESTATION_STATUS_COLUMNS,
  AttestationRow,
  type AttestationStatus,
  AttestationStatusRow,
  type Claim,
  ClaimRow,
  Level
} from "./Domain.js"

/** Row decoders (a row that does not match its schema is a bug: a defect). */
const attestationRows = decodeRows(AttestationRow)
const statusRows = decodeRows(AttestationStatusRow)
const claimRows = decodeRows(ClaimRow)
const claimSourceRows = decodeRows(ClaimRow.pipe(Schema.pick("source")))
const insertedAttestationKeys = decodeRows(AttestationRow.pipe(Schema.pick("seq", "id", "hashHex")))
const insertedClaimKeys = decodeRows(ClaimRow.pipe(Schema.pick("id", "attestationSeq", "apiKeyId")))
const levelCounts = decodeRows(Schema.Struct({ level: Level, n: DbInt }))

export const newEtag = (): string => bytesToHex(randomBytes(12))

/** Rows to insert (type aliases, not interfaces: `sql.insert` takes records). */
export type NewAttestationRow = {
  readonly id: string
  readonly hash_hex: string
  readonly registered_at: string
  readonly signature: string
  readonly signing_key_id: string
  readonly format_version: string
}

export type NewClaimRow = {
  readonly attestation_seq: number
  readonly api_key_id: string
  readonly org_id: string | null
  readonly source: string | null
  readonly extra_data: string | null
  readonly client_encrypted: boolean
  readonly etag: string
  readonly created_at: string
  readonly updated_at: string
}

/** The columns of `claim` on the attestation `seq`, its flag written as `encrypted`. */
const claimColumns = <B>(claim: Omit<NewClaimRow, "attestation_seq">, seq: number, encrypted: B) => ({
  attestation_seq: seq,
  api_key_id: claim.api_key_id,
  org_id: claim.org_id,
  source: claim.source,
  extra_data: claim.extra_data,
  client_encrypted: encrypted,
  etag: claim.etag,
  created_at: claim.created_at,
  updated_at: claim.updated_at
})

/** The row of `claim` on the attestation `seq` (claimColumns). */
export const claimRowOn = (claim: Omit<NewClaimRow, "attestation_seq">, seq: number): NewClaimRow =>
  claimColumns(claim, seq, claim.client_encrypted)

/**
 * An attestation as its insert wrote it: the columns given, the keys the store
 * returned, and the schema's defaults for the rest (a new attestation is T0, in
 * no batch, not imported). test/Storage/contract.test.ts reads it back to compare.
 */
const insertedAttestation = (
  row: NewAttestationRow,
  keys: Pick<Attestation, "seq" | "id" | "hashHex">
): Attestation => ({
  seq: keys.seq,
  id: keys.id,
  hashHex: keys.hashHex,
  registeredAt: row.registered_at,
  signature: row.signature,
  signingKeyId: row.signing_key_id,
  formatVersion: row.format_version,
  level: "T0",
  batchId: null,
  leafIndex: null,
  t1At: null,
  t2At: null,
  t2Block: null,
  legacyId: null
})

/** A claim as its insert wrote it on the attestation `seq`, with the id the store gave it. */
const insertedClaim = (row: Omit<NewClaimRow, "attestation_seq">, seq: number, id: number): Claim => ({
  id,
  attestationSeq: seq,
  apiKeyId: row.api_key_id,
  source: row.source,
  extraData: row.extra_data === null ? null : JSON.parse(row.extra_data),
  clientEncrypted: row.client_encrypted,
  etag: row.etag,
  createdAt: row.created_at,
  updatedAt: row.updated_at
})

const CHUNK = 400

/** One statement per CHUNK items (SQLite's bound-parameter limit), the results in order as one array. */
const inChunks = <A, B, E, R>(
  xs: ReadonlyArray<A>,
  statement: (part: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<B>, E, R>
): Effect.Effect<Array<B>, E, R> => {
  const parts: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < xs.length; i += CHUNK) parts.push(xs.slice(i, i + CHUNK))
  return Effect.map(Effect.forEach(parts, statement), (results) => results.flat())
}

export class AttestationRepo extends Effect.Service<AttestationRepo>()("Attestations/AttestationRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    /** `column` among `values`: `= ANY` of one array parameter on Postgres (one statement text for any count), `IN (…)` on SQLite. */
    const among = (column: "hash_hex" | "attestation_seq", values: ReadonlyArray<string | number>) =>
      isPg
        ? sql`${sql(column)} = ANY(${values}::${sql.literal(column === "attestation_seq" ? "bigint" : "text")}[])`
        : sql.in(column, values)

    const findByHashes = (hashes: ReadonlyArray<string>) =>
      inChunks(hashes, (part) => attestationRows(sql`SELECT * FROM attestations WHERE ${among("hash_hex", part)}`))

    /** The statuses of the digests among `hashes` that are attested (the verify path's columns). */
    const statusByHashes = (hashes: ReadonlyArray<string>) =>
      inChunks(hashes, (part) => statusRows(sql`SELECT ${sql.unsafe(ATTESTATION_STATUS_COLUMNS)} FROM attestations WHERE ${among("hash_hex", part)}`))

    const findByRef = (ref: AttestationRef) =>
      Effect.map(
        attestationRows(
          ref._tag === "Id"
            ? sql`SELECT * FROM attestations WHERE id = ${ref.id}`
            : sql`SELECT * FROM attestations WHERE legacy_id = ${ref.legacyId}`
        ),
        (rows) => rows[0]
      )

    /**
     * Inserts rows whose hash is new and returns those it inserted; a row that lost a
     * race to another writer is skipped (not returned), so callers look it up. The
     * statement returns only the keys (seq, id, hash); the rest of each row is what
     * was inserted.
     */
    const insertIfAbsent = (rows: ReadonlyArray<NewAttestationRow>) =>
      inChunks(rows, (part) =>
        Effect.map(
          insertedAttestationKeys(
            sql`INSERT INTO registry ${sql.insert(part)} ON CONFLICT (hash_hex) DO NOTHING RETURNING seq, id, hash_hex`
          ),
          (keys) => {
            const byHash = new Map(part.map((r) => [r.hash_hex, r]))
            return keys.map((k) => insertedAttestation(byHash.get(k.hashHex)!, k))
          }
        ))

    /** Inserts claims a key does not hold yet and returns the inserted ones (keys returned, as above). */
    const insertClaimsIfAbsent = (rows: ReadonlyArray<NewClaimRow>) =>
      inChunks(rows, (part) =>
        Effect.map(
          insertedClaimKeys(
            sql`INSERT INTO claims ${
              sql.insert(isPg ? part : part.map((r) => claimColumns(r, r.attestation_seq, r.client_encrypted ? 1 : 0)))
            }
            ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING
            RETURNING id, attestation_seq, api_key_id`
          ),
          (keys) => {
            const byKey = new Map(part.map((r) => [`${r.attestation_seq}\u0000${r.api_key_id}`, r]))
            return keys.map((k) => insertedClaim(byKey.get(`${k.attestationSeq}\u0000${k.apiKeyId}`)!, k.attestationSeq, k.id))
          }
        ))

    /** Live claims of `keyId` on the given attestations. */
    const liveClaims = (keyId: string, seqs: ReadonlyArray<number>) =>
      inChunks(seqs, (part) =>
        claimRows(sql`SELECT * FROM claims WHERE api_key_id = ${keyId} AND deleted_at IS NULL AND ${among("attestation_seq", part)}`))

    const countsByLevel = Effect.map(
      // from the pending set and the batches' leaf counts: a count of the registry's rows would read all of them
      levelCounts(sql`SELECT 'T0' AS level, COUNT(*) AS n FROM pending_seals
        UNION ALL
        SELECT CASE WHEN d.id IS NULL THEN 'T1' ELSE 'T2' END AS level, SUM(b.leaf_count) AS n
        FROM batches b LEFT JOIN daily_roots d ON d.id = b.daily_root_id AND d.status = 'confirmed'
        GROUP BY level`),
      (rows) => {
        const out: Record<Level, number> = { T0: 0, T1: 0, T2: 0 }
        for (const r of rows) out[r.level] = r.n
        return out
      }
    )

    return {
      statusByHashes,
      findByHashes,
      findByRef,
      insertIfAbsent,
      insertClaimsIfAbsent,
      liveClaims,
      countsByLevel,
      withTransaction: sql.withTransaction
    }
  })
}) {}
