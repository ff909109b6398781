/**
 * Offline verifier of an evidence bundle (spec 2.7, 9.5, 9.6; CONTRACT §1, §2, §5).
 *
 * No network, no database, no Effect runtime: node:crypto, the Merkle v2 and
 * OpenTimestamps codecs of src/Domain and the RFC 3161 validation of
 * src/Platform/Tsa. Every tier present in the bundle is checked; the report
 * says, per tier, what was checked, what failed and what could not be checked
 * offline (the TSA certificate chain without `--tsa-ca`, the Bitcoin block
 * header without `--ots-headers`).
 *
 * - input: the SHA-256 of the given data (or the given hash) equals hash_hex;
 * - T0: `formatVersion|hash_hex|registeredAt` (UTF-8, SHA-256, ECDSA P-256,
 *   DER, Base64) verifies with the key whose kid is t0.publicKeyId, and that
 *   kid is the RFC 7638 thumbprint of the key. The key comes from `keys`
 *   (GET /v1/keys) when given — then a different key embedded in the bundle is
 *   a failure — else from t0.publicKey, which only proves the bundle is
 *   self-consistent: its kid must still be compared with the server's keys;
 * - T1: the Merkle v2 proof leads from hash_hex to merkleRoot; the RFC 3161
 *   token is a valid signature over the 32 raw bytes of merkleRoot (chained to
 *   `tsaCaPem` when given); its genTime equals tsaTimestamp;
 * - T2: t1ToT2Proof leads from merkleRoot to dailyRoot; otsProof is a `.ots`
 *   file for hash_hex whose operations, replayed from hash_hex, pass through
 *   dailyRoot and reach a Bitcoin attestation at bitcoinBlockHeight; with
 *   `otsHeaders` the message reached there must equal that block header's
 *   merkle root, without them the Bitcoin check is `not_performed` (not a
 *   failure; the report says so).
 */
import { jwkThumbprint } from "../Domain/T0.js"
import { createHash, type KeyObject } from "node:crypto"
import { computeRoot, type ProofStep } from "../Domain/Merkle.js"
import { applyOp, bytesToHex, parseDetachedFile, type Timestamp } from "../Domain/Ots.js"
import { jwkToKeyObject, T0_ALGORITHM, verifyT0 } from "../Domain/T0.js"
import { verifyTokenOffline } from "../Platform/Tsa/Rfc3161.js"

// ---------------------------------------------------------------------------
// Report

export type CheckStatus = "ok" | "failed" | "not_performed"

export interface SubCheck {
  readonly status: CheckStatus
  readonly detail: string
}

export interface InputCheck extends SubCheck {
  readonly status: "ok" | "failed"
  /** "file": SHA-256 of the given data; "hash": the given hash. */
  readonly source: "file" | "hash"
  readonly hash_hex: string | null
}

export interface T0Check extends SubCheck {
  readonly status: "ok" | "failed"
  readonly kid: string | null
  /** Where the verifying key came from: the --keys file, the bundle itself, or nowhere. */
  readonly key_source: "keys" | "bundle" | null
  /** The kid is the RFC 7638 thumbprint of the key (null: not checked). */
  readonly thumbprint_ok: boolean | null
  readonly signature_ok: boolean | null
  readonly registered_at: string | null
}

export interface T1Check extends SubCheck {
  readonly status: "ok" | "failed"
  readonly merkle: SubCheck
  readonly tsa: SubCheck & {
    readonly provider: string | null
    readonly gen_time: string | null
    /** True only when the signer certificate was chained to the --tsa-ca trust anchors. */
    readonly chain_verified: boolean
    readonly signer: string | null
  }
}

export interface T2Check extends SubCheck {
  readonly status: "ok" | "failed"
  readonly merkle: SubCheck
  readonly ots: SubCheck
  readonly bitcoin: SubCheck & {
    readonly height: number | null
    /** The message the OTS operations reach at the Bitcoin attestation (header merkle root, OTS byte order). */
    readonly merkle_root: string | null
  }
  readonly simulated: boolean
}

