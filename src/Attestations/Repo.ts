/** SQL for attestations and claims, one definition for SQLite and Postgres. */
import { SqlClient, type SqlError, type Statement } from "@effect/sql"
import { Effect, type Either, type Exit, Schema } from "effect"
import type { AttestationRef } from "../Domain/AttestationId.js"
import { bytesToHex, randomBytes } from "../Domain/Bytes.js"
import { makeGroupCommit } from "../Platform/GroupCommit.js"
import { column, decodeRows, decodeRowsSync, decodeRowSync, DbInt } from "../Platform/Rows.js"
import { PgDirect, type RunThen } from "../Platform/PgDirect.js"
import type { RunNow } from "../Platform/SqliteClient.js"
import { type Program, type Step, stepOf } from "../Platform/Steps.js"
import { SqliteReader } from "../Platform/SqliteReader.js"
import { UNDECIDED, type Undecided } from "../Domain/Undecided.js"
import { inTransaction } from "../Platform/Sql.js"
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
const attestationRowsSync = decodeRowsSync(AttestationRow)
const statusRows = decodeRows(AttestationStatusRow)
const statusRow = decodeRowSync(AttestationStatusRow)
const statusRowsSync = decodeRowsSync(AttestationStatusRow)
const STATUS_BY_HASH = `SELECT ${ATTESTATION_STATUS_COLUMNS} FROM attestations WHERE hash_hex = ?`
const claimSourceRow = decodeRowSync(ClaimRow.pipe(Schema.pick("source")))
const ClaimSource = ClaimRow.pipe(Schema.pick("apiKeyId", "attestationSeq", "source"))
type ClaimSource = typeof ClaimSource.Type
const claimSourceRows = decodeRows(ClaimSource)
const claimSourceRowsSync = decodeRowsSync(ClaimSource)
const LIVE_CLAIM_SOURCE = "SELECT source FROM claims WHERE api_key_id = ? AND attestation_seq = ? AND deleted_at IS NULL"
const claimRows = decodeRows(ClaimRow)
const claimRowsSync = decodeRowsSync(ClaimRow)
const AttestationKeys = AttestationRow.pipe(Schema.pick("seq", "id", "hashHex"))
const insertedAttestationKeys = decodeRows(AttestationKeys)
const insertedAttestationKeysSync = decodeRowsSync(AttestationKeys)
const insertedAttestationKeySync = decodeRowSync(AttestationKeys)
const ClaimKeys = ClaimRow.pipe(Schema.pick("id", "attestationSeq", "apiKeyId"))
const insertedClaimKeys = decodeRows(ClaimKeys)
const insertedClaimKeysSync = decodeRowsSync(ClaimKeys)
const levelCounts = decodeRows(Schema.Struct({ level: Level, n: DbInt }))
/** insertWithClaims' rows: an inserted attestation's keys, with one of its new claims (or none). */
const InsertedWithClaimRow = Schema.Struct({
  seq: AttestationRow.fields.seq,
  id: AttestationRow.fields.id,
  hashHex: AttestationRow.fields.hashHex,
  claimId: column("claim_id", Schema.NullOr(DbInt)),
  claimKeyId: column("claim_key_id", Schema.NullOr(Schema.String))
})
const insertedWithClaimRows = decodeRows(InsertedWithClaimRow)
const insertedWithClaimRowsSync = decodeRowsSync(InsertedWithClaimRow)

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

/** A claim to make on the attestation of a digest, before its seq is known (insertWithClaims). */
export type NewClaimByHash = Omit<NewClaimRow, "attestation_seq"> & { readonly hash_hex: string }

/**
 * The columns of `claim` on the attestation `seq`, its flag written as `encrypted`, built
 * field by field: a rest pattern and a spread (`{ hash_hex, ...claim }`, `{ ...claim,
 * attestation_seq }`) take V8's slow path for each claim of each group (README, Performance).
 */
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

/** What insertWithClaims wrote: the attestations it inserted and their claims it made. */
export interface InsertedWithClaims {
  readonly attestations: ReadonlyArray<Attestation>
  readonly claims: ReadonlyArray<Claim>
}

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

/** `xs` in parts of CHUNK items (SQLite's bound-parameter limit). */
const chunksOf = <A>(xs: ReadonlyArray<A>): Array<ReadonlyArray<A>> => {
  const parts: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < xs.length; i += CHUNK) parts.push(xs.slice(i, i + CHUNK))
  return parts
}

