/**
 * `attestd import FILE.jsonl` (CONTRACT §2, issue 11 §6): historical attestations,
 * one JSON object a line: `{hash_hex, registered_at, signature, format_version,
 * public_key (JWK), legacy_id?}`.
 *
 * Each line is checked on its own (fields, the key, the signature over its T0
 * payload with that key) and stored on its own terms: a bad line is reported with
 * its line number and nothing of it is stored, the good lines of the same file are
 * stored. A stored record keeps its original registered_at, signature and key; the
 * key is listed by GET /v1/keys as `status: "retired"`; the sealer then takes the
 * record into T1/T2 like any T0 attestation. Re-importing a line finds the identical
 * record and changes nothing; a hash already held with other facts (another
 * registered_at, signature, key or legacy_id) or a legacy_id already held by
 * another hash is a conflict for that line.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Effect, Schema } from "effect"
import type { KeyObject } from "node:crypto"
import { accessSync, constants, createReadStream, statSync } from "node:fs"
import { createInterface } from "node:readline"
import { isLegacyId, newAttestationIds } from "../Domain/AttestationId.js"
import { base64ToBytes, bytesToBase64 } from "../Domain/Bytes.js"
import { HASH_HEX_PATTERN } from "../Domain/HashHex.js"
import { jwkThumbprint, normalizeLowS, type PublicJwk } from "../Domain/T0.js"
import { formatMillis, parseMicros } from "../Domain/Time.js"
import { jwkToKeyObject, verifyT0 } from "../Platform/T0Node.js"
import { column, DbInt, decodeRows } from "../Platform/Rows.js"
import type { Attestation } from "./Domain.js"
import { AttestationRepo } from "./Repo.js"
import { retryingConflicts } from "../Platform/Sql.js"

export type ImportErrorCode = "INVALID_LINE" | "INVALID_SIGNATURE" | "CONFLICT" | "STORE_ERROR"

export interface ImportLineError {
  readonly line: number
  readonly code: ImportErrorCode
  readonly message: string
}

export interface ImportRecord {
  readonly line: number
  readonly hashHex: string
  readonly registeredAt: string
  /** Base64 DER, low-S (a high-S original is stored as its equivalent low-S form). */
  readonly signature: string
  readonly formatVersion: string
  readonly jwk: PublicJwk
  readonly legacyId: number | null
}

export interface ImportReport {
  /** Non-blank lines read. */
  readonly lines: number
  readonly imported: number
  readonly existing: number
  readonly failed: number
  /** Signing keys this import added to the key list (as retired keys). */
  readonly retired_keys: ReadonlyArray<string>
  readonly errors: ReadonlyArray<ImportLineError>
}

export const IMPORT_LINE_MAX_BYTES = 16 * 1024
const FIELDS: ReadonlySet<string> = new Set(["hash_hex", "registered_at", "signature", "format_version", "public_key", "legacy_id"])
const FORMAT_VERSION = /^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}$/
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
const COORD = /^[A-Za-z0-9_-]{43}$/

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

const excerpt = (v: unknown): string => {
  const s = typeof v === "string" ? JSON.stringify(v) : typeof v
  return s.length > 40 ? `${s.slice(0, 37)}...` : s
}

const parseJwk = (v: unknown, keys: ImportKeys): PublicJwk | string => {
  if (!isRecord(v)) return "public_key must be a JWK object"
  if ("d" in v) return "public_key holds a private key (d); give the public key only"
  if (v.kty !== "EC") return "public_key.kty must be \"EC\""
  if (v.crv !== "P-256") return "public_key.crv must be \"P-256\""
  if (v.alg !== undefined && v.alg !== "ES256") return "public_key.alg must be \"ES256\" when present"
  if (v.use !== undefined && v.use !== "sig") return "public_key.use must be \"sig\" when present"
  if (typeof v.x !== "string" || !COORD.test(v.x)) return "public_key.x must be 43 Base64URL characters"
  if (typeof v.y !== "string" || !COORD.test(v.y)) return "public_key.y must be 43 Base64URL characters"
  const kid = keys.thumbprint(v.x, v.y)
  if (v.kid !== undefined && v.kid !== kid) return `public_key.kid ${excerpt(v.kid)} is not the key's RFC 7638 thumbprint ${kid}`
  return { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid, x: v.x, y: v.y }
}

