/** Request-target helpers shared by the edge and the access log. */

/** The request target without its /v1 prefix (every route is served with and without it). */
export const stripV1 = (url: string): string => {
  if (url === "/v1" || url.startsWith("/v1?")) return "/" + url.slice(3)
  return url.startsWith("/v1/") ? url.slice(3) : url
}
