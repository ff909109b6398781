/** A SHA-256 digest as 64 lowercase hex characters: the only thing the service ever sees of a document. */
import { Brand, Schema } from "effect"

export const HASH_HEX_PATTERN = /^[0-9a-f]{64}$/

const Branded = Schema.String.pipe(
  // override: a value that is not even a string gets this message too, so
  // Effect never formats (and the caller never gets back) the refused value.
  Schema.pattern(HASH_HEX_PATTERN, {
    message: () => ({ message: "must be exactly 64 lowercase hex characters (a SHA-256 digest)", override: true })
  }),
  Schema.brand("HashHex")
)
export type HashHex = typeof Branded.Type

export const isHashHex = (s: unknown): s is HashHex => typeof s === "string" && HASH_HEX_PATTERN.test(s)

/**
 * A digest the service computed itself (a Merkle node, a block hash), as HashHex:
 * one pattern test, no parser; throws on anything else, which would be a bug.
 */
export const makeHashHex = Brand.refined<HashHex>(
  (s) => HASH_HEX_PATTERN.test(s),
  () => Brand.error("not 64 lowercase hex characters (a SHA-256 digest)")
)

export const HashHex = Branded.annotations({
  identifier: "HashHex",
  description: "SHA-256 digest, 64 lowercase hex characters",
  examples: [makeHashHex("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")]
})
