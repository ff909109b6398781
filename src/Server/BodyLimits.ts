/**
 * The largest request body each operation reads (413 VALIDATION_ERROR above it),
 * by OpenAPI operationId. A route gets what its largest valid request needs,
 * not one limit for all: public verify needs a few hundred bytes, so a stranger
 * cannot make it parse megabytes. A digest in a JSON array takes 67 bytes
 * (64 hex, quotes, comma); 80 leaves room for pretty-printed indentation.
 */
import { BATCH_MAX } from "../Attestations/Domain.js"
import { DERIVED_LIST_MAX_ITEMS, MATCH_MAX_VALUES } from "../Census/Limits.js"

export const MAX_BODY_BYTES = 1024 * 1024

/** The largest time-stamp request, DER or JSON (CONTRACT §6). */
export const TIMESTAMP_REQUEST_MAX_BYTES = 64 * 1024

const BYTES_PER_HASH = 80
const ROOM = 16 * 1024

/** A body of `items` digests plus the other fields. */
export const hashListBytes = (items: number): number => items * BYTES_PER_HASH + ROOM

const FIXED: Readonly<Record<string, number>> = {
  // {hash_hex}
  "verification.verify": 8 * 1024,
  // at most 100 digests (spec 8), plus detailed
  "verification.verifyBatch": hashListBytes(BATCH_MAX),
  // at most 50,000 derived values (spec 8), plus list_key
  "derivedListsPublic.match": hashListBytes(MATCH_MAX_VALUES),
  // at most 100,000 digests (spec 8), plus label, expiry or a tag filter
  "census.createList": hashListBytes(DERIVED_LIST_MAX_ITEMS),
  // a TimeStampReq is ~100 bytes; CONTRACT §6 caps it at 64 KiB
  "timestamping.timestamp": TIMESTAMP_REQUEST_MAX_BYTES
}

/**
 * The body limit of an operation; `scanMaxHashes` is ATTESTD_SCAN_MAX_HASHES.
 * Everything else (attest and its batch with up to 16 KiB of extra_data,
 * metadata, tags, share tokens, webhooks) keeps the contract's 1 MiB.
 */
export const bodyLimitOf = (operationId: string | undefined, scanMaxHashes: number): number => {
  if (operationId === undefined) return MAX_BODY_BYTES
  if (operationId === "census.scan") return Math.max(MAX_BODY_BYTES, hashListBytes(scanMaxHashes))
  return FIXED[operationId] ?? MAX_BODY_BYTES
}
