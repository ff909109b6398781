/**
 * Per-request facts gathered at the edge (request id, client address) and the
 * rate-limit verdict that the edge writes back as X-RateLimit-* headers.
 */
import { Context, Effect, Option } from "effect"
import type { Principal } from "./Api.js"
import type { RateLimitInfo } from "../Domain/Errors.js"

export interface RequestMetaShape {
  readonly requestId: string
  readonly clientIp: string
  readonly path: string
  /** The route template the access log and metrics count the request under (Server/Routes.ts routeTemplate). */
  route?: string | undefined
  rateLimit: RateLimitInfo | undefined
  /** The id (never the secret) of the API key that authenticated, for the access log. */
  keyId?: string | undefined
  /** Set when the edge authenticated the request before reading its body; the bearer middleware reuses it. */
  principal?: Principal | undefined
  /** Set once the request was counted against the public limit of its address (it is counted once). */
  publicCharged?: boolean | undefined
}

export class RequestMeta extends Context.Tag("Auth/RequestMeta")<RequestMeta, RequestMetaShape>() {}

const fallback: RequestMetaShape = { requestId: "-", clientIp: "", path: "", rateLimit: undefined }

/** The current request's meta, or an inert one outside a request (tests calling handlers directly). */
export const currentRequestMeta = Effect.map(Effect.serviceOption(RequestMeta), Option.getOrElse(() => fallback))