/** One statement per CHUNK items, the results in order as one array. */
const inChunks = <A, B, E, R>(
  xs: ReadonlyArray<A>,
  statement: (part: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<B>, E, R>
): Effect.Effect<Array<B>, E, R> =>
  xs.length === 0 ? Effect.succeed([]) : Effect.map(Effect.forEach(chunksOf(xs), statement), (results) => results.flat())

// The generator functions of steps are written once, here, not per call (Steps.stepOf).
function* chunksInTurn<A, B>(xs: ReadonlyArray<A>, statement: (part: ReadonlyArray<A>) => Step<ReadonlyArray<B>>): Program<Array<B>> {
  const out: Array<B> = []
  for (const part of chunksOf(xs)) out.push(...(yield* statement(part)))
  return out
}

/** inChunks as one step of a program run with callbacks (PgDirect): the chunks' statements one after another. */
const inChunksThen = <A, B>(xs: ReadonlyArray<A>, statement: (part: ReadonlyArray<A>) => Step<ReadonlyArray<B>>): Step<Array<B>> =>
  stepOf(chunksInTurn<A, B>, xs, statement)

function* decodedRows<A>(run: RunThen, decode: (rows: ReadonlyArray<unknown>) => A, statement: Statement.Statement<unknown>): Program<A> {
  return decode(yield* run.statementRows(statement))
}

/** A statement's rows, decoded, as one step of a program run with callbacks (PgDirect). */
const rowsThen = <A>(run: RunThen, decode: (rows: ReadonlyArray<unknown>) => A, statement: Statement.Statement<unknown>): Step<A> =>
  stepOf(decodedRows<A>, run, decode, statement)

/** inChunks, run now on SQLite's connection (SqliteNow). */
const inChunksNow = <A, B>(xs: ReadonlyArray<A>, statement: (part: ReadonlyArray<A>) => ReadonlyArray<B>): Array<B> =>
  chunksOf(xs).flatMap(statement)

/**
 * The statements of the attests' group commit (Attestor), each written once: as an
 * Effect through @effect/sql (`groupStatements`), and run now on SQLite's connection
 * (`groupStatementsNow(run)`): the same SQL from the same compiler (the inserts in
 * their one-row form, a statement per row), the rows decoded by the same schemas.
 */
export interface GroupStatements<F extends "effect" | "now" | "then"> {
  readonly findByHashes: (hashes: ReadonlyArray<string>) => Out<F, ReadonlyArray<Attestation>>
  readonly liveClaims: (keyId: string, seqs: ReadonlyArray<number>) => Out<F, ReadonlyArray<Claim>>
  readonly insertIfAbsent: (rows: ReadonlyArray<NewAttestationRow>) => Out<F, ReadonlyArray<Attestation>>
  readonly insertClaimsIfAbsent: (rows: ReadonlyArray<NewClaimRow>) => Out<F, ReadonlyArray<Claim>>
  /**
   * Postgres only (undefined on SQLite): inserts the attestations whose digest is new
   * and, for each it inserted, the claims on its digest, in one statement (its own
   * transaction). A row another writer inserted first is skipped with its claims.
   */
  readonly insertWithClaims?:
    | ((rows: ReadonlyArray<NewAttestationRow>, claims: ReadonlyArray<NewClaimByHash>) => Out<F, InsertedWithClaims>)
    | undefined
}
type Out<F, A> = F extends "effect" ? Effect.Effect<A, SqlError.SqlError> : F extends "then" ? Step<A> : A

export class AttestationRepo extends Effect.Service<AttestationRepo>()("Attestations/AttestationRepo", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    /** A claim's row with its flag as SQLite stores a boolean (0 or 1). */
    const sqliteClaimRow = (r: NewClaimRow) => claimColumns(r, r.attestation_seq, r.client_encrypted ? 1 : 0)

    /**
     * `column` among `values`: on Postgres `= ANY` of one array parameter, so the statement's
     * text is the same for any number of values and PgDirect prepares it once per connection
     * (README, Performance); on SQLite, which has no arrays, `IN (…)`.
     */
    const among = (column: "hash_hex" | "api_key_id" | "attestation_seq", values: ReadonlyArray<string | number>) =>
      isPg
        ? sql`${sql(column)} = ANY(${values}::${sql.literal(column === "attestation_seq" ? "bigint" : "text")}[])`
        : sql.in(column, values)

    const findByHashesStatement = (part: ReadonlyArray<string>) => sql`SELECT * FROM attestations WHERE ${among("hash_hex", part)}`
    const findByHashes = (hashes: ReadonlyArray<string>) =>
      inChunks(hashes, (part) => attestationRows(findByHashesStatement(part)))

    /**
     * A group read's batch, from `read`: the batch's statement and what each item gets
     * from its rows. As an Effect through @effect/sql (`readEffect`), and with callbacks
     * on a Postgres pool client (PgDirect), with no fiber (`readThen`).
     */
    type Read<I, Row, O> = (items: ReadonlyArray<I>) => readonly [Statement.Statement<unknown>, (rows: ReadonlyArray<Row>) => ReadonlyArray<O>]
    const readEffect = <I, Row, O>(
      decode: (rows: Statement.Statement<unknown>) => Effect.Effect<ReadonlyArray<Row>, SqlError.SqlError>,
      read: Read<I, Row, O>
    ) =>
    (items: ReadonlyArray<I>) => {
      const [statement, answers] = read(items)
      return Effect.map(decode(statement), answers)
    }
    const pgDirect = yield* PgDirect
    const readThen = <I, Row, O>(decode: (rows: ReadonlyArray<unknown>) => ReadonlyArray<Row>, read: Read<I, Row, O>) =>
      pgDirect && ((items: ReadonlyArray<I>, k: (outcome: Either.Either<ReadonlyArray<O>, unknown>) => void) => {
        const [statement, answers] = read(items)
        pgDirect.runThen((run) => decodedRows(run, (rows) => answers(decode(rows)), statement), k)
      })

    // Lookups that arrive in the same turn of the event loop share one statement
    // (a group read, as attests share a transaction): under load, one SELECT … IN
    // answers many verifies instead of one statement each through @effect/sql, and
    // on Postgres one round trip instead of many (README, Performance). A batch
    // (at most 256 digests) fits one statement's parameters on both stores. A
    // verify answers with five columns: it reads and decodes those, not the whole row.
    const statusesRead = (hashes: ReadonlyArray<string>) =>
      [
        hashes.length === 1
          ? sql`SELECT ${sql.unsafe(ATTESTATION_STATUS_COLUMNS)} FROM attestations WHERE hash_hex = ${hashes[0]!}`
          : sql`SELECT ${sql.unsafe(ATTESTATION_STATUS_COLUMNS)} FROM attestations WHERE ${among("hash_hex", [...new Set(hashes)])}`,
        (rows: ReadonlyArray<AttestationStatus>) => {
          const byHash = new Map<string, AttestationStatus>(rows.map((a) => [a.hashHex, a]))
          return hashes.map((h) => byHash.get(h))
        }
      ] as const
    const findStatuses = readEffect(statusRows, statusesRead)
    const findStatus = (hash: string) => Effect.map(findStatuses([hash]), (answers) => answers[0])
    const groupRead = yield* makeGroupCommit({
      process: findStatuses,
      processThen: readThen(statusRowsSync, statusesRead),
      maxBatch: 256,
      workers: isPg ? 2 : 1
    })

    /**
     * One digest's attestation status (the verify hot path: seq, id, hash, time,
     * level), read in a group with the lookups of the same turn. Inside a
     * transaction it reads on the transaction's connection instead: the group's
     * worker could not use it.
     */
    const findByHash = (hash: string) =>
      Effect.flatMap(inTransaction, (inTx) => (inTx ? findStatus(hash) : groupRead(hash)))

    /**
     * findByHash outside a transaction for a caller without a fiber: `done` gets the
     * outcome of the lookup's group read (the fast lane's verify on Postgres).
     */
    const findByHashThen = groupRead.enqueue

    /**
     * findByHash, answered synchronously on SQLite's read-only connection
     * (SqliteReader: committed rows only); UNDECIDED while the file is busy.
     * Undefined on Postgres and in memory, where there is no such connection.
     */
    const reader = yield* SqliteReader
    /** The first row of `source` on the reader, decoded; undefined when none, UNDECIDED while the file is busy. */
    const firstNow = reader === undefined
      ? undefined
      : <A>(decode: (row: unknown) => A, source: string, ...params: ReadonlyArray<unknown>): A | undefined | Undecided => {
        const row = reader.first(source, ...params)
        return row === undefined || row === UNDECIDED ? row : decode(row)
      }
    const findByHashNow = firstNow && ((hash: string): AttestationStatus | undefined | Undecided => firstNow(statusRow, STATUS_BY_HASH, hash))

    /**
     * The source of `keyId`'s live claim on the attestation `seq` (a key holds at most
     * one: index claims_live), read as findByHashNow reads: liveClaims' answer for one
     * attestation, as a keyed verify needs it. Undefined on Postgres and in memory.
     */
    const liveClaimNow = firstNow &&
      ((keyId: string, seq: number): { readonly source: string | null } | undefined | Undecided =>
        firstNow(claimSourceRow, LIVE_CLAIM_SOURCE, keyId, seq))

    // The keyed verifies of one turn read their keys' claims in one statement too (a
    // group read, as their lookups are): the claims of any of their keys on any of
    // their attestations, each request then taking its own pair's.
    const claimSourcesRead = (pairs: ReadonlyArray<readonly [keyId: string, seq: number]>) =>
      [
        sql`SELECT api_key_id, attestation_seq, source FROM claims WHERE deleted_at IS NULL
          AND ${among("api_key_id", [...new Set(pairs.map(([k]) => k))])}
          AND ${among("attestation_seq", [...new Set(pairs.map(([, s]) => s))])}`,
        (rows: ReadonlyArray<ClaimSource>) => {
          const byPair = new Map(rows.map((r) => [`${r.apiKeyId} ${r.attestationSeq}`, r]))
          return pairs.map(([k, s]) => byPair.get(`${k} ${s}`))
        }
      ] as const
    const claimGroupRead = yield* makeGroupCommit({
      process: readEffect(claimSourceRows, claimSourcesRead),
      processThen: readThen(claimSourceRowsSync, claimSourcesRead),
      maxBatch: 256,
      workers: isPg ? 2 : 1
    })

    /**
     * liveClaimNow's answer for a caller without a fiber, through a group read: `done`
     * gets the source of `keyId`'s live claim on `seq`, or undefined (a keyed verify on
     * Postgres). It runs inside the group's batch: it must not throw (GroupCommit).
     */
    const liveClaimThen = (keyId: string, seq: number, done: (exit: Exit.Exit<{ readonly source: string | null } | undefined, unknown>) => void) =>
      claimGroupRead.enqueue([keyId, seq], done)

    /**
     * The source of `keyId`'s live claim on `seq`, or undefined: a keyed verify's second
     * read, in the claims' group read (inside a transaction, on its connection).
     */
    const liveClaimSource = (keyId: string, seq: number) =>
      Effect.flatMap(inTransaction, (inTx) =>
        inTx ? Effect.map(liveClaims(keyId, [seq]), ([claim]) => claim) : claimGroupRead([keyId, seq]))

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
     * Inserts rows whose hash is new and returns those it inserted; a row that lost
     * a race to another writer is skipped (not returned), so callers look it up.
     * The statement returns only the keys (seq, id, hash); the rest of each row is
     * what was inserted (`insertedAttestation`). `RETURNING *` and decoding every
     * column cost ~8 µs more per new attestation on SQLite (README, Performance).
     */
    const insertInto = (part: ReadonlyArray<NewAttestationRow>) =>
      sql`INSERT INTO attestations ${sql.insert(part)} ON CONFLICT (hash_hex) DO NOTHING`
    const insertStatement = (part: ReadonlyArray<NewAttestationRow>) => sql`${insertInto(part)} RETURNING seq, id, hash_hex`
    const inserted = (part: ReadonlyArray<NewAttestationRow>, keys: ReadonlyArray<Pick<Attestation, "seq" | "id" | "hashHex">>) => {
      const byHash = new Map(part.map((r) => [r.hash_hex, r]))
      return keys.map((k) => insertedAttestation(byHash.get(k.hashHex)!, k))
    }
    const insertIfAbsent = (rows: ReadonlyArray<NewAttestationRow>) =>
      inChunks(rows, (part) => Effect.map(insertedAttestationKeys(insertStatement(part)), (keys) => inserted(part, keys)))

    /** Inserts claims a key does not hold yet and returns the inserted ones (keys returned, as above). */
    const insertClaimsInto = (part: ReadonlyArray<NewClaimRow>) =>
      sql`INSERT INTO claims ${sql.insert(isPg ? part : part.map(sqliteClaimRow))}
        ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING`
    const insertClaimsStatement = (part: ReadonlyArray<NewClaimRow>) => sql`${insertClaimsInto(part)} RETURNING id, attestation_seq, api_key_id`
    const insertedClaims = (part: ReadonlyArray<NewClaimRow>, keys: ReadonlyArray<Pick<Claim, "id" | "attestationSeq" | "apiKeyId">>) => {
      const byKey = new Map(part.map((r) => [`${r.attestation_seq}\u0000${r.api_key_id}`, r]))
      return keys.map((k) => insertedClaim(byKey.get(`${k.attestationSeq}\u0000${k.apiKeyId}`)!, k.attestationSeq, k.id))
    }
    const insertClaimsIfAbsent = (rows: ReadonlyArray<NewClaimRow>) =>
      inChunks(rows, (part) => Effect.map(insertedClaimKeys(insertClaimsStatement(part)), (keys) => insertedClaims(part, keys)))

    /**
     * insertWithClaims' statement: a data-modifying CTE over arrays (one parameter per
     * column, whatever the number of rows), the claims' rows joined to the attestations
     * inserted by digest and taken in seq order, as insertClaimsIfAbsent's. Postgres only
     * (SQLite has no data-modifying CTE, and inserts faster a row at a time: above).
     */
    const insertWithClaimsStatement = (rows: ReadonlyArray<NewAttestationRow>, claims: ReadonlyArray<NewClaimByHash>) => {
      const col = <R, K extends keyof R>(xs: ReadonlyArray<R>, k: K) => xs.map((x) => x[k])
      return sql`WITH a AS (
          INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version)
          SELECT * FROM unnest(${col(rows, "id")}::text[], ${col(rows, "hash_hex")}::text[], ${col(rows, "registered_at")}::text[],
            ${col(rows, "signature")}::text[], ${col(rows, "signing_key_id")}::text[], ${col(rows, "format_version")}::text[])
          ON CONFLICT (hash_hex) DO NOTHING
          RETURNING seq, id, hash_hex),
        c AS (
          INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
          SELECT a.seq, k.api_key_id, k.org_id, k.source, k.extra_data, k.client_encrypted, k.etag, k.created_at, k.updated_at
          FROM a JOIN unnest(${col(claims, "hash_hex")}::text[], ${col(claims, "api_key_id")}::text[], ${col(claims, "org_id")}::text[],
            ${col(claims, "source")}::text[], ${col(claims, "extra_data")}::text[], ${col(claims, "client_encrypted")}::boolean[],
            ${col(claims, "etag")}::text[], ${col(claims, "created_at")}::text[], ${col(claims, "updated_at")}::text[])
            AS k(hash_hex, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
            ON k.hash_hex = a.hash_hex
          ORDER BY a.seq, k.api_key_id
          ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING
          RETURNING id, attestation_seq, api_key_id)
        SELECT a.seq, a.id, a.hash_hex, c.id AS claim_id, c.api_key_id AS claim_key_id
        FROM a LEFT JOIN c ON c.attestation_seq = a.seq`
    }
    const insertedWithClaims = (
      rows: ReadonlyArray<NewAttestationRow>,
      claims: ReadonlyArray<NewClaimByHash>,
      out: ReadonlyArray<typeof InsertedWithClaimRow.Type>
    ): InsertedWithClaims => {
      const rowByHash = new Map(rows.map((r) => [r.hash_hex, r]))
      const claimByKey = new Map(claims.map((c) => [`${c.hash_hex}\u0000${c.api_key_id}`, c]))
      const attestations = new Map<number, Attestation>()
      const made: Array<Claim> = []
      for (const o of out) {
        if (!attestations.has(o.seq)) attestations.set(o.seq, insertedAttestation(rowByHash.get(o.hashHex)!, o))
        if (o.claimId === null || o.claimKeyId === null) continue
        made.push(insertedClaim(claimByKey.get(`${o.hashHex}\u0000${o.claimKeyId}`)!, o.seq, o.claimId))
      }
      return { attestations: [...attestations.values()], claims: made }
    }

    /** Live claims of `keyId` on the given attestations. */
    const liveClaimsStatement = (keyId: string, part: ReadonlyArray<number>) =>
      sql`SELECT * FROM claims WHERE api_key_id = ${keyId} AND deleted_at IS NULL AND ${among("attestation_seq", part)}`
    const liveClaims = (keyId: string, seqs: ReadonlyArray<number>) =>
      inChunks(seqs, (part) => claimRows(liveClaimsStatement(keyId, part)))

    const groupStatements: GroupStatements<"effect"> = {
      findByHashes,
      liveClaims,
      insertIfAbsent,
      insertClaimsIfAbsent,
      insertWithClaims: isPg
        ? (rows, claims) =>
          Effect.map(insertedWithClaimRows(insertWithClaimsStatement(rows, claims)), (out) => insertedWithClaims(rows, claims, out))
        : undefined
    }
    const groupStatementsNow = (run: RunNow): GroupStatements<"now"> => ({
      findByHashes: (hashes) => inChunksNow(hashes, (part) => attestationRowsSync(run.statementRows(findByHashesStatement(part)))),
      liveClaims: (keyId, seqs) => inChunksNow(seqs, (part) => claimRowsSync(run.statementRows(liveClaimsStatement(keyId, part)))),
      // A row per statement: run now, each is a call into SQLite with nothing around it, and SQLite
      // inserts ~2.5× faster from one prepared single-row statement than from one multi-row VALUES
      // (README, Performance). The Effect form sends one statement per chunk: there each statement
      // costs a fiber's steps through @effect/sql, and on Postgres a round trip. With one row, no
      // RETURNING: the row was inserted when it changed one, and its key (seq, the claim's id) is
      // the rowid SQLite gives back, which saves SQLite its RETURNING's work (~4 µs per digest).
      insertIfAbsent: (rows) =>
        rows.flatMap((row) => {
          const { changes, lastInsertRowid } = run.statementRun(insertInto([row]))
          return changes === 0 ? [] : [insertedAttestation(row, insertedAttestationKeySync({ seq: lastInsertRowid, id: row.id, hash_hex: row.hash_hex }))]
        }),
      insertClaimsIfAbsent: (rows) =>
        rows.flatMap((row) => {
          const { changes, lastInsertRowid } = run.statementRun(insertClaimsInto([row]))
          return changes === 0 ? [] : [insertedClaim(row, row.attestation_seq, lastInsertRowid)]
        })
    })
    /** The Effect form's statements (multi-row inserts: each is a round trip), run with callbacks on a Postgres pool client (PgDirect). */
    const groupStatementsThen = (run: RunThen): GroupStatements<"then"> => {
      const rowsOf = <A>(decode: (rows: ReadonlyArray<unknown>) => A, statement: Statement.Statement<unknown>) => rowsThen(run, decode, statement)
      return {
        findByHashes: (hashes) => inChunksThen(hashes, (part) => rowsOf(attestationRowsSync, findByHashesStatement(part))),
        liveClaims: (keyId, seqs) => inChunksThen(seqs, (part) => rowsOf(claimRowsSync, liveClaimsStatement(keyId, part))),
        insertIfAbsent: (rows) =>
          inChunksThen(rows, (part) => rowsOf((r) => inserted(part, insertedAttestationKeysSync(r)), insertStatement(part))),
        insertClaimsIfAbsent: (rows) =>
          inChunksThen(rows, (part) => rowsOf((r) => insertedClaims(part, insertedClaimKeysSync(r)), insertClaimsStatement(part))),
        insertWithClaims: (rows, claims) =>
          rowsOf((out) => insertedWithClaims(rows, claims, insertedWithClaimRowsSync(out)), insertWithClaimsStatement(rows, claims))
      }
    }

    const countsByLevel = Effect.map(
      levelCounts(sql`SELECT level, COUNT(*) AS n FROM attestations GROUP BY level`),
      (rows) => {
        const out: Record<Level, number> = { T0: 0, T1: 0, T2: 0 }
        for (const r of rows) out[r.level] = r.n
        return out
      }
    )

    return {
      findByHash,
      findByHashNow,
      findByHashThen,
      liveClaimNow,
      liveClaimThen,
      liveClaimSource,
      findByHashes,
      findByRef,
      insertIfAbsent,
      insertClaimsIfAbsent,
      liveClaims,
      groupStatements,
      groupStatementsNow,
      groupStatementsThen,
      countsByLevel,
      withTransaction: sql.withTransaction
    }
  })
}) {}