export interface Report {
  /** True iff every present tier (and the input, when given) checks; a not-performed Bitcoin header check is not a failure. */
  readonly ok: boolean
  readonly id: string | null
  readonly hash_hex: string | null
  /** The level the bundle claims. */
  readonly level: string | null
  /** The highest level whose tier and every tier below it checked. */
  readonly verified_level: "T0" | "T1" | "T2" | null
  readonly checks: {
    readonly input?: InputCheck
    readonly t0: T0Check
    readonly t1?: T1Check
    readonly t2?: T2Check
  }
  /** Things a reader should know that are not failures. */
  readonly notes: ReadonlyArray<string>
}

// ---------------------------------------------------------------------------
// Options

/** A public JWK as served by GET /v1/keys (fields are checked, not trusted). */
export interface Jwk {
  readonly kty?: unknown
  readonly crv?: unknown
  readonly kid?: unknown
  readonly x?: unknown
  readonly y?: unknown
  readonly [k: string]: unknown
}

export interface VerifyOptions {
  /** The attested data: its SHA-256 must equal hash_hex. */
  readonly data?: Uint8Array
  /** SHA-256 (hex) of the attested data, already computed (e.g. streamed from a large file). */
  readonly dataSha256?: string
  /** A SHA-256 (hex) that must equal hash_hex. */
  readonly hash?: string
  /** Block height (decimal string) → header merkle root hex, in the byte order the OTS operations produce. */
  readonly otsHeaders?: Readonly<Record<string, string>>
  /** PEM trust anchors for the TSA certificate chain (makes the chain mandatory). */
  readonly tsaCaPem?: string
  /** The server's published signing keys (GET /v1/keys). */
  readonly keys?: ReadonlyArray<Jwk>
}

// ---------------------------------------------------------------------------
// Input parsing helpers (shared with the command)

const HEX64 = /^[0-9a-f]{64}$/

/** `{keys: [JWK…]}` (GET /v1/keys), `[JWK…]` or one JWK (GET /v1/keys/{kid}). Throws on anything else. */
export const parseKeysDocument = (doc: unknown): Array<Jwk> => {
  const list = isRecord(doc) && Array.isArray(doc.keys) ? doc.keys : Array.isArray(doc) ? doc : isRecord(doc) ? [doc] : null
  if (list === null) throw new Error("expected {\"keys\": [JWK, …]} or a JWK object")
  return list.map((k, i) => {
    if (!isRecord(k) || typeof k.kid !== "string" || typeof k.x !== "string" || typeof k.y !== "string") {
      throw new Error(`key ${i} is not a JWK with kid, x and y`)
    }
    return k
  })
}

/**
 * `{"<height>": "<merkle root hex>"}`; a value may also be an object with a
 * `merkleRoot` / `merkle_root` field (e.g. a dump of simulated block headers).
 */
export const parseOtsHeaders = (doc: unknown): Record<string, string> => {
  if (!isRecord(doc) || Array.isArray(doc)) throw new Error("expected a JSON object mapping block height to merkle root hex")
  const out: Record<string, string> = {}
  for (const [height, value] of Object.entries(doc)) {
    if (!/^\d+$/.test(height)) throw new Error(`block height ${JSON.stringify(height)} is not a decimal integer`)
    const root = typeof value === "string"
      ? value
      : isRecord(value) && typeof value.merkleRoot === "string"
      ? value.merkleRoot
      : isRecord(value) && typeof value.merkle_root === "string"
      ? value.merkle_root
      : undefined
    if (root === undefined || !/^[0-9a-fA-F]{64}$/.test(root)) {
      throw new Error(`block ${height}: merkle root must be 64 hex characters`)
    }
    out[String(Number(height))] = root.toLowerCase()
  }
  return out
}

/** RFC 7638 thumbprint of an EC P-256 public key: SHA-256, Base64URL, of `{"crv","kty","x","y"}`. */
export const sha256Hex = (data: Uint8Array): string => createHash("sha256").update(data).digest("hex")

// ---------------------------------------------------------------------------
// Small helpers

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

const str = (v: unknown): string | null => (typeof v === "string" ? v : null)

