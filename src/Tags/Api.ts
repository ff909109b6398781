/** HTTP contract of tags on a key's claim and the AND query over them. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AttestationPath } from "../Attestations/Api.js"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import {
  NotFoundEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { Tag, TAG_QUERY_CONDITIONS_MAX, TAG_QUERY_LIMIT_MAX, TAGS_PER_CLAIM_MAX } from "./Domain.js"

export const TagList = Schema.Struct({ tags: Schema.Array(Tag) }).annotations({ identifier: "TagList" })

export const TagsPut = Schema.Struct({
  tags: Schema.Array(Tag).pipe(Schema.minItems(1), Schema.maxItems(TAGS_PER_CLAIM_MAX))
}).annotations({ identifier: "TagsPut" })

export const TagQuery = Schema.Struct({
  filter: Schema.Struct({
    and: Schema.Array(Schema.Struct({ key: Schema.String, value: Schema.String })).pipe(
      Schema.minItems(1),
      Schema.maxItems(TAG_QUERY_CONDITIONS_MAX, { message: () => `at most ${TAG_QUERY_CONDITIONS_MAX} conditions` })
    )
  }),
  limit: Schema.optional(Schema.Int.pipe(Schema.between(1, TAG_QUERY_LIMIT_MAX))),
  cursor: Schema.optional(Schema.String)
}).annotations({ identifier: "TagQuery" })

export const TagQueryResult = Schema.Struct({
  attestations: Schema.Array(Schema.Struct({ id: Schema.String, hash_hex: HashHex, tags: Schema.Array(Tag) })),
  count: Schema.Int,
  next_cursor: Schema.NullOr(Schema.String)
}).annotations({ identifier: "TagQueryResult" })

export class TagsApi extends HttpApiGroup.make("tags")
  .add(
    HttpApiEndpoint.put("putTags", "/attestation/:id/tags")
      .setPath(AttestationPath)
      .setPayload(TagsPut)
      .addSuccess(TagList)
      .annotate(OpenApi.Summary, "Upsert tags on the caller's claim (scope tags:write; at most 50 per claim)")
      .annotate(OpenApi.Override, requiredScopes("tags:write"))
  )
  .add(
    HttpApiEndpoint.get("getTags", "/attestation/:id/tags")
      .setPath(AttestationPath)
      .addSuccess(TagList)
      .annotate(OpenApi.Summary, "Read the caller's tags (scope tags:read, or a share token listing the attestation)")
      .annotate(OpenApi.Override, requiredScopes("tags:read"))
  )
  .add(
    HttpApiEndpoint.del("deleteTag", "/attestation/:id/tags/:key")
      .setPath(Schema.Struct({ id: Schema.String, key: Schema.String }))
      .addSuccess(Schema.Struct({ deleted: Schema.Literal(true) }))
      .annotate(OpenApi.Summary, "Delete one tag by key (scope tags:write); 404 when absent")
      .annotate(OpenApi.Override, requiredScopes("tags:write"))
  )
  .add(
    HttpApiEndpoint.post("queryTags", "/tags/query")
      .setPayload(TagQuery)
      .addSuccess(TagQueryResult)
      .annotate(OpenApi.Summary, "Attestations whose caller-owned plaintext tags match every condition (scope tags:read)")
      .annotate(OpenApi.Override, requiredScopes("tags:read"))
  )
  .addError(ValidationErrorEnvelope)
  .addError(NotFoundEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Tags")
{}