/**
 * The keys one import run has met: a historical file holds few keys and many
 * lines, and parsing a key costs about as much as checking a signature with it,
 * so each key's thumbprint and KeyObject are made once per run (at most 1,000
 * keys are kept).
 */
export interface ImportKeys {
  readonly thumbprint: (x: string, y: string) => string
  /** The key as a KeyObject, or undefined when it is not a point on P-256. */
  readonly keyObject: (jwk: PublicJwk) => KeyObject | undefined
}

export const makeImportKeys = (): ImportKeys => {
  const thumbprints = new Map<string, string>()
  const keyObjects = new Map<string, KeyObject | undefined>()
  return {
    thumbprint: (x, y) => {
      const id = `${x}.${y}`
      let kid = thumbprints.get(id)
      if (kid === undefined) {
        if (thumbprints.size >= 1000) thumbprints.clear()
        thumbprints.set(id, kid = jwkThumbprint(x, y))
      }
      return kid
    },
    keyObject: (jwk) => {
      const id = `${jwk.x}.${jwk.y}`
      if (keyObjects.has(id)) return keyObjects.get(id)
      let key: KeyObject | undefined
      try {
        key = jwkToKeyObject(jwk)
      } catch {
        key = undefined
      }
      if (keyObjects.size >= 1000) keyObjects.clear()
      keyObjects.set(id, key)
      return key
    }
  }
}

/** Checks one line: its fields, its key and its signature. Touches no store. */
export const parseImportLine = (text: string, line: number, nowMicros: bigint, keys: ImportKeys): ImportRecord | ImportLineError => {
  const bad = (message: string, code: ImportErrorCode = "INVALID_LINE"): ImportLineError => ({ line, code, message })
  if (Buffer.byteLength(text, "utf8") > IMPORT_LINE_MAX_BYTES) return bad(`line is longer than ${IMPORT_LINE_MAX_BYTES} bytes`)
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch {
    return bad("not valid JSON")
  }
  if (!isRecord(v)) return bad("expected one JSON object")
  const unknown = Object.keys(v).filter((k) => !FIELDS.has(k))
  if (unknown.length > 0) return bad(`unknown field(s): ${unknown.slice(0, 5).map(excerpt).join(", ")}`)
  const { format_version, hash_hex, legacy_id, public_key, registered_at, signature } = v
  if (typeof hash_hex !== "string" || !HASH_HEX_PATTERN.test(hash_hex)) return bad("hash_hex must be exactly 64 lowercase hex characters")
  if (typeof registered_at !== "string") return bad("registered_at is missing")
  const micros = parseMicros(registered_at)
  if (micros === undefined) return bad(`registered_at ${excerpt(registered_at)} is not YYYY-MM-DDTHH:MM:SS.ffffff+00:00`)
  if (micros > nowMicros) return bad(`registered_at ${registered_at} is in the future`)
  if (typeof format_version !== "string" || !FORMAT_VERSION.test(format_version)) return bad("format_version must look like 2.0.0")
  if (typeof signature !== "string" || signature.length === 0 || signature.length > 200 || !BASE64.test(signature)) {
    return bad("signature must be the Base64 DER ECDSA signature")
  }
  let lowS: Uint8Array
  try {
    lowS = normalizeLowS(base64ToBytes(signature))
  } catch (e) {
    return bad(`signature is not a DER ECDSA signature (${e instanceof Error ? e.message : "malformed"})`)
  }
  let legacyId: number | null = null
  if (legacy_id !== undefined && legacy_id !== null) {
    if (!isLegacyId(legacy_id)) return bad(`legacy_id must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}`)
    legacyId = legacy_id
  }
  const jwk = parseJwk(public_key, keys)
  if (typeof jwk === "string") return bad(jwk)
  const key = keys.keyObject(jwk)
  if (key === undefined) return bad("public_key is not a point on P-256")
  const record: ImportRecord = {
    line,
    hashHex: hash_hex,
    registeredAt: registered_at,
    signature: bytesToBase64(lowS),
    formatVersion: format_version,
    jwk,
    legacyId
  }
  if (!verifyT0(record, key)) {
    return bad(`signature does not verify over "${format_version}|${hash_hex}|${registered_at}" with key ${jwk.kid}`, "INVALID_SIGNATURE")
  }
  return record
}

