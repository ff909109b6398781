/**
 * The verifier's primitives, portable: WebCrypto (`globalThis.crypto.subtle`,
 * Node 20 and browsers in secure contexts) with a fallback to @noble when it
 * is missing (e.g. a page served over plain http to a non-local address).
 */
import { p256 } from "@noble/curves/nist.js"
import { sha256 as nobleSha256, sha384 as nobleSha384, sha512 as nobleSha512 } from "@noble/hashes/sha2.js"
import { base64ToBytes } from "../Domain/Bytes.js"

/** The part of WebCrypto's SubtleCrypto used here (typed structurally: no DOM lib in this project). */
interface Subtle {
  digest(algorithm: string, data: ArrayBuffer): Promise<ArrayBuffer>
  importKey(format: "jwk", key: object, algorithm: object, extractable: boolean, usages: Array<string>): Promise<unknown>
  verify(algorithm: object, key: unknown, signature: ArrayBuffer, data: ArrayBuffer): Promise<boolean>
}

const subtle = (): Subtle | undefined => (globalThis as unknown as { crypto?: { subtle?: Subtle } }).crypto?.subtle

/** Which implementation checks signatures and hashes here. */
export const cryptoBackend = (): "webcrypto" | "noble" => (subtle() !== undefined ? "webcrypto" : "noble")

/** An exact copy in a fresh ArrayBuffer (a Node Buffer's .buffer is its whole pool). */
const toBuffer = (b: Uint8Array): ArrayBuffer => {
  const copy = new Uint8Array(b.length)
  copy.set(b)
  return copy.buffer
}

export const sha256 = async (data: Uint8Array): Promise<Uint8Array> => {
  const s = subtle()
  return s !== undefined ? new Uint8Array(await s.digest("SHA-256", toBuffer(data))) : nobleSha256(data)
}

export type ImprintAlgorithm = "SHA-256" | "SHA-384" | "SHA-512"

const NOBLE: Record<ImprintAlgorithm, (data: Uint8Array) => Uint8Array> = { "SHA-256": nobleSha256, "SHA-384": nobleSha384, "SHA-512": nobleSha512 }

/** SHA-256, SHA-384 or SHA-512 of `data` (what a time-stamp token's imprint may be). */
export const digest = async (algorithm: ImprintAlgorithm, data: Uint8Array): Promise<Uint8Array> => {
  const s = subtle()
  return s !== undefined ? new Uint8Array(await s.digest(algorithm, toBuffer(data))) : NOBLE[algorithm](data)
}

export type SignatureResult = "valid" | "invalid" | "high-s" | "malformed"

/**
 * ECDSA P-256 / SHA-256 over `message` with the public key (x, y) (Base64URL,
 * JWK coordinates); `der` is the DER signature. High-S signatures are refused
 * (the service signs low-S; accepting both makes signatures malleable).
 */
export const verifyP256 = async (key: { readonly x: string; readonly y: string }, message: Uint8Array, der: Uint8Array): Promise<SignatureResult> => {
  let sig: ReturnType<typeof p256.Signature.fromBytes>
  try {
    // Strict DER (minimal integers, no trailing bytes) and 0 < r, s < n.
    sig = p256.Signature.fromBytes(der, "der")
  } catch {
    return "malformed"
  }
  if (sig.hasHighS()) return "high-s"
  let x: Uint8Array
  let y: Uint8Array
  try {
    x = base64ToBytes(key.x)
    y = base64ToBytes(key.y)
  } catch {
    return "malformed"
  }
  if (x.length !== 32 || y.length !== 32) return "malformed"
  const raw = sig.toBytes("compact")
  const sb = subtle()
  try {
    if (sb !== undefined) {
      const k = await sb.importKey("jwk", { kty: "EC", crv: "P-256", x: key.x, y: key.y, ext: true }, { name: "ECDSA", namedCurve: "P-256" }, false, ["verify"])
      return (await sb.verify({ name: "ECDSA", hash: "SHA-256" }, k, toBuffer(raw), toBuffer(message))) ? "valid" : "invalid"
    }
    const pub = new Uint8Array(65)
    pub[0] = 4
    pub.set(x, 1)
    pub.set(y, 33)
    return p256.verify(raw, message, pub, { prehash: true, lowS: true, format: "compact" }) ? "valid" : "invalid"
  } catch {
    return "malformed"
  }
}
