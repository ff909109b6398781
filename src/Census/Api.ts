/** HTTP contract of organisation inventory (scan, stats) and HMAC-derived lists. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import {
  AuthErrorEnvelope,
  NotFoundEnvelope,
  RateLimitedEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { TagQuery } from "../Tags/Api.js"
import { DERIVED_LIST_MAX_ITEMS, DERIVED_LIST_MAX_TTL_HOURS, MATCH_MAX_VALUES } from "./Limits.js"

export const ScanRequest = Schema.Struct({
  hashes: Schema.Array(HashHex).pipe(Schema.minItems(1))
}).annotations({ identifier: "ScanRequest", description: "At most ATTESTD_SCAN_MAX_HASHES (default 50,000) hashes" })

export const ScanResult = Schema.Struct({
  scan_id: Schema.String,
  matched: Schema.Int,
  total_scanned: Schema.Int,
  match_rate: Schema.Number.annotations({ description: "matched / total_scanned, 0 to 1" }),
  matches: Schema.Array(Schema.Struct({ hash_hex: HashHex, first_seen: Schema.String, source: Schema.NullOr(Schema.String) }))
}).annotations({ identifier: "ScanResult" })

export const InventoryStats = Schema.Struct({
  org_id_hash: Schema.String.annotations({ description: "lowercase hex SHA-256 of the org id" }),
  total_claims: Schema.Int,
  unique_hashes: Schema.Int,
  first_claim: Schema.NullOr(Schema.String),
  last_claim: Schema.NullOr(Schema.String),
  claims_by_month: Schema.Record({ key: Schema.String, value: Schema.Int })
}).annotations({ identifier: "InventoryStats" })

export const DerivedListCreate = Schema.Struct({
  hashes: Schema.optional(Schema.Array(HashHex).pipe(
    Schema.minItems(1),
    Schema.maxItems(DERIVED_LIST_MAX_ITEMS, { message: () => `at most ${DERIVED_LIST_MAX_ITEMS} items` })
  )),
  tag_filter: Schema.optional(TagQuery.fields.filter),
  label: Schema.optional(Schema.NullOr(Schema.String.pipe(Schema.maxLength(200)))),
  expires_in_hours: Schema.Int.pipe(Schema.between(1, DERIVED_LIST_MAX_TTL_HOURS, {
    message: () => `expires_in_hours must be 1..${DERIVED_LIST_MAX_TTL_HOURS}`
  }))
}).annotations({ identifier: "DerivedListCreate", description: "Exactly one of hashes or tag_filter" })

export const DerivedListCreated = Schema.Struct({
  id: Schema.String,
  list_key: Schema.String.annotations({ description: "64 hex, shown once; stored only as SHA-256" }),
  item_count: Schema.Int,
  expires_at: Schema.String,
  label: Schema.NullOr(Schema.String)
}).annotations({ identifier: "DerivedListCreated" })

export const DerivedListInfo = Schema.Struct({
  id: Schema.String,
  label: Schema.NullOr(Schema.String),
  item_count: Schema.Int,
  created_at: Schema.String,
  expires_at: Schema.String,
  revoked_at: Schema.NullOr(Schema.String),
  status: Schema.Literal("active", "expired", "revoked"),
  signing_key_id: Schema.String
}).annotations({ identifier: "DerivedListInfo" })

export const DerivedListAccessLog = Schema.Struct({
  access_log: Schema.Array(Schema.Struct({
    at: Schema.String,
    client_ip: Schema.String,
    outcome: Schema.String,
    matched: Schema.NullOr(Schema.Int),
    total: Schema.NullOr(Schema.Int)
  }))
}).annotations({ identifier: "DerivedListAccessLog" })

const ListPath = Schema.Struct({ list_id: Schema.String })

export class CensusApi extends HttpApiGroup.make("census")
  .add(
    HttpApiEndpoint.post("scan", "/scan")
      .setPayload(ScanRequest)
      .addSuccess(ScanResult)
      .annotate(OpenApi.Summary, "Compare suspect hashes with the organisation's inventory (scope scan, key with org_id; 5 per hour)")
      .annotate(OpenApi.Override, requiredScopes("scan"))
  )
  .add(
    HttpApiEndpoint.get("inventoryStats", "/inventory/stats")
      .addSuccess(InventoryStats)
      .annotate(OpenApi.Summary, "Inventory statistics of the organisation (scope batch, key with org_id)")
      .annotate(OpenApi.Override, requiredScopes("batch"))
  )
  .add(
    HttpApiEndpoint.post("createList", "/derived-lists")
      .setPayload(DerivedListCreate)
      .addSuccess(DerivedListCreated, { status: 201 })
      .annotate(OpenApi.Summary, "Create an HMAC-derived list for third-party matching (scope census, key with org_id)")
      .annotate(OpenApi.Override, requiredScopes("census"))
  )
  .add(
    HttpApiEndpoint.get("lists", "/derived-lists")
      .addSuccess(Schema.Struct({ derived_lists: Schema.Array(DerivedListInfo) }))
      .annotate(OpenApi.Summary, "The organisation's derived lists (scope census)")
      .annotate(OpenApi.Override, requiredScopes("census"))
  )
  .add(
    HttpApiEndpoint.get("getList", "/derived-lists/:list_id")
      .setPath(ListPath)
      .addSuccess(DerivedListInfo)
      .annotate(OpenApi.Summary, "One derived list, without its key or values (scope census)")
      .annotate(OpenApi.Override, requiredScopes("census"))
  )
  .add(
    HttpApiEndpoint.get("listAccessLog", "/derived-lists/:list_id/access-log")
      .setPath(ListPath)
      .addSuccess(DerivedListAccessLog)
      .annotate(OpenApi.Summary, "Every match attempt with the client address and outcome (scope census)")
      .annotate(OpenApi.Override, requiredScopes("census"))
  )
  .add(
    HttpApiEndpoint.del("revokeList", "/derived-lists/:list_id")
      .setPath(ListPath)
      .addSuccess(Schema.Struct({ id: Schema.String, revoked: Schema.Literal(true) }))
      .annotate(OpenApi.Summary, "Revoke a derived list (scope census)")
      .annotate(OpenApi.Override, requiredScopes("census"))
  )
  .addError(ValidationErrorEnvelope)
  .addError(NotFoundEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Organisations")
{}

// Public and up to ~3.8 MB: every part names its rule itself, so a refused body
// is never formatted back into a message (Effect's default ends with the value).
export const MatchRequest = Schema.Struct({
  list_key: Schema.String.annotations({ message: () => "must be a string" }),
  values: Schema.Array(HashHex.annotations({ description: "derived value: 64 lowercase hex" })).annotations({
    message: () => "must be an array of derived values"
  }).pipe(
    Schema.minItems(1),
    Schema.maxItems(MATCH_MAX_VALUES, { message: () => `at most ${MATCH_MAX_VALUES} values per match` })
  )
}).annotations({ identifier: "DerivedListMatch", message: () => "the body must be an object {list_key, values}" })

export const ListSignature = Schema.Struct({
  list_id: Schema.String,
  signing_key_id: Schema.String,
  signature: Schema.String,
  signed_payload_sha256: Schema.String.annotations({ description: "SHA-256 of the sorted derived values joined by \\n" })
}).annotations({ identifier: "DerivedListSignature" })

export class DerivedListsPublicApi extends HttpApiGroup.make("derivedListsPublic")
  .add(
    HttpApiEndpoint.post("match", "/derived-lists/:list_id/match")
      .setPath(ListPath)
      .setPayload(MatchRequest)
      .addSuccess(Schema.Struct({ matched: Schema.Int, total: Schema.Int }))
      .annotate(OpenApi.Summary, "Count how many of your derived values are on the list (public; needs list_key; 20 per hour per list)")
  )
  .add(
    HttpApiEndpoint.get("signature", "/derived-lists/:list_id/signature")
      .setPath(ListPath)
      .addSuccess(ListSignature)
      .annotate(OpenApi.Summary, "ECDSA P-256 signature over the list's sorted derived values (public)")
  )
  .addError(ValidationErrorEnvelope)
  .addError(AuthErrorEnvelope)
  .addError(NotFoundEnvelope)
  .addError(RateLimitedEnvelope)
  .annotate(OpenApi.Title, "Derived lists (public)")
{}
