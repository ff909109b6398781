/**
 * The verification core (spec 2.7, 9.5, 9.6; CONTRACT §1, §5): one portable
 * module behind the CLI and the browser page. No node:*, no Buffer, no Effect
 * runtime, no database: WebCrypto (or @noble where it is missing), pkijs for
 * RFC 3161, the Merkle v2, OpenTimestamps and Bitcoin header codecs of src/Domain.
 *
 * Every tier is checked twice over: its math (signature, Merkle path, CMS
 * signature, OTS operations, header merkle root and proof of work) and its
 * anchor in a trust input the caller gave:
 * - T0 in a trusted key set (`keys`; a key embedded in the bundle is never trusted);
 * - T1 in TSA trust anchors (`tsaCaPem`; the chain is validated at genTime);
 * - T2 in a block header whose place in the chain was confirmed
 *   (`bitcoinHeaders`, `bitcoinSources`, `otsHeaders`, or for the demo's
 *   simulated chain `simulatedHeaders`, labelled simulated).
 * A tier whose math holds against nothing trusted is `unanchored`; the verdict
 * is then `partial`, never `verified`.
 */
import { blockHash, headerBytes, meetsTarget, parseHeader, reverseHex } from "../Domain/BitcoinHeader.js"
import { base64ToBytes, bytesToHex, hexToBytes } from "../Domain/Bytes.js"
import { computeRoot, type ProofStep } from "../Domain/Merkle.js"
import { applyOp, parseDetachedFile, type Timestamp } from "../Domain/Ots.js"
import { jwkThumbprint, T0_ALGORITHM, t0Payload } from "../Domain/T0.js"
import { parseInstantMicros } from "../Domain/Time.js"
import { verifyTokenOffline } from "../Platform/Tsa/Rfc3161.js"
import { cryptoBackend, sha256, verifyP256 } from "./Crypto.js"
import { shown } from "./Display.js"

// ---------------------------------------------------------------------------
// Report

export type CheckStatus = "ok" | "failed" | "not_performed" | "unanchored"
export type Verdict = "verified" | "failed" | "partial"

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
  readonly status: "ok" | "failed" | "unanchored"
  /** The trust input the tier is anchored in (null: none). */
  readonly trust: string | null
  readonly kid: string | null
  /** Where the verifying key came from: the trusted key set, the bundle itself, or nowhere. */
  readonly key_source: "keys" | "bundle" | null
  /** The kid is the RFC 7638 thumbprint of the key (null: not checked). */
  readonly thumbprint_ok: boolean | null
  readonly signature_ok: boolean | null
  readonly registered_at: string | null
}

export interface T1Check extends SubCheck {
  readonly status: "ok" | "failed" | "unanchored"
  readonly trust: string | null
  readonly merkle: SubCheck
  readonly tsa: SubCheck & {
    readonly provider: string | null
    readonly gen_time: string | null
    /** True only when the signer certificate was chained (at genTime) to the given TSA trust anchors. */
    readonly chain_verified: boolean
    readonly signer: string | null
  }
}

export interface T2Check extends SubCheck {
  readonly status: "ok" | "failed" | "unanchored"
  readonly trust: string | null
  readonly merkle: SubCheck
  readonly ots: SubCheck
  readonly bitcoin: SubCheck & {
    readonly height: number | null
    /** The message the OTS operations reach at the Bitcoin attestation (header merkle root, OTS byte order). */
    readonly merkle_root: string | null
    /** The block hash (display order) of the header checked, when there was one. */
    readonly block_hash: string | null
    /** The header's merkle root and proof of work check (null: no header in the bundle). */
    readonly header_ok: boolean | null
    /** The header's place in the chain was confirmed by a trust input. */
    readonly chain_confirmed: boolean
  }
  readonly simulated: boolean
}

