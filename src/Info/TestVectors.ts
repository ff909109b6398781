/**
 * GET /test-vectors.json: worked examples for client authors, produced by the
 * service's own code at start. Explicitly NOT acceptance vectors: signatures are
 * randomised and the key is a published demo key that signs nothing real.
 */
import { createECDH, createHash, createHmac, createPrivateKey, type KeyObject } from "node:crypto"
import { buildTree } from "../Sealing/MerkleBuilder.js"
import { FORMAT_VERSION, t0Payload } from "../Domain/T0.js"
import { publicJwkOf, signPayload } from "../Platform/Keys/FileKeys.js"

const sha256Hex = (s: string) => createHash("sha256").update(s, "utf8").digest("hex")

/** A fixed, published demo key, so the example key id is stable across releases. */
const demoKey = (): KeyObject => {
  const d = createHash("sha256").update("attestd test-vector demo key (never used for real attestations)").digest()
  const ecdh = createECDH("prime256v1")
  ecdh.setPrivateKey(d)
  const pub = ecdh.getPublicKey()
  return createPrivateKey({
    key: {
      kty: "EC",
      crv: "P-256",
      d: d.toString("base64url"),
      x: pub.subarray(1, 33).toString("base64url"),
      y: pub.subarray(33, 65).toString("base64url")
    },
    format: "jwk"
  })
}

export const derivedValue = (listKeyHex: string, hashHex: string): string =>
  createHmac("sha256", Buffer.from(listKeyHex, "hex")).update(hashHex, "ascii").digest("hex")

export const testVectors = () => {
  const key = demoKey()
  const jwk = publicJwkOf(key)
  const hashHex = sha256Hex("hello world")
  const registeredAt = "2026-01-15T12:34:56.789012+00:00"
  const payload = t0Payload(hashHex, registeredAt)

  const leaves = ["a", "b", "c", "d", "e"].map(sha256Hex)
  const tree = buildTree(leaves)
  const listKey = sha256Hex("attestd test-vector list key")

  return {
    description:
      "Worked examples produced by attestd's own code for client authors. These are NOT acceptance vectors: signatures are randomised per start, and the demo key signs nothing real.",
    not_acceptance_vectors: true,
    t0: {
      description:
        "T0: ECDSA P-256 over SHA-256 of format_version|hash_hex|registered_at (UTF-8), DER, Base64. Signatures are low-S normalised.",
      input_utf8: "hello world",
      hash_hex: hashHex,
      format_version: FORMAT_VERSION,
      registered_at: registeredAt,
      signed_payload: payload,
      signed_payload_sha256: sha256Hex(payload),
      signature: signPayload(key, payload),
      public_key: jwk
    },
    merkle_v2: {
      description:
        "Leaves are raw SHA-256 values, sorted; node = SHA-256(0x01 || left || right); an odd node is duplicated; one leaf: root = leaf. position left means the sibling is the left operand.",
      leaves_unsorted: leaves,
      leaves_sorted: Array.from({ length: tree.leafCount }, (_, i) => tree.leafHex(i)),
      root: tree.rootHex,
      proofs: Array.from({ length: tree.leafCount }, (_, i) => ({ leaf: tree.leafHex(i), proof: tree.proof(i) }))
    },
    derived_list: {
      description:
        "Derived value = lowercase hex HMAC-SHA256, key = the raw bytes of the hex list_key, message = the ASCII hash_hex.",
      list_key: listKey,
      hash_hex: hashHex,
      derived_value: derivedValue(listKey, hashHex)
    }
  }
}
