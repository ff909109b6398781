/**
 * Tier T0 (spec 9.5): ECDSA P-256 over SHA-256 of `format_version|hash_hex|registered_at`,
 * DER, Base64. Our signatures are low-S normalised (s <= n/2); verifiers reject high-S
 * (accepting both would make signatures malleable).
 *
 * Pure and portable (Node and browsers). The node:crypto signing and verifying
 * helpers of the server live in src/Platform/T0Node.ts.
 */
import { p256 } from "@noble/curves/nist.js"
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToBase64Url } from "./Bytes.js"

export const FORMAT_VERSION = "2.0.0"
export const T0_ALGORITHM = "ECDSA-P256-SHA256" as const

export const t0Payload = (hashHex: string, registeredAt: string, formatVersion: string = FORMAT_VERSION): string =>
  `${formatVersion}|${hashHex}|${registeredAt}`

/** Rewrites a DER signature with s > n/2 to the equivalent low-S one (@noble/curves parses strictly: throws on malformed DER). */
export const normalizeLowS = (der: Uint8Array): Uint8Array => {
  const sig = p256.Signature.fromBytes(der, "der")
  const low = lowS(sig)
  return low === sig ? der : low.toBytes("der")
}

/** The low-S one of a signature's two equivalent forms. */
const lowS = (sig: InstanceType<typeof p256.Signature>) => (sig.hasHighS() ? new p256.Signature(sig.r, p256.Point.Fn.neg(sig.s)) : sig)

/** A raw r‖s signature (64 bytes, as PKCS#11's CKM_ECDSA and WebCrypto return it) as low-S DER. */
export const compactToLowSDer = (rs: Uint8Array): Uint8Array => lowS(p256.Signature.fromBytes(rs, "compact")).toBytes("der")

export interface PublicJwk {
  readonly kty: "EC"
  readonly crv: "P-256"
  readonly alg: "ES256"
  readonly kid: string
  readonly x: string
  readonly y: string
  readonly use?: "sig" | undefined
}

/** RFC 7638 JWK thumbprint (SHA-256, Base64URL): a key id anyone can recompute from the key. */
export const jwkThumbprint = (x: string, y: string): string =>
  bytesToBase64Url(sha256(new TextEncoder().encode(JSON.stringify({ crv: "P-256", kty: "EC", x, y }))))
