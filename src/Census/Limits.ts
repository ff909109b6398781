/** Inventory and derived-list limits the contract states (portable: the Api and clients import them). */
export const SCANS_PER_HOUR = 5
export const DERIVED_LIST_MAX_ITEMS = 100_000
export const DERIVED_LIST_MAX_TTL_HOURS = 2160
export const MATCH_MAX_VALUES = 50_000
export const MATCHES_PER_HOUR = 20