const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** Strict Base64 (standard alphabet, padding optional): Buffer.from silently skips junk. */
const decodeBase64 = (s: string): Uint8Array | null => {
  const clean = s.replace(/\s+/g, "")
  if (clean.length === 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length % 4 === 1) return null
  return new Uint8Array(Buffer.from(clean, "base64"))
}

const parseProof = (v: unknown, what: string): Array<ProofStep> => {
  if (!Array.isArray(v)) throw new Error(`${what} is not a list`)
  return v.map((s, i) => {
    if (!isRecord(s) || typeof s.hash !== "string" || !HEX64.test(s.hash) || (s.position !== "left" && s.position !== "right")) {
      throw new Error(`${what} step ${i} is not {hash: 64 lowercase hex, position: left|right}`)
    }
    return { hash: s.hash, position: s.position }
  })
}

/** Merkle v2 check; returns a sub-check. */
const merkleCheck = (from: string, proofValue: unknown, to: unknown, names: { from: string; proof: string; to: string }): SubCheck => {
  if (typeof to !== "string" || !HEX64.test(to)) return { status: "failed", detail: `${names.to} is not 64 lowercase hex` }
  if (!HEX64.test(from)) return { status: "failed", detail: `${names.from} is not 64 lowercase hex` }
  let proof: Array<ProofStep>
  try {
    proof = parseProof(proofValue, names.proof)
  } catch (e) {
    return { status: "failed", detail: errText(e) }
  }
  const reached = computeRoot(from, proof)
  return reached === to
    ? { status: "ok", detail: `${names.proof} (${proof.length} step${proof.length === 1 ? "" : "s"}, Merkle v2) leads from ${names.from} to ${names.to}` }
    : { status: "failed", detail: `${names.proof} leads from ${names.from} to ${reached}, not to ${names.to} ${to}` }
}

/** Milliseconds since the epoch of an ISO 8601 time with Z or an offset (any number of fraction digits), or undefined. */
const parseIsoMillis = (s: string): number | undefined => {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$/.exec(s)
  if (!m) return undefined
  const base = Date.parse(`${m[1]}${m[3] === "Z" ? "Z" : m[3]}`)
  if (Number.isNaN(base)) return undefined
  const frac = (m[2] ?? "").padEnd(3, "0").slice(0, 3)
  return base + Number(frac)
}

const LEVELS = ["T0", "T1", "T2"] as const
type Level = (typeof LEVELS)[number]
const levelRank = (l: unknown): number => LEVELS.indexOf(l as Level)

// ---------------------------------------------------------------------------
// Input

const checkInput = (hashHex: string | null, opts: VerifyOptions): InputCheck | undefined => {
  const given: Array<{ source: "file" | "hash"; value: string; what: string }> = []
  if (opts.data !== undefined) given.push({ source: "file", value: sha256Hex(opts.data), what: "SHA-256 of the file" })
  if (opts.dataSha256 !== undefined) given.push({ source: "file", value: opts.dataSha256.toLowerCase(), what: "SHA-256 of the file" })
  if (opts.hash !== undefined) given.push({ source: "hash", value: opts.hash.trim().toLowerCase(), what: "given hash" })
  if (given.length === 0) return undefined
  const first = given[0]!
  for (const g of given) {
    if (!HEX64.test(g.value)) {
      return { status: "failed", source: g.source, hash_hex: g.value, detail: `the ${g.what} is not a SHA-256 (64 hex characters)` }
    }
    if (g.value !== hashHex) {
      return {
        status: "failed",
        source: g.source,
        hash_hex: g.value,
        detail: `the ${g.what} is ${g.value}, the bundle attests ${hashHex ?? "(no hash_hex)"}`
      }
    }
  }
  return { status: "ok", source: first.source, hash_hex: first.value, detail: `the ${first.what} equals hash_hex` }
}

// ---------------------------------------------------------------------------
// T0

interface UsableKey {
  readonly kid: string
  readonly x: string
  readonly y: string
}

