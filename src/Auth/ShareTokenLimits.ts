/** Share-token limits the contract states (portable: the Api and clients import them). */
export const SHARE_TOKEN_PATTERN = /^shr_[A-Za-z0-9_-]{32}$/
export const SHARE_TOKEN_RATE_LIMIT = 100
export const SHARE_TOKEN_MAX_IDS = 100
export const SHARE_TOKEN_MAX_EXPIRES_IN = 30 * 24 * 3600
