/**
 * Tier T0 (spec 9.5): ECDSA P-256 over SHA-256 of `format_version|hash_hex|registered_at`,
 * DER, Base64. Our signatures are low-S normalised (s <= n/2), so strict verifiers
 * (noble's default, BIP-62 style) and lenient ones (OpenSSL) both accept them.
 */
import { createHash, createPublicKey, verify as nodeVerify, type KeyObject } from "node:crypto"

export const FORMAT_VERSION = "2.0.0"
export const T0_ALGORITHM = "ECDSA-P256-SHA256" as const

export const t0Payload = (hashHex: string, registeredAt: string, formatVersion: string = FORMAT_VERSION): string =>
  `${formatVersion}|${hashHex}|${registeredAt}`

const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n
const HALF_N = P256_N >> 1n

const readDerInt = (buf: Buffer, offset: number): { value: bigint; next: number } => {
  if (buf[offset] !== 0x02) throw new Error("DER: expected INTEGER")
  const len = buf[offset + 1]!
  const bytes = buf.subarray(offset + 2, offset + 2 + len)
  return { value: BigInt("0x" + (bytes.length ? bytes.toString("hex") : "00")), next: offset + 2 + len }
}

const derInt = (v: bigint): Buffer => {
  let hex = v.toString(16)
  if (hex.length % 2) hex = "0" + hex
  let bytes = Buffer.from(hex, "hex")
  if (bytes[0]! & 0x80) bytes = Buffer.concat([Buffer.from([0]), bytes])
  return Buffer.concat([Buffer.from([0x02, bytes.length]), bytes])
}

/** Splits a DER ECDSA signature into (r, s). Throws on malformed input. */
export const parseDerSignature = (der: Buffer): { r: bigint; s: bigint } => {
  if (der[0] !== 0x30 || der[1] !== der.length - 2) throw new Error("DER: expected SEQUENCE")
  const r = readDerInt(der, 2)
  const s = readDerInt(der, r.next)
  if (s.next !== der.length) throw new Error("DER: trailing bytes")
  return { r: r.value, s: s.value }
}

export const encodeDerSignature = (r: bigint, s: bigint): Buffer => {
  const body = Buffer.concat([derInt(r), derInt(s)])
  return Buffer.concat([Buffer.from([0x30, body.length]), body])
}

/** Rewrites a signature with s > n/2 to the equivalent low-S one. */
export const normalizeLowS = (der: Buffer): Buffer => {
  const { r, s } = parseDerSignature(der)
  return s > HALF_N ? encodeDerSignature(r, P256_N - s) : der
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

/** RFC 7638 JWK thumbprint (SHA-256, Base64URL): a key id anyone can recompute from the key. */
export const jwkThumbprint = (x: string, y: string): string =>
  createHash("sha256").update(JSON.stringify({ crv: "P-256", kty: "EC", x, y })).digest("base64url")

export const jwkToKeyObject = (jwk: PublicJwk): KeyObject =>
  createPublicKey({ key: { kty: "EC", crv: "P-256", x: jwk.x, y: jwk.y }, format: "jwk" })

/** Checks a T0 signature with node:crypto (independent of the signer's code path). */
export const verifyT0 = (
  input: { readonly hashHex: string; readonly registeredAt: string; readonly formatVersion: string; readonly signature: string },
  key: KeyObject
): boolean => {
  try {
    return nodeVerify(
      "sha256",
      Buffer.from(t0Payload(input.hashHex, input.registeredAt, input.formatVersion), "utf8"),
      { key, dsaEncoding: "der" },
      Buffer.from(input.signature, "base64")
    )
  } catch {
    return false
  }
}
