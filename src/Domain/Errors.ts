/**
 * The service's error vocabulary. Each error carries its HTTP status and its
 * envelope code; the edge (Http/Envelope.ts) turns any of them into
 * `{error: true, code, message, details}`.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

const fields = {
  message: Schema.String,
  details: Schema.optional(Schema.Unknown)
}

export class ValidationError extends Schema.TaggedError<ValidationError>()(
  "ValidationError",
  fields,
  HttpApiSchema.annotations({ status: 400 })
) {
  static readonly code = "VALIDATION_ERROR"
  static readonly status = 400
}

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()(
  "PayloadTooLarge",
  fields,
  HttpApiSchema.annotations({ status: 413 })
) {
  static readonly code = "VALIDATION_ERROR"
  static readonly status = 413
}

export class AuthError extends Schema.TaggedError<AuthError>()(
  "AuthError",
  fields,
  HttpApiSchema.annotations({ status: 401 })
) {
  static readonly code = "AUTH_ERROR"
  static readonly status = 401
}

export class Forbidden extends Schema.TaggedError<Forbidden>()(
  "Forbidden",
  fields,
  HttpApiSchema.annotations({ status: 403 })
) {
  static readonly code = "FORBIDDEN"
  static readonly status = 403
}

export class NotFound extends Schema.TaggedError<NotFound>()(
  "NotFound",
  fields,
  HttpApiSchema.annotations({ status: 404 })
) {
  static readonly code = "NOT_FOUND"
  static readonly status = 404
}

export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()(
  "MethodNotAllowed",
  fields,
  HttpApiSchema.annotations({ status: 405 })
) {
  static readonly code = "METHOD_NOT_ALLOWED"
  static readonly status = 405
}

export class PreconditionFailed extends Schema.TaggedError<PreconditionFailed>()(
  "PreconditionFailed",
  fields,
  HttpApiSchema.annotations({ status: 412 })
) {
  static readonly code = "PRECONDITION_FAILED"
  static readonly status = 412
}

/** Rate-limit state reported on every authenticated response and on a 429. */
export const RateLimitInfo = Schema.Struct({
  limit: Schema.Number,
  remaining: Schema.Number,
  reset: Schema.Number,
  retryAfter: Schema.Number
})
export type RateLimitInfo = typeof RateLimitInfo.Type

export class RateLimited extends Schema.TaggedError<RateLimited>()(
  "RateLimited",
  { ...fields, rateLimit: RateLimitInfo },
  HttpApiSchema.annotations({ status: 429 })
) {
  static readonly code = "RATE_LIMIT"
  static readonly status = 429
}

export class QuotaExceeded extends Schema.TaggedError<QuotaExceeded>()(
  "QuotaExceeded",
  { ...fields, retryAfter: Schema.Number },
  HttpApiSchema.annotations({ status: 429 })
) {
  static readonly code = "QUOTA_EXCEEDED"
  static readonly status = 429
}

export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()(
  "ServiceUnavailable",
  fields,
  HttpApiSchema.annotations({ status: 503 })
) {
  static readonly code = "SERVICE_UNAVAILABLE"
  static readonly status = 503
}

export class InternalError extends Schema.TaggedError<InternalError>()(
  "InternalError",
  fields,
  HttpApiSchema.annotations({ status: 500 })
) {
  static readonly code = "INTERNAL_ERROR"
  static readonly status = 500
}

export const apiErrorClasses = [
  ValidationError,
  PayloadTooLarge,
  AuthError,
  Forbidden,
  NotFound,
  MethodNotAllowed,
  PreconditionFailed,
  RateLimited,
  QuotaExceeded,
  ServiceUnavailable,
  InternalError
] as const

export type ApiError = InstanceType<(typeof apiErrorClasses)[number]>

const byTag = new Map<string, { readonly code: string; readonly status: number }>(
  apiErrorClasses.map((cls) => [cls._tag, { code: cls.code, status: cls.status }])
)

export const isApiError = (u: unknown): u is ApiError =>
  typeof u === "object" && u !== null && "_tag" in u && byTag.has((u as { _tag: string })._tag)

export const describeApiError = (e: ApiError): { readonly code: string; readonly status: number } =>
  byTag.get(e._tag)!

/**
 * A short excerpt of caller input for an error message: at most `max` code
 * points, marked when cut. Errors name the path and the rule; they never echo
 * a whole value (a 7 MB body must not come back twice).
 */
export const excerpt = (text: string, max = 48): string => {
  if (text.length <= max) return text
  const points = Array.from(text.slice(0, max * 2))
  return points.length <= max ? points.join("") : points.slice(0, max).join("") + "…"
}