const asKey = (k: Jwk): UsableKey | string => {
  if (k.kty !== "EC" || k.crv !== "P-256") return `key is not an EC P-256 JWK (kty ${String(k.kty)}, crv ${String(k.crv)})`
  if (typeof k.x !== "string" || typeof k.y !== "string") return "key has no x/y coordinates"
  return { kid: typeof k.kid === "string" ? k.kid : "", x: k.x, y: k.y }
}

const checkT0 = (bundle: Record<string, unknown>, hashHex: string | null, opts: VerifyOptions, notes: Array<string>): T0Check => {
  const t0 = bundle.t0
  const base = { kid: null, key_source: null, thumbprint_ok: null, signature_ok: null, registered_at: null } as const
  if (!isRecord(t0)) return { ...base, status: "failed", detail: "the bundle has no t0 section" }
  const kid = str(t0.publicKeyId)
  const registeredAt = str(t0.registeredAt)
  const formatVersion = str(t0.formatVersion)
  const signature = str(t0.signature)
  const fields = { ...base, kid, registered_at: registeredAt }
  const fail = (detail: string, more: Partial<Pick<T0Check, "key_source" | "thumbprint_ok" | "signature_ok">> = {}): T0Check => ({
    ...fields,
    ...more,
    status: "failed",
    detail
  })
  if (hashHex === null || !HEX64.test(hashHex)) return fail("hash_hex is not a 64-character lowercase hex SHA-256")
  if (kid === null || kid.length === 0) return fail("t0.publicKeyId is missing")
  if (registeredAt === null) return fail("t0.registeredAt is missing")
  if (formatVersion === null) return fail("t0.formatVersion is missing")
  if (signature === null) return fail("t0.signature is missing")
  if (t0.algorithm !== T0_ALGORITHM) return fail(`t0.algorithm is ${JSON.stringify(t0.algorithm)}, expected ${T0_ALGORITHM}`)
  const sigBytes = decodeBase64(signature)
  if (sigBytes === null) return fail("t0.signature is not Base64")

  // The key.
  const embedded = t0.publicKey
  let key: UsableKey
  let keySource: "keys" | "bundle"
  if (opts.keys !== undefined) {
    keySource = "keys"
    const published = opts.keys.find((k) => k.kid === kid)
    if (published === undefined) {
      return fail(`signing key ${kid} is not among the ${opts.keys.length} key(s) given with --keys`, { key_source: keySource })
    }
    const k = asKey(published)
    if (typeof k === "string") return fail(`published ${k}`, { key_source: keySource })
    key = k
    if (embedded !== undefined) {
      const e = isRecord(embedded) ? asKey(embedded) : "not an object"
      if (typeof e === "string" || e.x !== key.x || e.y !== key.y || (e.kid !== "" && e.kid !== kid)) {
        return fail(`the key embedded in the bundle (t0.publicKey) is not the published key ${kid}`, { key_source: keySource })
      }
    }
  } else if (embedded !== undefined) {
    keySource = "bundle"
    if (!isRecord(embedded)) return fail("t0.publicKey is not a JWK object", { key_source: keySource })
    const k = asKey(embedded)
    if (typeof k === "string") return fail(`t0.publicKey: ${k}`, { key_source: keySource })
    if (k.kid !== "" && k.kid !== kid) {
      return fail(`t0.publicKey.kid ${k.kid} differs from t0.publicKeyId ${kid}`, { key_source: keySource })
    }
    key = k
  } else {
    return fail("no public key to verify with: the bundle carries no t0.publicKey; pass the server's keys (GET /v1/keys) with --keys")
  }

  let keyObject: KeyObject
  try {
    keyObject = jwkToKeyObject({ kty: "EC", crv: "P-256", alg: "ES256", kid, x: key.x, y: key.y })
  } catch (e) {
    return fail(`the key ${kid} is not a valid P-256 public key: ${errText(e)}`, { key_source: keySource })
  }
  const thumbprintOk = jwkThumbprint(key.x, key.y) === kid
  const signatureOk = verifyT0({ hashHex, registeredAt, formatVersion, signature: Buffer.from(sigBytes).toString("base64") }, keyObject)
  const more = { key_source: keySource, thumbprint_ok: thumbprintOk, signature_ok: signatureOk }
  const payload = `${formatVersion}|${hashHex}|${registeredAt}`
  if (!signatureOk) return fail(`the ECDSA P-256 signature over "${payload}" does not verify with key ${kid}`, more)
  if (!thumbprintOk) return fail(`the key's RFC 7638 thumbprint is not its kid ${kid}: the key is not the one the kid names`, more)

  if (formatVersion !== "2.0.0") notes.push(`t0.formatVersion is ${formatVersion}; this verifier knows format 2.0.0`)
  const from = keySource === "keys"
    ? `key ${kid} from --keys`
    : `key ${kid} taken from the bundle itself; compare that kid with the server's published keys (GET /v1/keys, or pass them with --keys)`
  if (keySource === "bundle") notes.push(`T0 was verified with the key embedded in the bundle (${kid}); check that this kid is listed by GET /v1/keys`)
  return {
    ...fields,
    ...more,
    status: "ok",
    detail: `ECDSA P-256 signature over "${payload}" verifies with ${from}; the kid is the key's RFC 7638 thumbprint`
  }
}

