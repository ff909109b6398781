/**
 * Cross-origin access for browser pages. Public routes (verify, lookup, evidence,
 * keys, info…) answer every origin with `Access-Control-Allow-Origin: *`, and their
 * preflight allows no Authorization header: a page of any site reads public data,
 * never with a key. Authenticated routes, and a key on any route, only for the
 * origins in ATTESTD_CORS_ORIGINS: their preflight allows Authorization and
 * If-Match and names the origin back. A preflight (OPTIONS) is always answered
 * 204; an origin it does not allow gets no Allow-Origin, so the browser stops.
 *
 * Two pieces. `corsHeaders`, given to HttpApiBuilder.serve outside the edge
 * (Server/Edge.ts), puts the headers on every response: those the HttpApi app
 * writes (a pre-response handler) and those the edge returns itself (its 401, 413,
 * 429 refusals). `PreflightLive`, an HttpApi-level middleware, answers OPTIONS
 * before the router would 404/405 it, so the 204 also gets the edge's request id.
 */
import { HttpApiBuilder, HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { stripV1 } from "./Paths.js"

export interface CorsPolicy {
  /** Exact origins (scheme://host[:port]) allowed on authenticated routes. */
  readonly origins: ReadonlyArray<string>
  /** Whether the route a method and path (without /v1 and query) reach needs a key. */
  readonly keyedRoute: (method: string, path: string) => boolean
}

const PUBLIC_METHODS = "GET, HEAD, POST"
const ALL_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE"
const PUBLIC_HEADERS = "content-type, x-request-id"
const TRUSTED_HEADERS = "authorization, content-type, if-match, x-request-id"
const EXPOSED = "x-request-id, etag, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset"
const MAX_AGE = "600"

const pathOf = (url: string): string => {
  const stripped = stripV1(url)
  const q = stripped.indexOf("?")
  return q < 0 ? stripped : stripped.slice(0, q)
}

/**
 * The CORS headers of a response to `method url` from `origin` (none without an Origin
 * header); `preflight`: the method the page asks for (Access-Control-Request-Method).
 */
export const corsHeadersFor = (
  policy: CorsPolicy,
  request: { readonly method: string; readonly url: string; readonly origin: string | undefined; readonly preflight?: string | undefined }
): Record<string, string> => {
  const { origin } = request
  if (origin === undefined) return {}
  const trusted = policy.origins.includes(origin)
  if (trusted) {
    return {
      "access-control-allow-origin": origin,
      vary: "Origin",
      ...(request.preflight !== undefined
        ? { "access-control-allow-methods": ALL_METHODS, "access-control-allow-headers": TRUSTED_HEADERS, "access-control-max-age": MAX_AGE }
        : { "access-control-expose-headers": EXPOSED })
    }
  }
  const method = request.preflight ?? request.method
  if (policy.keyedRoute(method.toUpperCase(), pathOf(request.url))) return { vary: "Origin" }
  return {
    "access-control-allow-origin": "*",
    vary: "Origin",
    ...(request.preflight !== undefined
      ? { "access-control-allow-methods": PUBLIC_METHODS, "access-control-allow-headers": PUBLIC_HEADERS, "access-control-max-age": MAX_AGE }
      : { "access-control-expose-headers": EXPOSED })
  }
}

/** Outside the edge: every response gets the headers its request calls for. */
export const corsHeaders = (policy: CorsPolicy) => <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const headers = corsHeadersFor(policy, {
      method: request.method,
      url: request.url,
      origin: request.headers["origin"],
      preflight: request.method === "OPTIONS" ? request.headers["access-control-request-method"] : undefined
    })
    if (Object.keys(headers).length === 0) return app
    const add = (response: HttpServerResponse.HttpServerResponse) => HttpServerResponse.setHeaders(response, headers)
    // A response the HttpApi app writes passes the pre-response handlers; one the edge returns
    // itself is written after this middleware, so it is given the headers here.
    return Effect.map(Effect.zipRight(HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(add(response))), app), add)
  })

/** Inside the HttpApi app, before the router: OPTIONS is answered 204 (its CORS headers come from corsHeaders). */
export const PreflightLive = HttpApiBuilder.middleware((app) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    request.method === "OPTIONS" ? Effect.succeed(HttpServerResponse.empty({ status: 204 })) : app))
