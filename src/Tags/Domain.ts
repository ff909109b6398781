/** Structured tags on a key's claim (spec 2.11). */
import { Schema } from "effect"

export const TAG_KEY_PATTERN = /^[a-z][a-z0-9_-]{0,62}$/
export const TAGS_PER_CLAIM_MAX = 50
export const TAG_VALUE_MAX = 1024
export const TAG_QUERY_CONDITIONS_MAX = 10
export const TAG_QUERY_LIMIT_DEFAULT = 100
export const TAG_QUERY_LIMIT_MAX = 1000

export const TagKey = Schema.String.pipe(
  Schema.filter((k) =>
    k.startsWith("_")
      ? "tag keys starting with _ are reserved"
      : TAG_KEY_PATTERN.test(k) || `tag key must match ${TAG_KEY_PATTERN.source}`
  )
).annotations({ identifier: "TagKey", description: "Pattern ^[a-z][a-z0-9_-]{0,62}$; keys starting with _ are reserved" })

const Hex = (what: string, min: number, max: number) =>
  Schema.String.pipe(
    Schema.filter((s) =>
      (s.length >= min && s.length <= max && s.length % 2 === 0 && /^[0-9a-f]*$/.test(s)) ||
      `${what} must be lowercase hex, ${min}–${max} characters`
    )
  )

export const PlainTag = Schema.Struct({
  key: TagKey,
  value: Schema.String.pipe(Schema.maxLength(TAG_VALUE_MAX, { message: () => `tag values are at most ${TAG_VALUE_MAX} characters` }))
}).annotations({ identifier: "PlainTag" })

export const EncryptedTag = Schema.Struct({
  key: TagKey,
  value_enc: Hex("value_enc", 2, 4096),
  value_nonce: Hex("value_nonce", 16, 64)
}).annotations({
  identifier: "EncryptedTag",
  description: "Client-encrypted value (e.g. AES-256-GCM ciphertext and nonce, hex); never matched by queries"
})

export const Tag = Schema.Union(PlainTag, EncryptedTag)
export type Tag = typeof Tag.Type
