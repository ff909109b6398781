/**
 * Tier T0 (spec 9.5): ECDSA P-256 over SHA-256 of `format_version|hash_hex|registered_at`,
 * DER, Base64. Our signatures are low-S normalised (s <= n/2); verifiers reject high-S
 * (accepting both would make signatures malleable).
 *
 * Pure and portable (Node and browsers). The node:crypto signing and verifying
 * helpers of the server live in src/Platform/T0Node.ts.
 */
import { sha256 } from "@noble/hashes/sha2.js"

export const FORMAT_VERSION = "2.0.0"
export const T0_ALGORITHM = "ECDSA-P256-SHA256" as const

export const t0Payload = (hashHex: string, registeredAt: string, formatVersion: string = FORMAT_VERSION): string =>
  `${formatVersion}|${hashHex}|${registeredAt}`

export const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n
export const P256_HALF_N = P256_N >> 1n

const bytesToBigInt = (bytes: Uint8Array): bigint => {
  let v = 0n
  for (const b of bytes) v = (v << 8n) | BigInt(b)
  return v
}

const readDerInt = (buf: Uint8Array, offset: number): { value: bigint; next: number } => {
  if (buf[offset] !== 0x02) throw new Error("DER: expected INTEGER")
  const len = buf[offset + 1]
  if (len === undefined || len === 0 || len > 33 || offset + 2 + len > buf.length) throw new Error("DER: bad INTEGER length")
  const bytes = buf.subarray(offset + 2, offset + 2 + len)
  if ((bytes[0]! & 0x80) !== 0) throw new Error("DER: negative INTEGER")
  if (bytes.length > 1 && bytes[0] === 0 && (bytes[1]! & 0x80) === 0) throw new Error("DER: INTEGER not minimally encoded")
  return { value: bytesToBigInt(bytes), next: offset + 2 + len }
}

/** Splits a DER ECDSA signature into (r, s). Throws on malformed input. */
export const parseDerSignature = (der: Uint8Array): { r: bigint; s: bigint } => {
  if (der[0] !== 0x30 || der[1] !== der.length - 2) throw new Error("DER: expected SEQUENCE")
  const r = readDerInt(der, 2)
  const s = readDerInt(der, r.next)
  if (s.next !== der.length) throw new Error("DER: trailing bytes")
  return { r: r.value, s: s.value }
}

const intBytes = (v: bigint): Array<number> => {
  const out: Array<number> = []
  while (v > 0n) {
    out.unshift(Number(v & 0xffn))
    v >>= 8n
  }
  if (out.length === 0) out.push(0)
  if ((out[0]! & 0x80) !== 0) out.unshift(0)
  return out
}

export const encodeDerSignature = (r: bigint, s: bigint): Uint8Array => {
  const rb = intBytes(r)
  const sb = intBytes(s)
  const body = [0x02, rb.length, ...rb, 0x02, sb.length, ...sb]
  return Uint8Array.from([0x30, body.length, ...body])
}

/** Rewrites a signature with s > n/2 to the equivalent low-S one. */
export const normalizeLowS = (der: Uint8Array): Uint8Array => {
  const { r, s } = parseDerSignature(der)
  return s > P256_HALF_N ? encodeDerSignature(r, P256_N - s) : der
}

export interface PublicJwk {
  readonly kty: "EC"
  readonly crv: "P-256"
  readonly alg: "ES256"
  readonly kid: string
  readonly x: string
  readonly y: string
  readonly use?: "sig"
}

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

export const base64UrlEncode = (bytes: Uint8Array): string => {
  let out = ""
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0)
    const chars = i + 2 < bytes.length ? 4 : i + 1 < bytes.length ? 3 : 2
    for (let j = 0; j < chars; j++) out += B64URL[(n >> (18 - 6 * j)) & 63]
  }
  return out
}

/** RFC 7638 JWK thumbprint (SHA-256, Base64URL): a key id anyone can recompute from the key. */
export const jwkThumbprint = (x: string, y: string): string =>
  base64UrlEncode(sha256(new TextEncoder().encode(JSON.stringify({ crv: "P-256", kty: "EC", x, y }))))
