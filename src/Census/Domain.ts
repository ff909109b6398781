/** Organisation inventory and HMAC-derived lists (spec 2.13–2.14). */
import { createHash, createHmac, randomBytes } from "node:crypto"

export * from "./Limits.js"

export const newScanId = (): string => `scan_${randomBytes(12).toString("base64url")}`
export const newListId = (): string => `dl_${randomBytes(12).toString("base64url")}`
export const newListKey = (): string => randomBytes(32).toString("hex")

/** Lowercase hex HMAC-SHA256, keyed with the raw bytes of the hex list_key, over the ASCII hash_hex. */
export const derivedValue = (listKeyHex: string, hashHex: string): string =>
  createHmac("sha256", Buffer.from(listKeyHex, "hex")).update(hashHex, "ascii").digest("hex")

export const orgIdHash = (orgId: string): string => createHash("sha256").update(orgId, "utf8").digest("hex")

/** The payload the list signature covers: sorted derived values joined by \n. */
export const signedListPayload = (values: ReadonlyArray<string>): string => [...values].sort().join("\n")