// ---------------------------------------------------------------------------
// T1

const checkT1 = async (t1: unknown, hashHex: string | null, opts: VerifyOptions): Promise<T1Check> => {
  const tsaBase = { provider: null, gen_time: null, chain_verified: false, signer: null } as const
  if (!isRecord(t1)) {
    const detail = "t1 is not an object"
    return { status: "failed", detail, merkle: { status: "not_performed", detail }, tsa: { ...tsaBase, status: "not_performed", detail } }
  }
  const merkle = merkleCheck(hashHex ?? "", t1.merkleProof, t1.merkleRoot, { from: "hash_hex", proof: "t1.merkleProof", to: "t1.merkleRoot" })

  const provider = str(t1.tsaProvider)
  const tsaFail = (detail: string, more: { gen_time?: string | null; signer?: string | null } = {}) => ({
    ...tsaBase,
    provider,
    ...more,
    status: "failed" as const,
    detail
  })
  let tsa: T1Check["tsa"]
  const root = t1.merkleRoot
  const token = typeof t1.tsaToken === "string" ? decodeBase64(t1.tsaToken) : null
  if (typeof root !== "string" || !HEX64.test(root)) tsa = tsaFail("t1.merkleRoot is not 64 lowercase hex: nothing to check the token against")
  else if (token === null) tsa = tsaFail("t1.tsaToken is missing or not Base64")
  else {
    try {
      const v = await verifyTokenOffline(token, new Uint8Array(Buffer.from(root, "hex")), opts.tsaCaPem)
      const genTime = v.genTime.toISOString()
      const claimed = str(t1.tsaTimestamp)
      const claimedMs = claimed === null ? undefined : parseIsoMillis(claimed)
      const signer = v.signer.subject
      if (claimedMs === undefined) {
        tsa = tsaFail(`t1.tsaTimestamp ${JSON.stringify(t1.tsaTimestamp)} is not an ISO 8601 time`, { gen_time: genTime, signer })
      } else if (claimedMs !== v.genTime.getTime()) {
        tsa = tsaFail(`the token's genTime ${genTime} differs from t1.tsaTimestamp ${claimed}`, { gen_time: genTime, signer })
      } else {
        const chain = v.chainVerified
          ? "its certificate chains to the --tsa-ca trust anchors"
          : "certificate chain UNVERIFIED (signature checked against the token's own certificate only; pass --tsa-ca to check the chain)"
        tsa = {
          ...tsaBase,
          provider,
          gen_time: genTime,
          signer,
          chain_verified: v.chainVerified,
          status: "ok",
          detail: `RFC 3161 token signed by "${signer}" time-stamps t1.merkleRoot at ${genTime}; ${chain}`
        }
      }
    } catch (e) {
      tsa = tsaFail(errText(e))
    }
  }
  const ok = merkle.status === "ok" && tsa.status === "ok"
  return {
    status: ok ? "ok" : "failed",
    detail: ok
      ? `hash_hex is in batch ${String(t1.batchId)} (root ${String(root)}), time-stamped at ${tsa.gen_time}${tsa.chain_verified ? "" : " (TSA chain unverified)"}`
      : [merkle, tsa].filter((c) => c.status !== "ok").map((c) => c.detail).join("; "),
    merkle,
    tsa
  }
}

