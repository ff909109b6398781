/** API keys and their scopes (spec §5). Keys are stored only as SHA-256 hashes. */
import { Schema } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

export const SCOPES = [
  "attest",
  "batch",
  "metadata:read",
  "metadata:write",
  "tags:read",
  "tags:write",
  "share",
  "scan",
  "census",
  "webhook",
  "timestamp"
] as const
export type Scope = (typeof SCOPES)[number]
export const Scope = Schema.Literal(...SCOPES)

export const isScope = (s: string): s is Scope => (SCOPES as ReadonlyArray<string>).includes(s)

/** Scopes a granted scope implies: write ⊇ read. */
const IMPLIED: Partial<Record<Scope, ReadonlyArray<Scope>>> = {
  "metadata:write": ["metadata:read"],
  "tags:write": ["tags:read"]
}

export interface ApiKey {
  readonly id: string
  readonly label: string
  /** null: a key from before scopes existed, holding all of them. */
  readonly scopes: ReadonlyArray<Scope> | null
  readonly orgId: string | null
  readonly env: "test" | "production" | null
  readonly allowIps: ReadonlyArray<string> | null
  readonly rateLimit: number | null
  readonly monthlyQuota: number | null
  readonly createdAt: string
  readonly revokedAt: string | null
  readonly keyHash: string
}

export const hasScope = (key: Pick<ApiKey, "scopes">, scope: Scope): boolean =>
  key.scopes === null ||
  key.scopes.some((s) => s === scope || (IMPLIED[s]?.includes(scope) ?? false))

export const hashSecret = (secret: string): string => createHash("sha256").update(secret, "utf8").digest("hex")

/** Constant-time comparison of two hex digests of equal length. */
export const digestsEqual = (a: string, b: string): boolean => {
  const x = Buffer.from(a, "hex")
  const y = Buffer.from(b, "hex")
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y)
}

export const API_KEY_PATTERN = /^atk_(live|test)_[A-Za-z0-9_-]{32}$/

export const newApiKeySecret = (env: "test" | "production" | null): string =>
  `${env === "test" ? "atk_test_" : "atk_live_"}${randomBytes(24).toString("base64url")}`

export const newKeyId = (): string => `key_${randomBytes(12).toString("base64url")}`
