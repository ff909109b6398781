/**
 * Third-party side of derived lists: compute the HMAC values of your own hashes
 * locally, then send only those to the match endpoint. Portable (no node:*).
 */
import { hmac } from "@noble/hashes/hmac.js"
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, hexToBytes } from "../Domain/Bytes.js"

const ascii = new TextEncoder()

/** Lowercase hex HMAC-SHA256 per hash, keyed with the raw bytes of the hex list_key, over the ASCII hash_hex. */
export const deriveValues = (listKey: string, hashes: ReadonlyArray<string>): Array<string> => {
  if (!/^[0-9a-f]{64}$/.test(listKey)) throw new Error("list_key must be 64 lowercase hex characters")
  const keyed = hmac.create(sha256, hexToBytes(listKey))
  return hashes.map((h) => {
    if (!/^[0-9a-f]{64}$/.test(h)) throw new Error(`not a SHA-256 hex digest: ${h.slice(0, 80)}`)
    return bytesToHex(keyed.clone().update(ascii.encode(h)).digest())
  })
}
