/**
 * Cross-origin access for browser pages. Public routes (verify, lookup, evidence,
 * keys, info…) answer every origin with `Access-Control-Allow-Origin: *`, and their
 * preflight allows no Authorization header: a page of any site reads public data,
 * never with a key. Authenticated routes, and a key on any route, only for the
 * origins in ATTESTD_CORS_ORIGINS: their preflight allows Authorization and
 * If-Match and names the origin back. A preflight (OPTIONS) is always answered
 * 204; an origin it does not allow gets no Allow-Origin, so the browser stops.
 *
 * `corsHeadersFor` is the rule; the edge (Server/Edge.ts) applies it to every response,
 * those the HttpApi app writes and those it returns itself (its 401, 413, 429 refusals,
 * and the 204 of a preflight, answered before the router would 404/405 it), with the
 * route it has already matched.
 */

const PUBLIC_METHODS = "GET, HEAD, POST"
const ALL_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE"
const PUBLIC_HEADERS = "content-type, x-request-id"
const TRUSTED_HEADERS = "authorization, content-type, if-match, x-request-id"
const EXPOSED = "x-request-id, etag, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset"
const MAX_AGE = "600"

// The answers that do not name the origin back are the same for every request: built once.
const KEYED_STRANGER: Readonly<Record<string, string>> = { vary: "Origin" }
const PUBLIC_ACTUAL: Readonly<Record<string, string>> = {
  "access-control-allow-origin": "*",
  vary: "Origin",
  "access-control-expose-headers": EXPOSED
}
const PUBLIC_PREFLIGHT: Readonly<Record<string, string>> = {
  "access-control-allow-origin": "*",
  vary: "Origin",
  "access-control-allow-methods": PUBLIC_METHODS,
  "access-control-allow-headers": PUBLIC_HEADERS,
  "access-control-max-age": MAX_AGE
}

/**
 * The CORS headers of a response to a request from `origin`, none without an Origin
 * header. `origins`: those allowed on authenticated routes (ATTESTD_CORS_ORIGINS);
 * `preflight`: whether it is a preflight (OPTIONS with Access-Control-Request-Method);
 * `keyed`: whether the route it asks for (the preflight's method) needs a key.
 */
export const corsHeadersFor = (
  origins: ReadonlyArray<string>,
  request: { readonly origin: string | undefined; readonly preflight: boolean; readonly keyed: boolean }
): Readonly<Record<string, string>> | undefined => {
  const { origin } = request
  if (origin === undefined) return undefined
  if (origins.includes(origin)) {
    return request.preflight
      ? {
        "access-control-allow-origin": origin,
        vary: "Origin",
        "access-control-allow-methods": ALL_METHODS,
        "access-control-allow-headers": TRUSTED_HEADERS,
        "access-control-max-age": MAX_AGE
      }
      : { "access-control-allow-origin": origin, vary: "Origin", "access-control-expose-headers": EXPOSED }
  }
  if (request.keyed) return KEYED_STRANGER
  return request.preflight ? PUBLIC_PREFLIGHT : PUBLIC_ACTUAL
}