// ---------------------------------------------------------------------------
// T2

interface Reached {
  readonly height: number
  readonly commitment: string
  /** The path from the file digest to this attestation passes through the given message. */
  readonly throughTarget: boolean
}

/** Every Bitcoin attestation reached from `msg`, and whether its path passes through `target`. */
const replayBitcoin = (ts: Timestamp, msg: Uint8Array, target: string): Array<Reached> => {
  const out: Array<Reached> = []
  const visit = (node: Timestamp, m: Uint8Array, seen: boolean): void => {
    const through = seen || bytesToHex(m) === target
    for (const a of node.attestations) {
      if (a._tag === "bitcoin") out.push({ height: a.height, commitment: bytesToHex(m), throughTarget: through })
    }
    for (const [op, child] of node.ops) visit(child, applyOp(op, m), through)
  }
  visit(ts, msg, false)
  return out
}

const reverseHex = (hex: string): string => bytesToHex(Uint8Array.from(Buffer.from(hex, "hex")).reverse())

const checkT2 = (t2: unknown, t1: unknown, hashHex: string | null, opts: VerifyOptions): T2Check => {
  const btcBase = { height: null, merkle_root: null } as const
  if (!isRecord(t2)) {
    const detail = "t2 is not an object"
    const np = { status: "not_performed" as const, detail }
    return { status: "failed", detail, merkle: np, ots: np, bitcoin: { ...btcBase, ...np }, simulated: false }
  }
  const simulated = t2.simulated === true
  const height = typeof t2.bitcoinBlockHeight === "number" && Number.isSafeInteger(t2.bitcoinBlockHeight) && t2.bitcoinBlockHeight >= 0
    ? t2.bitcoinBlockHeight
    : null
  const dailyRoot = typeof t2.dailyRoot === "string" && HEX64.test(t2.dailyRoot) ? t2.dailyRoot : null

  // Batch root → daily root.
  const batchRoot = isRecord(t1) && typeof t1.merkleRoot === "string" ? t1.merkleRoot : null
  const merkle: SubCheck = batchRoot === null
    ? { status: "failed", detail: "t2 needs t1.merkleRoot (the batch root the daily proof starts from), the bundle has none" }
    : merkleCheck(batchRoot, t2.t1ToT2Proof, t2.dailyRoot, { from: "t1.merkleRoot", proof: "t2.t1ToT2Proof", to: "t2.dailyRoot" })

  // The .ots file.
  let ots: SubCheck
  let bitcoin: T2Check["bitcoin"] = { ...btcBase, height, status: "not_performed", detail: "no Bitcoin commitment to check" }
  const otsBytes = typeof t2.otsProof === "string" ? decodeBase64(t2.otsProof) : null
  const reachedAt: Array<Reached> = []
  if (otsBytes === null) ots = { status: "failed", detail: "t2.otsProof is missing or not Base64" }
  else if (height === null) ots = { status: "failed", detail: "t2.bitcoinBlockHeight is not a non-negative integer" }
  else if (dailyRoot === null) ots = { status: "failed", detail: "t2.dailyRoot is not 64 lowercase hex" }
  else {
    try {
      const file = parseDetachedFile(otsBytes)
      const digest = bytesToHex(file.digest)
      if (file.fileHashOp !== "sha256") throw new Error(`the .ots file hashes with ${file.fileHashOp}, not sha256`)
      if (digest !== hashHex) throw new Error(`the .ots file digest is ${digest}, not hash_hex`)
      const all = replayBitcoin(file.timestamp, file.digest, dailyRoot)
      if (all.length === 0) throw new Error("the .ots proof has no Bitcoin attestation (still pending)")
      const atHeight = all.filter((r) => r.height === height)
      if (atHeight.length === 0) {
        throw new Error(`the .ots proof attests Bitcoin block(s) ${[...new Set(all.map((r) => r.height))].join(", ")}, not bitcoinBlockHeight ${height}`)
      }
      reachedAt.push(...atHeight.filter((r) => r.throughTarget))
      if (reachedAt.length === 0) {
        throw new Error(`the .ots operations reach block ${height} without passing through t2.dailyRoot ${dailyRoot}`)
      }
      ots = {
        status: "ok",
        detail: `.ots file for hash_hex; replaying its operations passes through t2.dailyRoot and reaches a Bitcoin attestation at height ${height}`
      }
    } catch (e) {
      ots = { status: "failed", detail: `.ots proof: ${errText(e)}` }
    }
  }

  if (height !== null && ots.status === "ok") {
    const commitment = reachedAt[0]!.commitment
    const chain = simulated ? "simulated chain" : "Bitcoin"
    if (opts.otsHeaders === undefined) {
      bitcoin = {
        height,
        merkle_root: commitment,
        status: "not_performed",
        detail: `the merkle root ${commitment} reached at ${chain} block ${height} was not compared with that block header (pass --ots-headers)`
      }
    } else {
      const header = opts.otsHeaders[String(height)]?.toLowerCase()
      if (header === undefined) {
        bitcoin = {
          height,
          merkle_root: commitment,
          status: "not_performed",
          detail: `--ots-headers has no entry for block ${height}; the merkle root reached there is ${commitment}`
        }
      } else if (reachedAt.some((r) => r.commitment === header)) {
        bitcoin = {
          height,
          merkle_root: header,
          status: "ok",
          detail: `the merkle root reached equals the header merkle root of ${chain} block ${height} from --ots-headers`
        }
      } else {
        const hint = reachedAt.some((r) => reverseHex(r.commitment) === header)
          ? " (it matches byte-reversed: --ots-headers must use the byte order the OTS operations produce, not the block-explorer order)"
          : ""
        bitcoin = {
          height,
          merkle_root: commitment,
          status: "failed",
          detail: `the merkle root reached at block ${height} is ${commitment}, the header in --ots-headers has ${header}${hint}`
        }
      }
    }
  }

  const ok = merkle.status === "ok" && ots.status === "ok" && bitcoin.status !== "failed"
  const sim = simulated ? " — simulated chain: the block is not part of the real Bitcoin blockchain" : ""
  let detail: string
  if (!ok) detail = [merkle, ots, bitcoin].filter((c) => c.status === "failed").map((c) => c.detail).join("; ") + sim
  else if (bitcoin.status === "ok") detail = `daily root ${dailyRoot} anchored in block ${height}; the block header check passed${sim}`
  else {
    detail = `daily root ${dailyRoot} and the .ots operations check up to block ${height}; ` +
      `the Bitcoin block header check was NOT PERFORMED (${opts.otsHeaders === undefined ? "no --ots-headers" : `no header for block ${height}`}), ` +
      `which is not a failure${sim}`
  }
  return { status: ok ? "ok" : "failed", detail, merkle, ots, bitcoin, simulated }
}