export interface Report {
  /** verdict === "verified". */
  readonly ok: boolean
  /** verified: every present check ok and anchored; failed: a check failed; partial: the math holds but a tier is unanchored. */
  readonly verdict: Verdict
  readonly id: string | null
  readonly hash_hex: string | null
  /** The level the bundle claims. */
  readonly level: string | null
  /** The highest level whose tier and every tier below it is ok (math and anchor). */
  readonly verified_level: "T0" | "T1" | "T2" | null
  readonly checks: {
    readonly input?: InputCheck
    readonly t0: T0Check
    readonly t1?: T1Check
    readonly t2?: T2Check
  }
  /** Things a reader should know that are not failures. */
  readonly notes: ReadonlyArray<string>
  /** "webcrypto" or "noble". */
  readonly crypto: string
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
  /** Trusted signing keys (GET /v1/keys). */
  readonly keys?: ReadonlyArray<Jwk>
  /** PEM trust anchors of the TSA (one bundle or several). */
  readonly tsaCaPem?: string | ReadonlyArray<string>
  /** Block height (decimal string) → header merkle root hex, in the byte order the OTS operations produce. */
  readonly otsHeaders?: Readonly<Record<string, string>>
  /** Block height (decimal string) → confirmed 80-byte Bitcoin block header (hex). */
  readonly bitcoinHeaders?: Readonly<Record<string, string>>
  /** Esplora-compatible API base URLs; every one asked must return the same header. */
  readonly bitcoinSources?: ReadonlyArray<string>
  /** The simulated chain of a demo instance: height → 80-byte header hex. Only for bundles marked simulated. */
  readonly simulatedHeaders?: Readonly<Record<string, string>>
  /**
   * Esplora-compatible API base URLs of the simulated chain (a demo instance's /v1/simulated-chain):
   * asked, all must agree, only for bundles marked simulated and only when given explicitly
   * (the simulatedHeaders, when they have the block, are used first).
   */
  readonly simulatedSources?: ReadonlyArray<string>
  /** fetch for bitcoinSources and simulatedSources (default globalThis.fetch). */
  readonly fetch?: (url: string) => Promise<{ readonly ok: boolean; readonly status: number; text(): Promise<string> }>
  /** How to name each trust input in the report (e.g. "keys published by https://host", "--keys keys.json"). */
  readonly trustLabels?: {
    readonly keys?: string
    readonly tsa?: string
    readonly headers?: string
    readonly otsHeaders?: string
    readonly simulated?: string
  }
}

// ---------------------------------------------------------------------------
// Input parsing helpers (shared with the front ends)

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
  if (!isRecord(doc)) throw new Error("expected a JSON object mapping block height to merkle root hex")
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

/**
 * Block headers as height → 80-byte header hex: a JSON object of that shape,
 * or `{headers: [{height, header}]}` (GET /v1/simulated-chain/headers). Throws on anything else.
 */
export const parseBlockHeaders = (doc: unknown): Record<string, string> => {
  const entries: Array<[unknown, unknown]> = isRecord(doc) && Array.isArray(doc.headers)
    ? doc.headers.map((h): [unknown, unknown] => (isRecord(h) ? [h.height, h.header] : [undefined, undefined]))
    : isRecord(doc)
    ? Object.entries(doc)
    : []
  if (!isRecord(doc)) throw new Error("expected {\"<height>\": \"<header hex>\"} or {\"headers\": [{height, header}]}")
  const out: Record<string, string> = {}
  for (const [height, header] of entries) {
    const h = typeof height === "number" ? String(height) : height
    if (typeof h !== "string" || !/^\d+$/.test(h)) throw new Error(`block height ${JSON.stringify(height)} is not a decimal integer`)
    if (typeof header !== "string" || !/^[0-9a-fA-F]{160}$/.test(header)) throw new Error(`block ${h}: a header is 160 hex characters`)
    out[String(Number(h))] = header.toLowerCase()
  }
  return out
}

export const sha256Hex = async (data: Uint8Array): Promise<string> => bytesToHex(await sha256(data))

// ---------------------------------------------------------------------------
// Small helpers

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

const str = (v: unknown): string | null => (typeof v === "string" ? v : null)

