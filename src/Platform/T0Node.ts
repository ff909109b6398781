/** Server-side T0 helpers on node:crypto (the portable codec is src/Domain/T0.ts). */
import { createPublicKey, verify as nodeVerify, type KeyObject } from "node:crypto"
import { type PublicJwk, t0Payload } from "../Domain/T0.js"

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
