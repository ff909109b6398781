/** SQL for attestations and claims, one definition for SQLite and Postgres. */
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Effect, Schema } from "effect"
import type { AttestationRef } from "../Domain/AttestationId.js"
import { bytesToHex, randomChunks } from "../Domain/Bytes.js"
import { column, decodeRows, DbInt } from "../Platform/Rows.js"
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
/** The keys of what register's one statement wrote (Postgres), an attestation's or a claim's per row. */
const writtenKeys = decodeRows(Schema.Union(
  Schema.Struct({ kind: Schema.Literal("attestation"), ...AttestationRow.pick("seq", "id", "hashHex").fields }),
  Schema.Struct({
    kind: Schema.Literal("claim"),
    attestationSeq: column("seq", DbInt),
    id: DbInt,
    apiKeyId: column("api_key_id", Schema.String)
  })
))

/** `n` new ETags (12 random bytes each, hex), from one draw. */
export const newEtags = (n: number): Array<string> => randomChunks(n, 12).map(bytesToHex)

export const newEtag = (): string => newEtags(1)[0]!

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

/**
 * A claim a group makes: on an attestation that exists (`attestation_seq`), or on the
 * digest of one the same write registers (`attestation_seq` null, found by `hash_hex`).
 */
export type ClaimToMake = Omit<NewClaimRow, "attestation_seq"> & {
  readonly hash_hex: string
  readonly attestation_seq: number | null
}

/** What a group wrote: the attestations it registered and the claims it made (each as stored). */
export interface Written {
  readonly attestations: ReadonlyArray<Attestation>
  readonly claims: ReadonlyArray<Claim>
}

/** The seq each claim is made on: its own, or that of the attestation its digest got among `registered`. */
const seqOfClaim = (registered: ReadonlyArray<Attestation>) => {
  const seqOf = new Map<string, number>(registered.map((a) => [a.hashHex, a.seq]))
  return (claim: ClaimToMake): number | undefined => claim.attestation_seq ?? seqOf.get(claim.hash_hex)
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
const claimRowOn = (claim: Omit<NewClaimRow, "attestation_seq">, seq: number): NewClaimRow =>
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

    /**
     * Registers `rows` (digests that were new when read) and makes `claims`, atomically: what
     * a group of attests writes. Returns what it wrote. A row another writer registered first
     * is skipped, and so are the claims on it (the caller reads it and claims it again); a
     * claim another writer made live first is skipped too. Claims are written in (seq, key)
     * order, so concurrent writers take their unique-index locks in one order.
     *
     * On Postgres, one statement: a data-modifying WITH inserts the rows, then the claims
     * joined to the rows it inserted, one round trip with no BEGIN or COMMIT (a group of
     * attests took four more before: BEGIN, each insert, COMMIT, each waiting on a busy event
     * loop). Each column goes as one array, so the statement's text is the same for any count.
     * SQLite has no insert inside WITH: its two inserts run in one transaction.
     */
    const register = (rows: ReadonlyArray<NewAttestationRow>, claims: ReadonlyArray<ClaimToMake>): Effect.Effect<Written, SqlError.SqlError> =>
      isPg ? registerInOneStatement(rows, claims) : sql.withTransaction(Effect.gen(function*() {
        const attestations = yield* insertIfAbsent(rows)
        const seqOf = seqOfClaim(attestations)
        const claimRows = claims.flatMap((c) => {
          const seq = seqOf(c)
          return seq === undefined ? [] : [claimRowOn(c, seq)]
        }).sort((a, b) => a.attestation_seq - b.attestation_seq || (a.api_key_id < b.api_key_id ? -1 : 1))
        return { attestations, claims: yield* insertClaimsIfAbsent(claimRows) }
      }))

    const registerInOneStatement = (rows: ReadonlyArray<NewAttestationRow>, claims: ReadonlyArray<ClaimToMake>) => {
      const col = <K extends keyof NewAttestationRow>(k: K) => rows.map((r) => r[k])
      const claimCol = <K extends keyof ClaimToMake>(k: K) => claims.map((c) => c[k])
      return Effect.map(
        writtenKeys(sql`WITH registered AS (
            INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
            SELECT * FROM unnest(${col("id")}::text[], ${col("hash_hex")}::text[], ${col("registered_at")}::text[],
              ${col("signature")}::text[], ${col("signing_key_id")}::text[], ${col("format_version")}::text[])
            ON CONFLICT (hash_hex) DO NOTHING
            RETURNING seq, id, hash_hex
          ), claimed AS (
            INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
            SELECT COALESCE(c.seq, r.seq), c.api_key_id, c.org_id, c.source, c.extra_data, c.client_encrypted, c.etag, c.created_at, c.updated_at
            FROM unnest(${claimCol("hash_hex")}::text[], ${claimCol("attestation_seq")}::bigint[], ${claimCol("api_key_id")}::text[],
              ${claimCol("org_id")}::text[], ${claimCol("source")}::text[], ${claimCol("extra_data")}::text[],
              ${claimCol("client_encrypted")}::boolean[], ${claimCol("etag")}::text[], ${claimCol("created_at")}::text[],
              ${claimCol("updated_at")}::text[])
              AS c (hash_hex, seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
            LEFT JOIN registered r ON c.seq IS NULL AND r.hash_hex = c.hash_hex
            WHERE COALESCE(c.seq, r.seq) IS NOT NULL
            ORDER BY 1, 2
            ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING
            RETURNING id, attestation_seq, api_key_id
          )
          SELECT 'attestation' AS kind, seq, id, hash_hex, NULL AS api_key_id FROM registered
          UNION ALL
          SELECT 'claim', attestation_seq, id::text, NULL, api_key_id FROM claimed`),
        (keys): Written => {
          const rowOf = new Map<string, NewAttestationRow>(rows.map((r) => [r.hash_hex, r]))
          const attestations = keys.flatMap((k) => k.kind === "attestation" ? [insertedAttestation(rowOf.get(k.hashHex)!, k)] : [])
          const seqOf = seqOfClaim(attestations)
          const claimOf = new Map(claims.map((c) => [`${c.api_key_id}\u0000${seqOf(c)}`, c]))
          const made = keys.flatMap((k) =>
            k.kind === "claim" ? [insertedClaim(claimOf.get(`${k.apiKeyId}\u0000${k.attestationSeq}`)!, k.attestationSeq, k.id)] : []
          )
          return { attestations, claims: made }
        }
      )
    }

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
      register,
      liveClaims,
      countsByLevel
    }
  })
}) {}
