/** HTTP contract of signed webhooks for T1/T2 upgrades. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import {
  NotFoundEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { WEBHOOK_EVENTS, WEBHOOK_LABEL_MAX } from "./Limits.js"

export const WebhookRegister = Schema.Struct({
  url: Schema.String.pipe(Schema.maxLength(2048)),
  events: Schema.Array(Schema.Literal(...WEBHOOK_EVENTS)).pipe(Schema.minItems(1)),
  label: Schema.optional(Schema.NullOr(Schema.String.pipe(
    Schema.maxLength(WEBHOOK_LABEL_MAX, { message: () => `label must be at most ${WEBHOOK_LABEL_MAX} characters` })
  )))
}).annotations({ identifier: "WebhookRegister" })

export const WebhookRegistered = Schema.Struct({
  id: Schema.String,
  url: Schema.String,
  events: Schema.Array(Schema.String),
  label: Schema.NullOr(Schema.String),
  signing_secret: Schema.String.annotations({ description: "64 hex characters, returned only here; HMAC key = its ASCII bytes" })
}).annotations({ identifier: "WebhookRegistered" })

export const WebhookItem = Schema.Struct({
  id: Schema.String,
  url: Schema.String,
  label: Schema.NullOr(Schema.String),
  events: Schema.Array(Schema.String),
  failure_count: Schema.Int,
  created_at: Schema.String
}).annotations({ identifier: "Webhook" })

export const DeliveryItem = Schema.Struct({
  id: Schema.Int,
  event_type: Schema.String,
  status: Schema.Literal("pending", "succeeded", "retrying", "failed"),
  response_code: Schema.NullOr(Schema.Int),
  attempts: Schema.Int,
  created_at: Schema.String,
  last_attempt_at: Schema.NullOr(Schema.String),
  next_attempt_at: Schema.NullOr(Schema.String)
}).annotations({ identifier: "WebhookDelivery" })

const WebhookPath = Schema.Struct({ webhook_id: Schema.String })

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.post("register", "/webhook/register")
      .setPayload(WebhookRegister)
      .addSuccess(WebhookRegistered, { status: 201 })
      .annotate(OpenApi.Summary, "Register a webhook for t1_complete / t2_complete (scope webhook)")
      .annotate(
        OpenApi.Description,
        "Deliveries: POST JSON with X-Service-Event, X-Service-Delivery and X-Service-Signature: sha256=<HMAC-SHA256(raw body, signing_secret)>. Production requires https:// to a public address. A webhook hears about attestations on which the registering key holds a claim."
      )
      .annotate(OpenApi.Override, requiredScopes("webhook"))
  )
  .add(
    HttpApiEndpoint.get("list", "/webhooks")
      .addSuccess(Schema.Struct({ webhooks: Schema.Array(WebhookItem) }))
      .annotate(OpenApi.Summary, "The caller's webhooks (scope webhook)")
      .annotate(OpenApi.Override, requiredScopes("webhook"))
  )
  .add(
    HttpApiEndpoint.del("remove", "/webhook/:webhook_id")
      .setPath(WebhookPath)
      .addSuccess(Schema.Struct({ deleted: Schema.Literal(true) }))
      .annotate(OpenApi.Summary, "Delete a webhook (scope webhook); retries in flight keep its old secret")
      .annotate(OpenApi.Override, requiredScopes("webhook"))
  )
  .add(
    HttpApiEndpoint.get("deliveries", "/webhook/:webhook_id/deliveries")
      .setPath(WebhookPath)
      .addSuccess(Schema.Struct({ deliveries: Schema.Array(DeliveryItem) }))
      .annotate(OpenApi.Summary, "The last 100 deliveries, newest first (scope webhook)")
      .annotate(OpenApi.Override, requiredScopes("webhook"))
  )
  .addError(ValidationErrorEnvelope)
  .addError(NotFoundEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Webhooks")
{}