/** What differs between a stored attestation and an import line for the same hash; empty when they agree. */
const differences = (a: Attestation, r: ImportRecord): Array<string> => {
  const out: Array<string> = []
  if (a.registeredAt !== r.registeredAt) out.push(`registered_at ${a.registeredAt}`)
  if (a.formatVersion !== r.formatVersion) out.push(`format_version ${a.formatVersion}`)
  if (a.signingKeyId !== r.jwk.kid) out.push(`signing key ${a.signingKeyId}`)
  else if (a.signature !== r.signature) out.push("another signature")
  if (a.legacyId !== r.legacyId) out.push(a.legacyId === null ? "no legacy_id" : `legacy_id ${a.legacyId}`)
  return out
}

const conflictFor = (a: Attestation, r: ImportRecord, diff: ReadonlyArray<string>): ImportLineError => ({
  line: r.line,
  code: "CONFLICT",
  message: `hash ${r.hashHex} is already attested (${a.id}) with ${diff.join(", ")}`
})

type Outcome = { readonly _tag: "imported"; readonly kid: string } | { readonly _tag: "existing" } | { readonly _tag: "failed"; readonly error: ImportLineError }

const legacyHolderRows = decodeRows(Schema.Struct({ legacyId: column("legacy_id", DbInt), hashHex: column("hash_hex", Schema.String) }))
const insertedHashRows = decodeRows(Schema.Struct({ hashHex: column("hash_hex", Schema.String) }))

