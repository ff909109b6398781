/**
 * The error envelope `{error: true, code, message, details}`: a schema per error
 * class (so the OpenAPI document and typed clients see the real shape), and the
 * one function that turns any failure into an envelope response.
 */
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Schema } from "effect"
import * as Errors from "../Domain/Errors.js"

interface ErrorClass<A> {
  new(props: any): A
  readonly code: string
  readonly status: number
  readonly _tag: string
}

/**
 * The envelope's body: the one place its shape is written. Error classes reach it
 * through `envelope` and `errorParts`; answers outside the HttpApi error vocabulary
 * (a request Node could not read, the health probe's 503, the unbuilt verifier page)
 * call it directly.
 */
export const envelopeBody = <C extends string>(code: C, message: string, details: unknown = null) =>
  ({ error: true as const, code, message, details })

export const envelope = <A extends { readonly message: string; readonly details?: unknown }>(cls: ErrorClass<A>) =>
  Schema.transform(
    Schema.Struct({
      error: Schema.Literal(true),
      code: Schema.Literal(cls.code),
      message: Schema.String,
      details: Schema.NullOr(Schema.Unknown)
    }),
    Schema.declare((u): u is A => u instanceof cls),
    {
      strict: false,
      decode: (e) => new cls({ message: e.message, details: e.details }),
      encode: (err: A) => envelopeBody(cls.code, err.message, err.details ?? null)
    }
  ).annotations({
    ...HttpApiSchema.annotations({ status: cls.status }),
    identifier: `${cls._tag}Envelope`,
    description: `Error envelope with code ${cls.code}`
  })

export const ValidationErrorEnvelope = envelope(Errors.ValidationError)
export const PayloadTooLargeEnvelope = envelope(Errors.PayloadTooLarge)
export const UnsupportedMediaTypeEnvelope = envelope(Errors.UnsupportedMediaType)
export const AuthErrorEnvelope = envelope(Errors.AuthError)
export const ForbiddenEnvelope = envelope(Errors.Forbidden)
export const NotFoundEnvelope = envelope(Errors.NotFound)
export const PreconditionFailedEnvelope = envelope(Errors.PreconditionFailed)
export const RateLimitedEnvelope = envelope(Errors.RateLimited)
export const QuotaExceededEnvelope = envelope(Errors.QuotaExceeded)
export const ServiceUnavailableEnvelope = envelope(Errors.ServiceUnavailable)
export const InternalErrorEnvelope = envelope(Errors.InternalError)

export const rateLimitHeaders = (info: Errors.RateLimitInfo): Record<string, string> => ({
  "x-ratelimit-limit": String(info.limit),
  "x-ratelimit-remaining": String(info.remaining),
  "x-ratelimit-reset": String(info.reset)
})

/** Status, headers and body of the envelope for an API error. */
/** Seconds a client waits before retrying a 503 (a database restart or failover takes a few). */
export const SERVICE_UNAVAILABLE_RETRY_AFTER = 5

export const errorParts = (e: Errors.ApiError) => {
  const { code, status } = Errors.describeApiError(e)
  const headers: Record<string, string> = {}
  if (e._tag === "RateLimited") {
    Object.assign(headers, rateLimitHeaders(e.rateLimit))
    headers["retry-after"] = String(e.rateLimit.retryAfter)
  } else if (e._tag === "QuotaExceeded") {
    headers["retry-after"] = String(e.retryAfter)
  } else if (e._tag === "ServiceUnavailable") {
    headers["retry-after"] = String(SERVICE_UNAVAILABLE_RETRY_AFTER)
  } else if (e._tag === "PayloadTooLarge") {
    headers["connection"] = "close"
  } else if (e._tag === "MethodNotAllowed") {
    headers["allow"] = ((e.details as { allowed?: ReadonlyArray<string> } | undefined)?.allowed ?? []).join(", ")
  }
  return { status, headers, body: envelopeBody(code, e.message, e.details ?? null) }
}

/** The HTTP response for an API error. */
export const errorResponse = (e: Errors.ApiError): HttpServerResponse.HttpServerResponse => {
  const { body, headers, status } = errorParts(e)
  return HttpServerResponse.unsafeJson(body, { status, headers })
}
