/** SQL for attestations and claims, one definition for SQLite and Postgres. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import type { AttestationRef } from "../Domain/AttestationId.js"
import type { Attestation, Claim, Level } from "./Domain.js"

interface AttestationRow {
  readonly seq: number | string
  readonly id: string
  readonly hash_hex: string
  readonly registered_at: string
  readonly signature: string
  readonly signing_key_id: string
  readonly format_version: string
  readonly level: string
  readonly batch_id: number | string | null
  readonly leaf_index: number | null
  readonly t1_at: string | null
  readonly t2_at: string | null
  readonly t2_block: number | string | null
  readonly legacy_id?: number | string | null
}

interface ClaimRow {
  readonly id: number | string
  readonly attestation_seq: number | string
  readonly api_key_id: string
  readonly source: string | null
  readonly extra_data: string | null
  readonly client_encrypted: number | boolean
  readonly etag: string
  readonly created_at: string
  readonly updated_at: string
}

const numOrNull = (v: number | string | null): number | null => (v === null ? null : Number(v))

export const toAttestation = (r: AttestationRow): Attestation => ({
  seq: Number(r.seq),
  id: r.id,
  hashHex: r.hash_hex,
  registeredAt: r.registered_at,
  signature: r.signature,
  signingKeyId: r.signing_key_id,
  formatVersion: r.format_version,
  level: r.level as Level,
  batchId: numOrNull(r.batch_id),
  leafIndex: r.leaf_index === null ? null : Number(r.leaf_index),
  t1At: r.t1_at,
  t2At: r.t2_at,
  t2Block: numOrNull(r.t2_block),
  legacyId: numOrNull(r.legacy_id ?? null)
})

export const toClaim = (r: ClaimRow): Claim => ({
  id: Number(r.id),
  attestationSeq: Number(r.attestation_seq),
  apiKeyId: r.api_key_id,
  source: r.source,
  extraData: r.extra_data === null ? null : JSON.parse(r.extra_data),
  clientEncrypted: r.client_encrypted === true || r.client_encrypted === 1,
  etag: r.etag,
  createdAt: r.created_at,
  updatedAt: r.updated_at
})

export const newEtag = (): string => randomBytes(12).toString("hex")

export interface NewAttestationRow {
  readonly id: string
  readonly hash_hex: string
  readonly registered_at: string
  readonly signature: string
  readonly signing_key_id: string
  readonly format_version: string
}

export interface NewClaimRow {
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

const CHUNK = 400

const chunks = <A>(xs: ReadonlyArray<A>, size = CHUNK): Array<ReadonlyArray<A>> => {
  const out: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size))
  return out
}

export class AttestationRepo extends Effect.Service<AttestationRepo>()("Attestations/AttestationRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    const bool = (b: boolean) => (isPg ? b : b ? 1 : 0)

    const findByHashes = (hashes: ReadonlyArray<string>) =>
      hashes.length === 0
        ? Effect.succeed([] as Array<Attestation>)
        : Effect.map(
          Effect.forEach(chunks(hashes), (part) =>
            sql<AttestationRow>`SELECT * FROM attestations WHERE ${sql.in("hash_hex", part)}`),
          (parts) => parts.flat().map(toAttestation)
        )

    /** One digest's attestation (the verify hot path: one statement, no chunking). */
    const findByHash = (hash: string) =>
      Effect.map(sql<AttestationRow>`SELECT * FROM attestations WHERE hash_hex = ${hash}`, (rows) => rows.length === 0 ? undefined : toAttestation(rows[0]!))

    const findByRef = (ref: AttestationRef) =>
      Effect.map(
        ref._tag === "Id"
          ? sql<AttestationRow>`SELECT * FROM attestations WHERE id = ${ref.id}`
          : sql<AttestationRow>`SELECT * FROM attestations WHERE legacy_id = ${ref.legacyId}`,
        (rows) => (rows[0] ? toAttestation(rows[0]) : undefined)
      )

    /**
     * Inserts rows whose hash is new and returns those it inserted; a row that lost
     * a race to another writer is skipped (not returned), so callers look it up.
     */
    const insertIfAbsent = (rows: ReadonlyArray<NewAttestationRow>) =>
      Effect.map(
        Effect.forEach(chunks(rows), (part) =>
          sql<AttestationRow>`INSERT INTO attestations ${sql.insert(part as Array<any>)}
            ON CONFLICT (hash_hex) DO NOTHING RETURNING *`),
        (parts) => parts.flat().map(toAttestation)
      )

    /** Inserts claims a key does not hold yet and returns the inserted ones. */
    const insertClaimsIfAbsent = (rows: ReadonlyArray<NewClaimRow>) =>
      Effect.map(
        Effect.forEach(chunks(rows), (part) =>
          sql<ClaimRow>`INSERT INTO claims ${
            sql.insert(part.map((r) => ({ ...r, client_encrypted: bool(r.client_encrypted) })) as Array<any>)
          } ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING RETURNING *`),
        (parts) => parts.flat().map(toClaim)
      )

    /** Live claims of `keyId` on the given attestations. */
    const liveClaims = (keyId: string, seqs: ReadonlyArray<number>) =>
      seqs.length === 0
        ? Effect.succeed([] as Array<Claim>)
        : Effect.map(
          Effect.forEach(chunks(seqs), (part) =>
            sql<ClaimRow>`SELECT * FROM claims WHERE api_key_id = ${keyId} AND deleted_at IS NULL
              AND ${sql.in("attestation_seq", part)}`),
          (parts) => parts.flat().map(toClaim)
        )

    const countsByLevel = Effect.map(
      sql<{ level: string; n: number | string }>`SELECT level, COUNT(*) AS n FROM attestations GROUP BY level`,
      (rows) => {
        const out: Record<Level, number> = { T0: 0, T1: 0, T2: 0 }
        for (const r of rows) if (r.level in out) out[r.level as Level] = Number(r.n)
        return out
      }
    )

    return {
      findByHash,
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