/** Stores checked records in one transaction; one outcome per record, in order. */
const storeChunk = (records: ReadonlyArray<ImportRecord>, now: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* AttestationRepo
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    const hashes = [...new Set(records.map((r) => r.hashHex))]
    const stored = new Map<string, Attestation>()
    for (const a of yield* repo.findByHashes(hashes)) stored.set(a.hashHex, a)
    const legacyIds = [...new Set(records.flatMap((r) => (r.legacyId === null ? [] : [r.legacyId])))]
    const legacyHolder = new Map<number, string>()
    if (legacyIds.length > 0) {
      for (const row of yield* legacyHolderRows(sql`
        SELECT legacy_id, hash_hex FROM attestations WHERE ${sql.in("legacy_id", legacyIds)}`)) {
        legacyHolder.set(row.legacyId, row.hashHex)
      }
    }
    const outcomes: Array<Outcome> = []
    const pending = new Map<string, ImportRecord>()
    const toInsert: Array<ImportRecord> = []
    for (const r of records) {
      const earlier = stored.get(r.hashHex)
      if (earlier) {
        const diff = differences(earlier, r)
        outcomes.push(diff.length === 0 ? { _tag: "existing" } : { _tag: "failed", error: conflictFor(earlier, r, diff) })
        continue
      }
      const inFile = pending.get(r.hashHex)
      if (inFile) {
        const same = inFile.registeredAt === r.registeredAt && inFile.signature === r.signature && inFile.jwk.kid === r.jwk.kid &&
          inFile.formatVersion === r.formatVersion && inFile.legacyId === r.legacyId
        outcomes.push(same ? { _tag: "existing" } : {
          _tag: "failed",
          error: { line: r.line, code: "CONFLICT", message: `hash ${r.hashHex} is also on line ${inFile.line} with other facts` }
        })
        continue
      }
      if (r.legacyId !== null) {
        const holder = legacyHolder.get(r.legacyId)
        if (holder !== undefined && holder !== r.hashHex) {
          outcomes.push({
            _tag: "failed",
            error: { line: r.line, code: "CONFLICT", message: `legacy_id ${r.legacyId} already belongs to another attestation` }
          })
          continue
        }
        legacyHolder.set(r.legacyId, r.hashHex)
      }
      pending.set(r.hashHex, r)
      toInsert.push(r)
      outcomes.push({ _tag: "imported", kid: r.jwk.kid })
    }
    if (toInsert.length === 0) return outcomes
    const keys = new Map(toInsert.map((r) => [r.jwk.kid, r.jwk]))
    for (const jwk of keys.values()) {
      // A key this instance signs with stays active; any other one is listed as retired, its window set below.
      yield* sql`INSERT INTO signing_keys (kid, jwk, created_at, active)
        VALUES (${jwk.kid}, ${JSON.stringify(jwk)}, ${now}, ${isPg ? false : 0}) ON CONFLICT (kid) DO NOTHING`
    }
    const inserted = new Set<string>()
    for (let i = 0; i < toInsert.length; i += 200) {
      const chunk = toInsert.slice(i, i + 200)
      const ids = newAttestationIds(chunk.length)
      const part = chunk.map((r, j) => ({
        id: ids[j]!,
        hash_hex: r.hashHex,
        registered_at: r.registeredAt,
        signature: r.signature,
        signing_key_id: r.jwk.kid,
        format_version: r.formatVersion,
        legacy_id: r.legacyId
      }))
      const rows = yield* insertedHashRows(sql`INSERT INTO registry ${sql.insert(part)}
        ON CONFLICT (hash_hex) DO NOTHING RETURNING hash_hex`)
      for (const row of rows) inserted.add(row.hashHex)
    }
    // An imported key's window spans the signatures imported with it (wire times sort as text).
    const spans = new Map<string, { first: string; last: string }>()
    for (const r of toInsert) {
      if (!inserted.has(r.hashHex)) continue
      const span = spans.get(r.jwk.kid)
      if (span === undefined) spans.set(r.jwk.kid, { first: r.registeredAt, last: r.registeredAt })
      else spans.set(r.jwk.kid, { first: r.registeredAt < span.first ? r.registeredAt : span.first, last: r.registeredAt > span.last ? r.registeredAt : span.last })
    }
    for (const [kid, { first, last }] of spans) {
      yield* sql`UPDATE signing_keys SET
        activated_at = CASE WHEN activated_at IS NULL OR activated_at > ${first} THEN ${first} ELSE activated_at END,
        retired_at = CASE WHEN retired_at IS NULL OR retired_at < ${last} THEN ${last} ELSE retired_at END
        WHERE kid = ${kid} AND NOT active`
    }
    // A hash attested through the API between our read and our insert: compare with what won.
    const lost = toInsert.filter((r) => !inserted.has(r.hashHex))
    if (lost.length > 0) {
      const winners = new Map<string, Attestation>()
      for (const a of yield* repo.findByHashes(lost.map((r) => r.hashHex))) winners.set(a.hashHex, a)
      records.forEach((r, i) => {
        if (outcomes[i]!._tag !== "imported" || inserted.has(r.hashHex)) return
        const w = winners.get(r.hashHex)!
        const diff = differences(w, r)
        outcomes[i] = diff.length === 0 ? { _tag: "existing" } : { _tag: "failed", error: conflictFor(w, r, diff) }
      })
    }
    return outcomes
  })

export const IMPORT_CHUNK = 500

