/** HTTP contract of a key's private claim metadata (ETag / If-Match). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AttestationPath, ExtraData, Source } from "../Attestations/Api.js"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import {
  NotFoundEnvelope,
  PreconditionFailedEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"

export const Metadata = Schema.Struct({
  attestation_id: Schema.String,
  claim_id: Schema.Int,
  source: Schema.NullOr(Schema.String),
  extra_data: Schema.NullOr(Schema.Unknown),
  client_encrypted: Schema.Boolean,
  etag: Schema.String,
  updated_at: Schema.String
}).annotations({ identifier: "ClaimMetadata" })

export const MetadataPatch = Schema.Struct({
  source: Schema.optional(Schema.NullOr(Source)),
  extra_data: Schema.optional(Schema.NullOr(ExtraData)),
  client_encrypted: Schema.optional(Schema.Boolean)
}).annotations({ identifier: "ClaimMetadataPatch" })

export const IfMatchHeaders = Schema.Struct({
  "if-match": Schema.optional(Schema.String).annotations({ description: "The claim's etag, quoted or bare; * matches any" })
})

export class ClaimsApi extends HttpApiGroup.make("claims")
  .add(
    HttpApiEndpoint.get("getMetadata", "/attestation/:id/metadata")
      .setPath(AttestationPath)
      .addSuccess(Metadata)
      .annotate(OpenApi.Summary, "Read the caller's claim (scope metadata:read, or a share token listing the attestation)")
      .annotate(OpenApi.Override, requiredScopes("metadata:read"))
  )
  .add(
    HttpApiEndpoint.patch("patchMetadata", "/attestation/:id/metadata")
      .setPath(AttestationPath)
      .setHeaders(IfMatchHeaders)
      .setPayload(MetadataPatch)
      .addSuccess(Metadata)
      .addError(PreconditionFailedEnvelope)
      .annotate(OpenApi.Summary, "Update source / extra_data (scope metadata:write); If-Match guards concurrent updates (412)")
      .annotate(OpenApi.Override, requiredScopes("metadata:write"))
  )
  .add(
    HttpApiEndpoint.del("deleteMetadata", "/attestation/:id/metadata")
      .setPath(AttestationPath)
      .addSuccess(Schema.Struct({ deleted: Schema.Literal(true) }))
      .annotate(OpenApi.Summary, "Soft-delete the caller's claim (scope metadata:write)")
      .annotate(OpenApi.Override, requiredScopes("metadata:write"))
  )
  .addError(ValidationErrorEnvelope)
  .addError(NotFoundEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Claim metadata")
{}
