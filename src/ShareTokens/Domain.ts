/** Share tokens: `shr_` + 32 Base64URL characters, shown once, stored as SHA-256. */
import { randomBytes } from "node:crypto"

export * from "../Auth/ShareTokenLimits.js"

export const newShareTokenSecret = (): string => `shr_${randomBytes(24).toString("base64url")}`
export const newShareTokenId = (): string => `st_${randomBytes(12).toString("base64url")}`
