/**
 * The receipt `attestd stamp` writes beside a file (`FILE.attestd.json`). Portable
 * (no node:*, no Buffer), so the verifier page could read receipts too.
 *
 * A plain stamp writes the evidence bundle exactly as GET /v1/attestation/{id}/evidence
 * returns it. A stamp with `--hmac-key` attests HMAC-SHA256(key, digest) instead of the
 * file's SHA-256, and wraps the bundle so that verification knows to redo the HMAC:
 *
 *   { "attestd_receipt": 1,
 *     "digest": { "algorithm": "HMAC-SHA256", "key": "hex-decoded --hmac-key",
 *                 "message": "sha256-hex", "key_id": "<16 hex>" },
 *     "evidence": { …the bundle as the server returned it… } }
 *
 * `message: "sha256-hex"`: the HMAC runs over the ASCII lowercase hex SHA-256 of the
 * file (the convention of spec 2.14's derived lists), keyed with the raw bytes of the
 * hex key. `key_id` is the first 16 hex characters of HMAC-SHA256(key, "attestd key id"):
 * it tells a wrong key from a changed file and reveals nothing of the key or the file.
 * Never the key itself, never the file's SHA-256 (that would undo the HMAC).
 */
import { bytesToHex, hexToBytes } from "../Domain/Bytes.js"

export const RECEIPT_SUFFIX = ".attestd.json"

export interface HmacDigestSpec {
  readonly algorithm: "HMAC-SHA256"
  readonly key: "hex-decoded --hmac-key"
  readonly message: "sha256-hex"
  readonly key_id: string
}

export interface WrappedReceipt {
  readonly attestd_receipt: 1
  readonly digest: HmacDigestSpec
  readonly evidence: Record<string, unknown>
}

export interface Receipt {
  /** The evidence bundle. */
  readonly evidence: Record<string, unknown>
  /** Present when the attested hash is an HMAC of the file's SHA-256. */
  readonly hmac: HmacDigestSpec | null
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Reads a receipt: the wrapper is unwrapped, anything else is taken as a bare bundle. Throws on a bad wrapper. */
export const parseReceipt = (doc: unknown): Receipt => {
  if (!isRecord(doc) || !("attestd_receipt" in doc)) return { evidence: isRecord(doc) ? doc : {}, hmac: null }
  if (doc.attestd_receipt !== 1) throw new Error(`unknown receipt version ${JSON.stringify(doc.attestd_receipt)} (this attestd reads 1)`)
  const d = doc.digest
  if (!isRecord(d) || d.algorithm !== "HMAC-SHA256" || d.message !== "sha256-hex" || typeof d.key_id !== "string") {
    throw new Error("receipt digest must be {algorithm: \"HMAC-SHA256\", message: \"sha256-hex\", key_id}")
  }
  if (!isRecord(doc.evidence)) throw new Error("receipt has no evidence object")
  return {
    evidence: doc.evidence,
    hmac: { algorithm: "HMAC-SHA256", key: "hex-decoded --hmac-key", message: "sha256-hex", key_id: d.key_id }
  }
}

/** The document to write: the bare bundle, or the wrapper when an HMAC was attested. */
export const receiptDocument = (evidence: Record<string, unknown>, hmac: HmacDigestSpec | null): Record<string, unknown> =>
  hmac === null ? evidence : ({ attestd_receipt: 1, digest: hmac, evidence } satisfies WrappedReceipt)

/** Parses `--hmac-key HEX` (at least 16 bytes, an even number of hex digits). Throws with a message for the user. */
export const parseHmacKey = (hex: string): Uint8Array => {
  const h = hex.trim().toLowerCase()
  if (!/^([0-9a-f]{2})+$/.test(h)) throw new Error("--hmac-key must be hex (an even number of 0-9a-f digits)")
  if (h.length < 32) throw new Error("--hmac-key must be at least 16 bytes (32 hex digits)")
  return hexToBytes(h)
}

const hmac = async (key: Uint8Array, message: string): Promise<string> => {
  const k = await crypto.subtle.importKey("raw", key as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  return bytesToHex(new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode(message))))
}

/** The key's public fingerprint recorded in the receipt. */
export const hmacKeyId = async (key: Uint8Array): Promise<string> => (await hmac(key, "attestd key id")).slice(0, 16)

/** HMAC-SHA256(key, ASCII lowercase hex SHA-256 of the file): the hash a `--hmac-key` stamp attests. */
export const hmacOfDigest = (key: Uint8Array, sha256Hex: string): Promise<string> => hmac(key, sha256Hex.toLowerCase())

export const hmacSpec = async (key: Uint8Array): Promise<HmacDigestSpec> => ({
  algorithm: "HMAC-SHA256",
  key: "hex-decoded --hmac-key",
  message: "sha256-hex",
  key_id: await hmacKeyId(key)
})
