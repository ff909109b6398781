/** HTTP contract of listing the calling key's own attestations: its live claims, newest first, cursor-paginated. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import { ValidationErrorEnvelope } from "../Http/Envelope.js"
import { Level } from "./Domain.js"

export const LIST_LIMIT_DEFAULT = 100
export const LIST_LIMIT_MAX = 1000

export const ListParams = Schema.Struct({
  limit: Schema.optional(Schema.String.annotations({ description: `Items per page, 1–${LIST_LIMIT_MAX} (default ${LIST_LIMIT_DEFAULT})` })),
  cursor: Schema.optional(Schema.String.annotations({ description: "next_cursor of the previous page (opaque)" })),
  level: Schema.optional(Level.annotations({ description: "Only attestations at this level" })),
  from: Schema.optional(Schema.String.annotations({ description: "Only attestations whose timestamp is at or after this instant (ISO 8601 with a time zone)" })),
  to: Schema.optional(Schema.String.annotations({ description: "Only attestations whose timestamp is before this instant (ISO 8601 with a time zone)" }))
}).annotations({ identifier: "AttestationListParams" })

export const AttestationListItem = Schema.Struct({
  id: Schema.String,
  hash_hex: HashHex,
  level: Level,
  timestamp: Schema.String.annotations({ description: "registered_at: ISO 8601, microseconds, +00:00" }),
  source: Schema.NullOr(Schema.String)
}).annotations({ identifier: "AttestationListItem" })

export const AttestationList = Schema.Struct({
  attestations: Schema.Array(AttestationListItem),
  next_cursor: Schema.NullOr(Schema.String).annotations({ description: "null on the last page" })
}).annotations({ identifier: "AttestationList" })

export class AttestationListApi extends HttpApiGroup.make("attestationList")
  .add(
    HttpApiEndpoint.get("list", "/attestations")
      .setUrlParams(ListParams)
      .addSuccess(AttestationList)
      .annotate(
        OpenApi.Summary,
        "The calling key's own live claims, newest first (by timestamp), cursor-paginated; filters: level, from ≤ timestamp < to (scope metadata:read)"
      )
      .annotate(OpenApi.Override, requiredScopes("metadata:read"))
  )
  .addError(ValidationErrorEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Attestation list")
{}