/**
 * Imports the lines of `source` (blank lines are skipped; line numbers count every
 * line from 1). Chunks of checked lines are stored in one transaction each; if a
 * chunk's transaction fails, its lines are stored one by one so a failure is
 * reported for its own line only.
 */
export const importLines = (source: AsyncIterable<string> | Iterable<string>) =>
  Effect.gen(function*() {
    // Taken before anything is awaited: readline drops the lines it emits before its iterator exists.
    const iterator = Symbol.asyncIterator in source
      ? (source as AsyncIterable<string>)[Symbol.asyncIterator]()
      : (source as Iterable<string>)[Symbol.iterator]()
    const sql = yield* SqlClient.SqlClient
    const errors: Array<ImportLineError> = []
    const retiredKeys = new Set<string>()
    const knownKeys = new Set(
      (yield* sql<{ kid: string }>`SELECT kid FROM signing_keys`).map((r) => r.kid)
    )
    let lines = 0
    let imported = 0
    let existing = 0
    let chunk: Array<ImportRecord> = []
    const seenKeys = makeImportKeys()

    const apply = (outcomes: ReadonlyArray<Outcome>) => {
      for (const o of outcomes) {
        if (o._tag === "imported") {
          imported++
          if (!knownKeys.has(o.kid)) {
            knownKeys.add(o.kid)
            retiredKeys.add(o.kid)
          }
        } else if (o._tag === "existing") existing++
        else errors.push(o.error)
      }
    }

    const flush = Effect.gen(function*() {
      if (chunk.length === 0) return
      const records = chunk
      chunk = []
      const now = formatMillis(yield* Clock.currentTimeMillis)
      const whole = yield* Effect.either(retryingConflicts(sql.withTransaction(storeChunk(records, now))))
      if (whole._tag === "Right") return apply(whole.right)
      for (const r of records) {
        const one = yield* Effect.either(retryingConflicts(sql.withTransaction(storeChunk([r], now))))
        if (one._tag === "Right") apply(one.right)
        else errors.push({ line: r.line, code: "STORE_ERROR", message: `the store refused this line: ${String(one.left).slice(0, 200)}` })
      }
    })

    let lineNo = 0
    while (true) {
      const next = yield* Effect.tryPromise({
        try: async () => iterator.next(),
        catch: (e) => new Error(`reading line ${lineNo + 1} failed: ${e instanceof Error ? e.message : String(e)}`)
      })
      if (next.done) break
      lineNo++
      const text = next.value
      if (text.trim().length === 0) continue
      lines++
      const nowMicros = BigInt(yield* Clock.currentTimeMillis) * 1000n
      const parsed = parseImportLine(text.replace(/^\uFEFF/, ""), lineNo, nowMicros, seenKeys)
      if ("code" in parsed) errors.push(parsed)
      else chunk.push(parsed)
      if (chunk.length >= IMPORT_CHUNK) yield* flush
    }
    yield* flush
    errors.sort((a, b) => a.line - b.line)
    const report: ImportReport = {
      lines,
      imported,
      existing,
      failed: errors.length,
      retired_keys: [...retiredKeys],
      errors
    }
    return report
  })

/** Imports a JSONL file, read line by line (it may be larger than memory). */
export const importFile = (path: string) =>
  Effect.gen(function*() {
    // An unreadable file (missing, a directory, no permission) fails before any line is processed.
    yield* Effect.try({
      try: () => {
        if (!statSync(path).isFile()) throw new Error("not a regular file")
        accessSync(path, constants.R_OK)
      },
      catch: (e) => new Error(`cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`)
    })
    const stream = createReadStream(path, { encoding: "utf8" })
    const rl = createInterface({ input: stream, crlfDelay: Infinity })
    // The iterator exists from the start, so it buffers every line however long the store takes.
    const lines = rl[Symbol.asyncIterator]()
    return yield* importLines({ [Symbol.asyncIterator]: () => lines }).pipe(Effect.ensuring(Effect.sync(() => {
      rl.close()
      stream.destroy()
    })))
  })
