/** Share tokens: `shr_` + 32 Base64URL characters, shown once, stored as SHA-256. */
import { randomBytes } from "node:crypto"

export const SHARE_TOKEN_PATTERN = /^shr_[A-Za-z0-9_-]{32}$/
export const SHARE_TOKEN_RATE_LIMIT = 100
export const SHARE_TOKEN_MAX_IDS = 100
export const SHARE_TOKEN_MAX_EXPIRES_IN = 30 * 24 * 3600

export const newShareTokenSecret = (): string => `shr_${randomBytes(24).toString("base64url")}`
export const newShareTokenId = (): string => `st_${randomBytes(12).toString("base64url")}`
