/** HTTP contract of share tokens: read-only, per-attestation access to a key's claim metadata and tags. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import {
  NotFoundEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { SHARE_TOKEN_MAX_EXPIRES_IN, SHARE_TOKEN_MAX_IDS } from "../Auth/ShareTokenLimits.js"

export const ShareTokenCreate = Schema.Struct({
  attestation_ids: Schema.Array(Schema.String).pipe(
    Schema.minItems(1),
    Schema.maxItems(SHARE_TOKEN_MAX_IDS, { message: () => `at most ${SHARE_TOKEN_MAX_IDS} attestation ids per token` })
  ),
  expires_in: Schema.Int.pipe(
    Schema.between(1, SHARE_TOKEN_MAX_EXPIRES_IN, { message: () => `expires_in must be 1..${SHARE_TOKEN_MAX_EXPIRES_IN} seconds (30 days)` })
  ),
  recipient_label: Schema.optional(Schema.NullOr(Schema.String.pipe(Schema.maxLength(200)))),
  max_uses: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.positive())))
}).annotations({ identifier: "ShareTokenCreate" })

export const ShareTokenCreated = Schema.Struct({
  id: Schema.String,
  share_token: Schema.String.annotations({ description: "shr_… plaintext, shown once; stored only as SHA-256" }),
  expires_at: Schema.String,
  attestation_ids: Schema.Array(Schema.String),
  recipient_label: Schema.NullOr(Schema.String),
  max_uses: Schema.NullOr(Schema.Int)
}).annotations({ identifier: "ShareTokenCreated" })

export const ShareTokenInfo = Schema.Struct({
  id: Schema.String,
  attestation_ids: Schema.Array(Schema.String),
  recipient_label: Schema.NullOr(Schema.String),
  expires_at: Schema.String,
  max_uses: Schema.NullOr(Schema.Int),
  uses: Schema.Int,
  created_at: Schema.String,
  revoked_at: Schema.NullOr(Schema.String),
  status: Schema.Literal("active", "expired", "revoked", "exhausted")
}).annotations({ identifier: "ShareTokenInfo" })

export const AccessLog = Schema.Struct({
  access_log: Schema.Array(Schema.Struct({
    at: Schema.String,
    client_ip: Schema.String,
    attestation_id: Schema.String,
    path: Schema.String
  }))
}).annotations({ identifier: "ShareTokenAccessLog" })

const TokenPath = Schema.Struct({ token_id: Schema.String })

export class ShareTokensApi extends HttpApiGroup.make("shareTokens")
  .add(
    HttpApiEndpoint.post("create", "/share-tokens")
      .setPayload(ShareTokenCreate)
      .addSuccess(ShareTokenCreated, { status: 201 })
      .annotate(OpenApi.Summary, "Create a share token for attestations the caller holds claims on (scope share)")
      .annotate(OpenApi.Override, requiredScopes("share"))
  )
  .add(
    HttpApiEndpoint.get("list", "/share-tokens")
      .addSuccess(Schema.Struct({ share_tokens: Schema.Array(ShareTokenInfo) }))
      .annotate(OpenApi.Summary, "The caller's share tokens (scope share)")
      .annotate(OpenApi.Override, requiredScopes("share"))
  )
  .add(
    HttpApiEndpoint.get("get", "/share-tokens/:token_id")
      .setPath(TokenPath)
      .addSuccess(ShareTokenInfo)
      .annotate(OpenApi.Summary, "One share token's info (scope share)")
      .annotate(OpenApi.Override, requiredScopes("share"))
  )
  .add(
    HttpApiEndpoint.del("revoke", "/share-tokens/:token_id")
      .setPath(TokenPath)
      .addSuccess(Schema.Struct({ id: Schema.String, revoked: Schema.Literal(true) }))
      .annotate(OpenApi.Summary, "Revoke a share token (scope share)")
      .annotate(OpenApi.Override, requiredScopes("share"))
  )
  .add(
    HttpApiEndpoint.get("accessLog", "/share-tokens/:token_id/access-log")
      .setPath(TokenPath)
      .addSuccess(AccessLog)
      .annotate(OpenApi.Summary, "Every use of the token with the client address (scope share; owner only)")
      .annotate(OpenApi.Override, requiredScopes("share"))
  )
  .addError(ValidationErrorEnvelope)
  .addError(NotFoundEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Share tokens")
{}