const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** Strict Base64 (standard alphabet, padding optional). */
const decodeBase64 = (s: string): Uint8Array | null => {
  const clean = s.replace(/\s+/g, "")
  if (clean.length === 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length % 4 === 1) return null
  try {
    return base64ToBytes(clean)
  } catch {
    return null
  }
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

const checkInput = async (hashHex: string | null, opts: VerifyOptions): Promise<InputCheck | undefined> => {
  const given: Array<{ source: "file" | "hash"; value: string; what: string }> = []
  if (opts.data !== undefined) given.push({ source: "file", value: await sha256Hex(opts.data), what: "SHA-256 of the file" })
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

/** A JWK's validity window members (`attestd_activated_at`, `attestd_retired_at`), when it has either. */
const windowOf = (k: unknown): Record<string, unknown> | undefined =>
  isRecord(k) && (k.attestd_activated_at !== undefined || k.attestd_retired_at !== undefined) ? k : undefined

/** Why `registeredAt` lies outside key `kid`'s window (or the window cannot be read); undefined when inside. */
const outsideWindow = (key: Record<string, unknown>, kid: string, registeredAt: string): string | undefined => {
  const at = parseInstantMicros(registeredAt)
  if (at === undefined) return `t0.registeredAt ${JSON.stringify(registeredAt)} is not an ISO 8601 time, so it cannot be placed in the validity window of key ${kid}`
  const [from, to] = (["attestd_activated_at", "attestd_retired_at"] as const).map((member) => {
    const v = key[member]
    return v === undefined ? undefined : { member, text: typeof v === "string" ? v : JSON.stringify(v), micros: typeof v === "string" ? parseInstantMicros(v) : undefined }
  })
  for (const b of [from, to]) if (b !== undefined && b.micros === undefined) return `key ${kid}'s ${b.member} ${b.text} is not an ISO 8601 time`
  if (from?.micros !== undefined && at < from.micros) {
    return `t0.registeredAt ${registeredAt} is before key ${kid} was activated (${from.text}): outside the key's validity window`
  }
  if (to?.micros !== undefined && at > to.micros) {
    return `t0.registeredAt ${registeredAt} is after key ${kid} was retired (${to.text}): outside the key's validity window`
  }
  return undefined
}

const checkT0 = async (bundle: Record<string, unknown>, hashHex: string | null, opts: VerifyOptions, notes: Array<string>): Promise<T0Check> => {
  const t0 = bundle.t0
  const keysLabel = opts.trustLabels?.keys ?? "the trusted keys given"
  const base = { trust: null, kid: null, key_source: null, thumbprint_ok: null, signature_ok: null, registered_at: null } as const
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

  // The key: from the trusted set when there is one; a key embedded in the bundle is never trusted.
  const embedded = t0.publicKey
  let key: UsableKey
  let keySource: "keys" | "bundle"
  // The window: the trusted key's when it states one (it learns of a retirement later), else the bundle's.
  let window = windowOf(embedded)
  if (opts.keys !== undefined) {
    keySource = "keys"
    const published = opts.keys.find((k) => k.kid === kid)
    window = windowOf(published) ?? window
    if (published === undefined) {
      return fail(`signing key ${kid} is not among the ${opts.keys.length} trusted key(s) (${keysLabel})`, { key_source: keySource })
    }
    const k = asKey(published)
    if (typeof k === "string") return fail(`trusted ${k}`, { key_source: keySource })
    key = k
    if (embedded !== undefined) {
      const e = isRecord(embedded) ? asKey(embedded) : "not an object"
      if (typeof e === "string" || e.x !== key.x || e.y !== key.y || (e.kid !== "" && e.kid !== kid)) {
        return fail(`the key embedded in the bundle (t0.publicKey) is not the trusted key ${kid}`, { key_source: keySource })
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
    return fail("no public key to verify with: the bundle carries no t0.publicKey and no trusted keys were given (--keys or --server)")
  }

  const thumbprintOk = jwkThumbprint(key.x, key.y) === kid
  const payload = t0Payload(hashHex, registeredAt, formatVersion)
  const result = await verifyP256(key, new TextEncoder().encode(payload), sigBytes)
  const signatureOk = result === "valid"
  const more = { key_source: keySource, thumbprint_ok: thumbprintOk, signature_ok: signatureOk }
  if (result === "high-s") {
    return fail(`the signature is not low-S normalised (s > n/2): refused, a high-S signature is a malleated copy`, more)
  }
  if (result === "malformed") return fail("t0.signature is not a well-formed DER ECDSA P-256 signature, or the key is malformed", more)
  if (!signatureOk) return fail(`the ECDSA P-256 signature over "${payload}" does not verify with key ${kid}`, more)
  if (!thumbprintOk) return fail(`the key's RFC 7638 thumbprint is not its kid ${kid}: the key is not the one the kid names`, more)
  const outside = window === undefined ? undefined : outsideWindow(window, kid, registeredAt)
  if (outside !== undefined) return fail(outside, more)

  if (formatVersion !== "2.0.0") notes.push(`t0.formatVersion is ${formatVersion}; this verifier knows format 2.0.0`)
  if (keySource === "bundle") {
    return {
      ...fields,
      ...more,
      status: "unanchored",
      detail: `the signature over "${payload}" verifies with the key embedded in the bundle (${kid}), which anyone can make: ` +
        `T0 is not anchored in a trusted key (pass --keys or --server)`
    }
  }
  return {
    ...fields,
    ...more,
    status: "ok",
    trust: keysLabel,
    detail: `ECDSA P-256 signature over "${payload}" verifies with key ${kid} from ${keysLabel}`
  }
}

// ---------------------------------------------------------------------------
// T1

const checkT1 = async (t1: unknown, hashHex: string | null, opts: VerifyOptions): Promise<T1Check> => {
  const tsaBase = { provider: null, gen_time: null, chain_verified: false, signer: null } as const
  const tsaLabel = opts.trustLabels?.tsa ?? "the TSA trust anchors given"
  if (!isRecord(t1)) {
    const detail = "t1 is not an object"
    return { status: "failed", trust: null, detail, merkle: { status: "not_performed", detail }, tsa: { ...tsaBase, status: "not_performed", detail } }
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
  const anchors = opts.tsaCaPem === undefined ? undefined : typeof opts.tsaCaPem === "string" ? opts.tsaCaPem : opts.tsaCaPem.join("\n")
  let tsa: T1Check["tsa"]
  const root = t1.merkleRoot
  const token = typeof t1.tsaToken === "string" ? decodeBase64(t1.tsaToken) : null
  if (typeof root !== "string" || !HEX64.test(root)) tsa = tsaFail("t1.merkleRoot is not 64 lowercase hex: nothing to check the token against")
  else if (token === null) tsa = tsaFail("t1.tsaToken is missing or not Base64")
  else {
    try {
      const v = await verifyTokenOffline(token, hexToBytes(root), anchors)
      const genTime = v.genTime.toISOString()
      const claimed = str(t1.tsaTimestamp)
      const claimedMs = claimed === null ? undefined : parseIsoMillis(claimed)
      const signer = v.signer.subject
      if (claimedMs === undefined) {
        tsa = tsaFail(`t1.tsaTimestamp ${JSON.stringify(t1.tsaTimestamp)} is not an ISO 8601 time`, { gen_time: genTime, signer })
      } else if (claimedMs !== v.genTime.getTime()) {
        tsa = tsaFail(`the token's genTime ${genTime} differs from t1.tsaTimestamp ${claimed}`, { gen_time: genTime, signer })
      } else {
        tsa = {
          ...tsaBase,
          provider,
          gen_time: genTime,
          signer,
          chain_verified: v.chainVerified,
          status: v.chainVerified ? "ok" : "unanchored",
          detail: v.chainVerified
            ? `RFC 3161 token signed by "${signer}" time-stamps t1.merkleRoot at ${genTime}; its certificate chains (at genTime) to ${tsaLabel}`
            : `RFC 3161 token signed by "${signer}" time-stamps t1.merkleRoot at ${genTime}, checked against the token's own certificate only: ` +
              `its chain was not checked (no TSA trust anchors: pass --tsa-ca or --server)`
        }
      }
    } catch (e) {
      tsa = tsaFail(errText(e))
    }
  }
  const failed = merkle.status === "failed" || tsa.status === "failed"
  const status = failed ? "failed" : tsa.status === "ok" && merkle.status === "ok" ? "ok" : "unanchored"
  return {
    status,
    trust: status === "ok" ? tsaLabel : null,
    detail: failed
      ? [merkle, tsa].filter((c) => c.status === "failed").map((c) => c.detail).join("; ")
      : `hash_hex is in batch ${String(t1.batchId)} (root ${String(root)}), time-stamped at ${tsa.gen_time}` +
        (status === "ok" ? ` by a TSA whose certificate chains (at genTime) to ${tsaLabel}` : " (TSA chain not checked: unanchored)"),
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

type Confirmation =
  | { readonly _tag: "header"; readonly header: string; readonly label: string }
  | { readonly _tag: "merkleRoot"; readonly merkleRoot: string; readonly label: string }
  | { readonly _tag: "failed"; readonly detail: string }
  | { readonly _tag: "none"; readonly detail: string }

const defaultFetch = (): VerifyOptions["fetch"] => {
  const f = (globalThis as { fetch?: (url: string) => Promise<{ ok: boolean; status: number; text(): Promise<string> }> }).fetch
  return f === undefined ? undefined : (url) => f(url)
}

/** Asks every Esplora-compatible source for the header at `height`; all must agree. */
const askSources = async (sources: ReadonlyArray<string>, height: number, opts: VerifyOptions, what = "Bitcoin"): Promise<Confirmation> => {
  const fetcher = opts.fetch ?? defaultFetch()
  if (fetcher === undefined) return { _tag: "none", detail: "no fetch available to ask the Bitcoin sources" }
  const get = async (url: string): Promise<string> => {
    const res = await fetcher(url)
    if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`)
    return (await res.text()).trim()
  }
  const answers: Array<{ source: string; header: string }> = []
  for (const source of sources) {
    const base = source.replace(/\/+$/, "")
    try {
      const hash = await get(`${base}/block-height/${height}`)
      if (!/^[0-9a-fA-F]{64}$/.test(hash)) throw new Error(`${base}/block-height/${height} did not return a block hash`)
      const header = (await get(`${base}/block/${hash.toLowerCase()}/header`)).toLowerCase()
      if (!/^[0-9a-f]{160}$/.test(header)) throw new Error(`${base}/block/${hash}/header did not return an 80-byte header`)
      if (blockHash(headerBytes(header)) !== hash.toLowerCase()) throw new Error(`${base} returned a header whose hash is not ${hash}`)
      answers.push({ source: base, header })
    } catch (e) {
      return { _tag: "none", detail: `${what} source ${base} could not be asked (${errText(e)}); the header's place in the chain was not confirmed` }
    }
  }
  const first = answers[0]
  if (first === undefined) return { _tag: "none", detail: `no ${what} source given` }
  const other = answers.find((a) => a.header !== first.header)
  if (other !== undefined) {
    return { _tag: "failed", detail: `the ${what} sources disagree on block ${height}: ${first.source} and ${other.source} return different headers` }
  }
  return { _tag: "header", header: first.header, label: `${what} sources ${answers.map((a) => a.source).join(", ")} (all agree)` }
}

const confirmation = async (height: number, simulated: boolean, opts: VerifyOptions, notes: Array<string>): Promise<Confirmation> => {
  const h = String(height)
  const labels = opts.trustLabels ?? {}
  if (simulated) {
    const sim = opts.simulatedHeaders?.[h]
    if (sim !== undefined) return { _tag: "header", header: sim.toLowerCase(), label: `${labels.simulated ?? "the simulated chain headers given"} (SIMULATED chain, not Bitcoin)` }
    if (opts.simulatedSources !== undefined && opts.simulatedSources.length > 0) {
      const asked = await askSources(opts.simulatedSources, height, opts, "simulated chain")
      if (asked._tag !== "header") return asked
      return { ...asked, label: `${asked.label} (SIMULATED chain, not Bitcoin)` }
    }
  } else {
    const given = opts.bitcoinHeaders?.[h]
    if (given !== undefined) return { _tag: "header", header: given.toLowerCase(), label: labels.headers ?? "the Bitcoin block headers given" }
    if (opts.bitcoinSources !== undefined && opts.bitcoinSources.length > 0) {
      const asked = await askSources(opts.bitcoinSources, height, opts)
      if (asked._tag !== "none" || opts.otsHeaders?.[h] === undefined) return asked
      notes.push(asked.detail)
    }
  }
  const root = opts.otsHeaders?.[h]
  if (root !== undefined) return { _tag: "merkleRoot", merkleRoot: root.toLowerCase(), label: labels.otsHeaders ?? "the --ots-headers file" }
  if (simulated && (opts.bitcoinHeaders !== undefined || (opts.bitcoinSources?.length ?? 0) > 0)) {
    notes.push("t2 is on a SIMULATED chain: real Bitcoin headers and sources cannot confirm it")
  }
  return { _tag: "none", detail: simulated ? "no header of the simulated chain was given for this block" : "no Bitcoin block header or source was given" }
}

const checkT2 = async (t2: unknown, t1: unknown, hashHex: string | null, opts: VerifyOptions, notes: Array<string>): Promise<T2Check> => {
  const btcBase = { height: null, merkle_root: null, block_hash: null, header_ok: null, chain_confirmed: false } as const
  if (!isRecord(t2)) {
    const detail = "t2 is not an object"
    const np = { status: "not_performed" as const, detail }
    return { status: "failed", trust: null, detail, merkle: np, ots: np, bitcoin: { ...btcBase, ...np }, simulated: false }
  }
  const simulated = t2.simulated === true
  const chainName = simulated ? "simulated chain" : "Bitcoin"
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

  let trust: string | null = null
  if (height !== null && ots.status === "ok") {
    const commitments = new Set(reachedAt.map((r) => r.commitment))
    const commitment = reachedAt[0]!.commitment
    const b = { ...btcBase, height, merkle_root: commitment }
    /** Self-consistency of a header: its merkle root is a reached message, its hash meets its nBits. */
    const headerProblem = (hex: string, what: string): string | null => {
      let bytes: Uint8Array
      try {
        bytes = headerBytes(hex)
      } catch (e) {
        return `${what}: ${errText(e)}`
      }
      const root = parseHeader(hex).merkleRoot
      if (!commitments.has(root)) {
        const hint = [...commitments].some((c) => reverseHex(c) === root) ? " (byte-reversed)" : ""
        return `the merkle root field of ${what} is ${root}${hint}, the OTS operations reach ${commitment}`
      }
      try {
        if (!meetsTarget(bytes)) return `${what} does not meet the proof-of-work target of its nBits`
      } catch (e) {
        return `${what}: ${errText(e)}`
      }
      return null
    }
    const bundleHeader = typeof t2.bitcoinBlockHeader === "string" ? t2.bitcoinBlockHeader.toLowerCase() : null
    let problem: string | null = null
    let bundleHash: string | null = null
    if (t2.bitcoinBlockHeader !== undefined && t2.bitcoinBlockHeader !== null && bundleHeader === null) problem = "t2.bitcoinBlockHeader is not a string"
    if (bundleHeader !== null) {
      problem = headerProblem(bundleHeader, "t2.bitcoinBlockHeader")
      if (problem === null) {
        bundleHash = blockHash(headerBytes(bundleHeader))
        if (typeof t2.bitcoinBlockHash === "string" && t2.bitcoinBlockHash.toLowerCase() !== bundleHash) {
          problem = `t2.bitcoinBlockHash ${t2.bitcoinBlockHash} is not the hash of t2.bitcoinBlockHeader (${bundleHash})`
        }
      }
    }
    if (problem !== null) {
      bitcoin = { ...b, block_hash: bundleHash, header_ok: false, status: "failed", detail: problem }
    } else {
      const conf = await confirmation(height, simulated, opts, notes)
      const headerOk = bundleHeader === null ? null : true
      const selfConsistent = bundleHeader === null
        ? `the bundle carries no block header (t2.bitcoinBlockHeader); the message reached at ${chainName} block ${height} is ${commitment}`
        : `the block header in the bundle is self-consistent (its merkle root is the message the OTS operations reach, its hash ${bundleHash} meets its nBits target)`
      if (conf._tag === "failed") {
        bitcoin = { ...b, block_hash: bundleHash, header_ok: headerOk, status: "failed", detail: conf.detail }
      } else if (conf._tag === "none") {
        bitcoin = {
          ...b,
          block_hash: bundleHash,
          header_ok: headerOk,
          status: "unanchored",
          detail: `${selfConsistent}; its place in the chain was NOT checked (${conf.detail}: pass --bitcoin-source, --ots-headers or --server)`
        }
      } else if (conf._tag === "merkleRoot") {
        if (commitments.has(conf.merkleRoot)) {
          trust = conf.label
          bitcoin = {
            ...b,
            merkle_root: conf.merkleRoot,
            block_hash: bundleHash,
            header_ok: headerOk,
            chain_confirmed: true,
            status: "ok",
            detail: `the message reached equals the merkle root of ${chainName} block ${height} from ${conf.label}`
          }
        } else {
          const hint = [...commitments].some((c) => reverseHex(c) === conf.merkleRoot)
            ? " (it matches byte-reversed: --ots-headers must use the byte order the OTS operations produce, not the block-explorer order)"
            : ""
          bitcoin = {
            ...b,
            block_hash: bundleHash,
            header_ok: headerOk,
            status: "failed",
            detail: `the merkle root reached at block ${height} is ${commitment}, ${conf.label} has ${conf.merkleRoot}${hint}`
          }
        }
      } else {
        const confirmedHash = /^[0-9a-f]{160}$/.test(conf.header) ? blockHash(headerBytes(conf.header)) : null
        const mismatch = bundleHeader !== null
          ? bundleHeader === conf.header ? null : `the block header in the bundle (${bundleHash}) is not ${chainName} block ${height} per ${conf.label} (${confirmedHash ?? "malformed header"})`
          : headerProblem(conf.header, `${chainName} block ${height} from ${conf.label}`)
        if (mismatch !== null) {
          bitcoin = { ...b, block_hash: bundleHash, header_ok: headerOk, status: "failed", detail: mismatch }
        } else {
          trust = conf.label
          bitcoin = {
            ...b,
            block_hash: confirmedHash,
            header_ok: headerOk,
            chain_confirmed: true,
            status: "ok",
            detail: `${selfConsistent}; it is ${chainName} block ${height} (${confirmedHash}) per ${conf.label}`
          }
        }
      }
    }
  }

  const failed = merkle.status === "failed" || ots.status === "failed" || bitcoin.status === "failed"
  const status = failed ? "failed" : bitcoin.status === "ok" ? "ok" : "unanchored"
  const sim = simulated ? " — SIMULATED chain: the block is not part of the real Bitcoin blockchain" : ""
  const detail = failed
    ? [merkle, ots, bitcoin].filter((c) => c.status === "failed").map((c) => c.detail).join("; ") + sim
    : status === "ok"
    ? `daily root ${dailyRoot} anchored in ${chainName} block ${height}, confirmed by ${trust}${sim}`
    : `daily root ${dailyRoot} and the .ots operations check up to ${chainName} block ${height}, but the block's place in the chain was not confirmed (unanchored)${sim}`
  return { status, trust: status === "ok" ? trust : null, detail, merkle, ots, bitcoin, simulated }
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

  const input = await checkInput(hashHex, opts)
  const t0: T0Check = isRecord(bundle)
    ? await checkT0(b, hashHex, opts, notes)
    : {
      status: "failed",
      detail: "the bundle is not a JSON object",
      trust: null,
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
    t1 = { ...m, status: "failed", trust: null, merkle: m, tsa: { ...m, provider: null, gen_time: null, chain_verified: false, signer: null } }
  }
  let t2: T2Check | undefined
  if (b.t2 !== undefined) t2 = await checkT2(b.t2, b.t1, hashHex, opts, notes)
  else if (levelRank(level) >= 2) {
    const m = missing("t2")
    t2 = {
      ...m,
      status: "failed",
      trust: null,
      merkle: m,
      ots: m,
      bitcoin: { ...m, height: null, merkle_root: null, block_hash: null, header_ok: null, chain_confirmed: false },
      simulated: false
    }
  }

  if (level !== null && levelRank(level) < 0) notes.push(`level ${JSON.stringify(level)} is not T0, T1 or T2`)
  const present = b.t2 !== undefined ? 2 : b.t1 !== undefined ? 1 : 0
  if (level !== null && levelRank(level) >= 0 && levelRank(level) < present) {
    notes.push(`the bundle claims level ${level} but carries a ${present === 2 ? "t2" : "t1"} section, which was checked too`)
  }
  if (t0.status === "unanchored") notes.push(`T0 checked only against the key embedded in the bundle (${t0.kid}): compare it with the service's published keys (--keys or --server)`)
  if (t1?.status === "unanchored") notes.push("the TSA certificate chain was not checked (no TSA trust anchors): T1 is unanchored")
  if (t2?.status === "unanchored") notes.push(`the Bitcoin block's place in the chain was not checked: ${t2.bitcoin.detail}`)
  if (t2?.simulated) notes.push("t2 refers to a SIMULATED chain (demo calendar), not the real Bitcoin blockchain")

  const statuses: Array<CheckStatus> = [input?.status, t0.status, t1?.status, t2?.status].flatMap((s) => (s === undefined ? [] : [s]))
  const verdict: Verdict = statuses.some((s) => s === "failed")
    ? "failed"
    : statuses.some((s) => s !== "ok")
    ? "partial"
    : "verified"
  const verifiedLevel: Report["verified_level"] = t0.status !== "ok"
    ? null
    : t1?.status !== "ok"
    ? "T0"
    : t2?.status !== "ok"
    ? "T1"
    : "T2"

  return {
    ok: verdict === "verified",
    verdict,
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
    notes,
    crypto: cryptoBackend()
  }
}

/** A few human-readable lines for stderr (and the page's text summary); every field from the bundle or an input goes through `shown`. */
export const summarize = (r: Report): string => {
  const mark = (s: CheckStatus) => (s === "ok" ? "OK" : s === "failed" ? "FAILED" : s === "unanchored" ? "UNANCHORED" : "NOT PERFORMED")
  const verdict = r.verdict === "verified" ? "VERIFIED" : r.verdict === "failed" ? "FAILED" : "PARTIAL (the math holds, but not every tier is anchored in a trust input)"
  const lines = [`attestd verify: ${verdict} ${shown(r.id ?? "(no id)")} ${shown(r.hash_hex ?? "")}`.trimEnd()]
  const trust = (c: { readonly trust: string | null }) => (c.trust === null ? "" : ` [trust: ${shown(c.trust)}]`)
  if (r.checks.input) lines.push(`  input  ${mark(r.checks.input.status)}: ${shown(r.checks.input.detail)}`)
  lines.push(`  T0     ${mark(r.checks.t0.status)}: ${shown(r.checks.t0.detail)}${trust(r.checks.t0)}`)
  if (r.checks.t1) lines.push(`  T1     ${mark(r.checks.t1.status)}: ${shown(r.checks.t1.detail)}${trust(r.checks.t1)}`)
  if (r.checks.t2) {
    lines.push(`  T2     ${mark(r.checks.t2.status)}: ${shown(r.checks.t2.detail)}${trust(r.checks.t2)}`)
    lines.push(`  Bitcoin ${mark(r.checks.t2.bitcoin.status)}: ${shown(r.checks.t2.bitcoin.detail)}`)
  }
  for (const n of r.notes) lines.push(`  note: ${shown(n)}`)
  return lines.join("\n")
}
