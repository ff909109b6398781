/**
 * The service's error vocabulary. Each error carries its HTTP status and its
 * envelope code; the edge (Http/Envelope.ts) turns any of them into
 * `{error: true, code, message, details}`.
 */
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"

const fields = {
  message: Schema.String,
  details: Schema.optional(Schema.Unknown)
}

/** Rate-limit state reported on every authenticated response and on a 429. */
export const RateLimitInfo = Schema.Struct({
  limit: Schema.Number,
  remaining: Schema.Number,
  reset: Schema.Number,
  retryAfter: Schema.Number
})
export type RateLimitInfo = typeof RateLimitInfo.Type

/**
 * The base class of an API error: a tagged error with `message`, optional
 * `details` and any extra fields, its envelope code and its HTTP status,
 * stated once (the static `status` and the HttpApi annotation come from it).
 */
const apiError = <Self>() =>
<Tag extends string, Code extends string, Status extends number, Extra extends Schema.Struct.Fields = {}>(
  tag: Tag,
  code: Code,
  status: Status,
  extra?: Extra
) => {
  // Self is generic here, so TaggedError's "missing Self" check cannot resolve; the class it returns is this.
  const Base = Schema.TaggedError<Self>()(
    tag,
    { ...fields, ...(extra ?? ({} as Extra)) },
    HttpApiSchema.annotations({ status })
  ) as unknown as Schema.TaggedErrorClass<Self, Tag, { readonly _tag: Schema.tag<Tag> } & typeof fields & Extra>
  return Object.assign(Base, { code, status } as { readonly code: Code; readonly status: Status })
}

export class ValidationError extends apiError<ValidationError>()("ValidationError", "VALIDATION_ERROR", 400) {}
export class PayloadTooLarge extends apiError<PayloadTooLarge>()("PayloadTooLarge", "VALIDATION_ERROR", 413) {}
export class UnsupportedMediaType extends apiError<UnsupportedMediaType>()("UnsupportedMediaType", "VALIDATION_ERROR", 415) {}
export class AuthError extends apiError<AuthError>()("AuthError", "AUTH_ERROR", 401) {}
export class Forbidden extends apiError<Forbidden>()("Forbidden", "FORBIDDEN", 403) {}
export class NotFound extends apiError<NotFound>()("NotFound", "NOT_FOUND", 404) {}
export class MethodNotAllowed extends apiError<MethodNotAllowed>()("MethodNotAllowed", "METHOD_NOT_ALLOWED", 405) {}
export class PreconditionFailed extends apiError<PreconditionFailed>()("PreconditionFailed", "PRECONDITION_FAILED", 412) {}
export class RateLimited extends apiError<RateLimited>()("RateLimited", "RATE_LIMIT", 429, { rateLimit: RateLimitInfo }) {}
export class QuotaExceeded extends apiError<QuotaExceeded>()("QuotaExceeded", "QUOTA_EXCEEDED", 429, { retryAfter: Schema.Number }) {}
export class ServiceUnavailable extends apiError<ServiceUnavailable>()("ServiceUnavailable", "SERVICE_UNAVAILABLE", 503) {}
export class InternalError extends apiError<InternalError>()("InternalError", "INTERNAL_ERROR", 500) {}

export const apiErrorClasses = [
  ValidationError,
  PayloadTooLarge,
  UnsupportedMediaType,
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

export interface ErrorDescription {
  readonly code: string
  readonly status: number
}

const byTag: ReadonlyMap<string, ErrorDescription> = new Map(
  apiErrorClasses.map((cls): [string, ErrorDescription] => [cls._tag, { code: cls.code, status: cls.status }])
)

export const isApiError = (u: unknown): u is ApiError =>
  typeof u === "object" && u !== null && "_tag" in u && byTag.has((u as { _tag: string })._tag)

export const describeApiError = (e: ApiError): ErrorDescription =>
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