// ---------------------------------------------------------------------------
// The bundle

/** The same check with `status` and `detail` as its first keys (for the JSON report). */
const first = <C extends SubCheck>(c: C): C => {
  const { detail, status, ...rest } = c
  return { status, detail, ...rest } as unknown as C
}

/** Verifies an evidence bundle (already parsed from JSON). Never rejects: every problem is a failed check. */
export const verifyBundle = async (bundle: unknown, opts: VerifyOptions = {}): Promise<Report> => {
  const notes: Array<string> = []
  const b = isRecord(bundle) ? bundle : {}
  const id = str(b.id)
  const hashHex = str(b.hash_hex)
  const level = str(b.level)

  const input = checkInput(hashHex, opts)
  const t0 = isRecord(bundle)
    ? checkT0(b, hashHex, opts, notes)
    : {
      status: "failed" as const,
      detail: "the bundle is not a JSON object",
      kid: null,
      key_source: null,
      thumbprint_ok: null,
      signature_ok: null,
      registered_at: null
    }

  const missing = (tier: "t1" | "t2"): SubCheck => ({
    status: "failed",
    detail: `the bundle claims level ${level} but has no ${tier} section`
  })
  let t1: T1Check | undefined
  if (b.t1 !== undefined) t1 = await checkT1(b.t1, hashHex, opts)
  else if (levelRank(level) >= 1) {
    const m = missing("t1")
    t1 = { ...m, status: "failed", merkle: m, tsa: { ...m, provider: null, gen_time: null, chain_verified: false, signer: null } }
  }
  let t2: T2Check | undefined
  if (b.t2 !== undefined) t2 = checkT2(b.t2, b.t1, hashHex, opts)
  else if (levelRank(level) >= 2) {
    const m = missing("t2")
    t2 = { ...m, status: "failed", merkle: m, ots: m, bitcoin: { ...m, height: null, merkle_root: null }, simulated: false }
  }

  if (level !== null && levelRank(level) < 0) notes.push(`level ${JSON.stringify(level)} is not T0, T1 or T2`)
  const present = b.t2 !== undefined ? 2 : b.t1 !== undefined ? 1 : 0
  if (level !== null && levelRank(level) >= 0 && levelRank(level) < present) {
    notes.push(`the bundle claims level ${level} but carries a ${present === 2 ? "t2" : "t1"} section, which was checked too`)
  }
  if (t1?.status === "ok" && !t1.tsa.chain_verified) {
    notes.push("the TSA certificate chain was not verified (no --tsa-ca): the token is only checked against its own embedded certificate")
  }
  if (t2?.status === "ok" && t2.bitcoin.status === "not_performed") {
    notes.push(`Bitcoin block header check NOT PERFORMED: ${t2.bitcoin.detail}`)
  }
  if (t2?.simulated) notes.push("t2 refers to a SIMULATED chain (demo calendar), not the real Bitcoin blockchain")

  const ok = (input === undefined || input.status === "ok") && t0.status === "ok" &&
    (t1 === undefined || t1.status === "ok") && (t2 === undefined || t2.status === "ok")
  const verifiedLevel: Report["verified_level"] = t0.status !== "ok"
    ? null
    : t1?.status !== "ok"
    ? "T0"
    : t2?.status !== "ok"
    ? "T1"
    : "T2"

  return {
    ok,
    id,
    hash_hex: hashHex,
    level,
    verified_level: verifiedLevel,
    checks: {
      ...(input !== undefined ? { input: first(input) } : {}),
      t0: first(t0),
      ...(t1 !== undefined ? { t1: first({ ...t1, merkle: first(t1.merkle), tsa: first(t1.tsa) }) } : {}),
      ...(t2 !== undefined
        ? { t2: first({ ...t2, merkle: first(t2.merkle), ots: first(t2.ots), bitcoin: first(t2.bitcoin) }) }
        : {})
    },
    notes
  }
}

/** A few human-readable lines for stderr. */
export const summarize = (r: Report): string => {
  const mark = (s: CheckStatus) => (s === "ok" ? "OK" : s === "failed" ? "FAILED" : "NOT PERFORMED")
  const lines = [`attestd verify: ${r.ok ? "VERIFIED" : "NOT VERIFIED"} ${r.id ?? "(no id)"} ${r.hash_hex ?? ""}`.trimEnd()]
  if (r.checks.input) lines.push(`  input  ${mark(r.checks.input.status)}: ${r.checks.input.detail}`)
  lines.push(`  T0     ${mark(r.checks.t0.status)}: ${r.checks.t0.detail}`)
  if (r.checks.t1) lines.push(`  T1     ${mark(r.checks.t1.status)}: ${r.checks.t1.detail}`)
  if (r.checks.t2) {
    lines.push(`  T2     ${mark(r.checks.t2.status)}: ${r.checks.t2.detail}`)
    lines.push(`  Bitcoin ${mark(r.checks.t2.bitcoin.status)}: ${r.checks.t2.bitcoin.detail}`)
  }
  for (const n of r.notes) lines.push(`  note: ${n}`)
  return lines.join("\n")
}
