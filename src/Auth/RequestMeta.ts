/**
 * Per-request facts gathered as a request arrives (request id, client address,
 * route path) and the rate-limit verdict that the edge writes back as
 * X-RateLimit-* headers.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Option } from "effect"
import type { Principal } from "./Api.js"
import type { RateLimitInfo } from "../Domain/Errors.js"

export interface RequestMetaShape {
  readonly requestId: string
  readonly clientIp: string
  readonly path: string
  /** The request target as it arrived (with its /v1 prefix, when given). */
  readonly target: string
  /** The route template the access log and metrics count the request under (Server/Routes.ts routeTemplate). */
  route?: string | undefined
  rateLimit: RateLimitInfo | undefined
  /** The id (never the secret) of the API key that authenticated, for the access log. */
  keyId?: string | undefined
  /** Set when the edge authenticated the request before reading its body; the bearer middleware reuses it. */
  principal?: Principal | undefined
  /** Set once the request was counted against the public limit of its address (it is counted once). */
  publicCharged?: boolean | undefined
  /** The CORS headers its response carries (none without an Origin), decided by the edge. */
  cors?: Readonly<Record<string, string>> | undefined
}

/** The meta of a request that did not arrive through the server: a handler called directly (tests). */
const detached = (): RequestMetaShape => ({ requestId: "-", clientIp: "", path: "", target: "", rateLimit: undefined })

/**
 * The meta of each request in flight, by the request node received (the platform's
 * request keeps it as its `source`). The server's listener keeps it as the request
 * arrives (Server/Edge.ts arrival); the edge and the handlers read it, from the request
 * in their fiber's context, which costs no provide per request. An entry goes with its
 * request.
 */
export class RequestMetas extends Effect.Service<RequestMetas>()("Auth/RequestMetas", {
  sync: () => {
    const metas = new WeakMap<object, RequestMetaShape>()
    const of = (source: unknown): RequestMetaShape | undefined =>
      typeof source === "object" && source !== null ? metas.get(source) : undefined
    return {
      arrived: (source: object, meta: RequestMetaShape): void => {
        metas.set(source, meta)
      },
      of,
      /** The current request's meta, or a detached one outside a request. */
      current: Effect.map(
        Effect.serviceOption(HttpServerRequest.HttpServerRequest),
        (request): RequestMetaShape => (Option.isSome(request) ? of(request.value.source) : undefined) ?? detached()
      )
    }
  }
}) {}
