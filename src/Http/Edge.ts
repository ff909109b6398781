/**
 * The edge of the HTTP service: request ids, the /v1 alias, the body limit,
 * client addresses, public rate limits, and the mapping of every failure
 * (typed errors, decode errors, unknown routes, defects) to the error envelope.
 */
import { Headers, HttpApi, HttpApiBuilder, HttpApp, HttpServerError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Cause, Effect, Option } from "effect"
import { randomUUID } from "node:crypto"
import { Api } from "../Api.js"
import { clientAddressOf } from "../Auth/ClientAddress.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import { chargePublic } from "../Auth/PublicLimit.js"
import * as Errors from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { errorResponse, rateLimitHeaders } from "./Envelope.js"
import { scanJson, urlHasNul } from "./JsonScan.js"
import { currentRequestMeta, RequestMeta, type RequestMetaShape } from "./RequestMeta.js"
import { requestMetas } from "./AccessLog.js"

export const MAX_BODY_BYTES = 1024 * 1024

/**
 * Bulk routes whose spec limits do not fit in 1 MiB (spec 8): a scan of 50,000
 * hashes and a match of 50,000 values (~3.4 MB of JSON), a derived list of
 * 100,000 hashes (~6.7 MB).
 */
export const MAX_BULK_BODY_BYTES = 8 * 1024 * 1024
const BULK_ROUTES = /^\/(scan|derived-lists|derived-lists\/[^/]+\/match)\/?$/

/** The body limit of a request, by method and path (without the /v1 prefix). */
export const bodyLimitOf = (method: string, path: string): number =>
  method === "POST" && BULK_ROUTES.test(path) ? MAX_BULK_BODY_BYTES : MAX_BODY_BYTES

interface KnownRoute {
  readonly method: string
  readonly pattern: RegExp
}

const toPattern = (path: string): RegExp =>
  new RegExp("^" + path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\/:[^/]+/g, "/[^/]+") + "/?$")

const knownRoutes = (): ReadonlyArray<KnownRoute> => {
  const routes: Array<KnownRoute> = [
    { method: "GET", pattern: toPattern("/openapi.json") },
    { method: "GET", pattern: /^\/docs(\/.*)?$/ },
    { method: "GET", pattern: toPattern("/verifier") }
  ]
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      routes.push({ method: endpoint.method, pattern: toPattern(endpoint.path) })
    }
  })
  return routes
}

/** Routes behind the Authentication middleware (keyed routes), by method. */
let keyedRoutes: ReadonlyArray<KnownRoute> | undefined

/** Whether `method path` (without /v1 and query) is a route that needs a key or share token. */
export const isKeyedRoute = (method: string, path: string): boolean => {
  if (keyedRoutes === undefined) {
    const routes: Array<KnownRoute> = []
    HttpApi.reflect(Api, {
      onGroup: () => {},
      onEndpoint: ({ endpoint, middleware }) => {
        if (middleware.size > 0) routes.push({ method: endpoint.method, pattern: toPattern(endpoint.path) })
      }
    })
    keyedRoutes = routes
  }
  for (const r of keyedRoutes) if (r.method === method && r.pattern.test(path)) return true
  return false
}

/**
 * Whether the edge counts this request against the public limit of its address: every
 * request but those to a keyed route that carry a bearer credential (those are counted
 * against their key, or against the address when the credential fails: Authenticator).
 */
export const chargedAtEdge = (method: string, path: string, authorization: string | undefined): boolean =>
  authorization === undefined || !authorization.startsWith("Bearer ") || !isKeyedRoute(method, path)

const notFoundOrMethod = (routes: ReadonlyArray<KnownRoute>, method: string, url: string): Errors.ApiError => {
  const path = url.split("?")[0] ?? url
  const allowed = routes.filter((r) => r.pattern.test(path)).map((r) => r.method)
  return allowed.length > 0 && !allowed.includes(method)
    ? new Errors.MethodNotAllowed({
      message: `${method} is not allowed on ${path.slice(0, 200)}`,
      details: { allowed: [...new Set(allowed)] }
    })
    : new Errors.NotFound({ message: `no route for ${method} ${path.slice(0, 200)}` })
}

const decodeErrorDetails = (issues: ReadonlyArray<{ readonly path: ReadonlyArray<PropertyKey>; readonly message: string }>) => {
  const seen = new Set<string>()
  return issues
    .map((i) => ({ path: i.path.map((p) => (typeof p === "symbol" ? String(p) : p)), message: i.message }))
    .filter((d) => {
      const k = JSON.stringify(d)
      return seen.has(k) ? false : (seen.add(k), true)
    })
}

/** The VALIDATION_ERROR for schema issues: the first one in the message, all in details. */
export const validationErrorFromIssues = (
  issues: ReadonlyArray<{ readonly path: ReadonlyArray<PropertyKey>; readonly message: string }>
): Errors.ValidationError => {
  const details = decodeErrorDetails(issues)
  const first = details[0]
  return new Errors.ValidationError({
    message: first ? `invalid request: ${first.path.length ? first.path.join(".") + ": " : ""}${first.message}` : "invalid request",
    details
  })
}

export const INVALID_JSON = () =>
  new Errors.ValidationError({ message: "request body is not valid JSON", details: [{ path: [], message: "invalid JSON" }] })

export const NUL_IN_URL = () =>
  new Errors.ValidationError({
    message: "invalid request: the path or query holds U+0000",
    details: [{ path: ["url"], message: "U+0000 is not allowed" }]
  })

/** The VALIDATION_ERROR for a body that nests too deep or holds U+0000, or undefined when it is fine. */
export const bodyScanError = (text: string): Errors.ValidationError | undefined => {
  const verdict = scanJson(text)
  if (verdict === "ok") return undefined
  return verdict === "nul"
    ? new Errors.ValidationError({
      message: "invalid request: a string holds U+0000",
      details: [{ path: [], message: "U+0000 is not allowed in any string" }]
    })
    : new Errors.ValidationError({
      message: "invalid request: JSON nests deeper than 64 levels",
      details: [{ path: [], message: "nesting deeper than 64 levels" }]
    })
}

const isBodyTooLarge = (defect: unknown): boolean => /max(imum)?[ _-]?(body|bytes)|too large|exceed/i.test(String((defect as any)?.cause ?? defect))

/** Maps a failed request to an envelope response; unexpected failures are logged with the request id. */
export const failureResponse = (
  cause: Cause.Cause<unknown>,
  routes: ReadonlyArray<KnownRoute>
): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.gen(function*() {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const e = failure.value as any
      if (Errors.isApiError(e)) return errorResponse(e)
      if (e?._tag === "HttpApiDecodeError") return errorResponse(validationErrorFromIssues(e.issues ?? []))
      if (HttpServerError.isServerError(e) && e._tag === "RouteNotFound") {
        return errorResponse(notFoundOrMethod(routes, e.request.method, e.request.url))
      }
    }
    const defect = Cause.dieOption(cause)
    if (Option.isSome(defect)) {
      const d = defect.value as any
      if (HttpServerError.isServerError(d) && d._tag === "RequestError") {
        return errorResponse(
          isBodyTooLarge(d)
            ? new Errors.PayloadTooLarge({ message: "request body exceeds the size limit of this route" })
            : INVALID_JSON()
        )
      }
    }
    const meta = yield* currentRequestMeta
    yield* Effect.logError("request failed", cause).pipe(Effect.annotateLogs({ request_id: meta.requestId, path: meta.path }))
    return errorResponse(new Errors.InternalError({ message: "internal error; quote the X-Request-Id when reporting it" }))
  })

/** HttpApi-level middleware: sees handler failures before HttpApi's own encoder would. */
export const ApiErrorsLive = HttpApiBuilder.middleware(
  Api,
  Effect.sync(() => {
    const routes = knownRoutes()
    return (app: HttpApp.Default) => Effect.catchAllCause(app, (cause) => failureResponse(cause, routes))
  })
)

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/

/** The caller's X-Request-Id when it is printable ASCII of at most 128 characters, else a new one. */
export const requestIdOf = (given: string | undefined): string =>
  given !== undefined && REQUEST_ID.test(given) ? given : randomUUID()

export const stripV1 = (url: string): string => {
  if (url === "/v1" || url.startsWith("/v1?")) return "/" + url.slice(3)
  return url.startsWith("/v1/") ? url.slice(3) : url
}

/**
 * Bodies are JSON whatever the declared type (curl -d sends form encoding), and
 * /v1 is stripped so one route table serves both the prefix and the alias.
 */
const normalizeRequest = (request: HttpServerRequest.HttpServerRequest, url: string) => {
  const type = request.headers["content-type"]
  const jsonBody = request.method !== "GET" && request.method !== "HEAD" && (type === undefined || !type.includes("json"))
  if (!jsonBody && url === request.url) return request
  return request.modify({
    url,
    ...(jsonBody ? { headers: Headers.set(request.headers, "content-type", "application/json") } : {})
  })
}

/**
 * A chunked body over the limit makes the platform's reader destroy the
 * request stream, which would kill the socket before the 413 is written. For
 * bodies without Content-Length the rest of the body is drained instead, and
 * the 413 goes out with Connection: close.
 */
const keepSocketOnOversizedBody = (request: HttpServerRequest.HttpServerRequest) => {
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  const destroy = incoming.destroy.bind(incoming)
  incoming.destroy = ((error?: Error) => {
    if (incoming.complete) return destroy(error)
    incoming.removeAllListeners("data")
    incoming.resume()
    return incoming
  }) as typeof incoming.destroy
}

/** The server-level middleware given to HttpApiBuilder.serve. */
export const edge = (app: HttpApp.Default): HttpApp.Default<never, AppConfig | RateLimiter> =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const request = yield* HttpServerRequest.HttpServerRequest
    const requestId = requestIdOf(request.headers["x-request-id"])
    const url = stripV1(request.url)
    const meta: RequestMetaShape = {
      requestId,
      clientIp: clientAddressOf(
        Option.getOrUndefined(request.remoteAddress),
        request.headers["x-forwarded-for"],
        config.trustProxy
      ),
      path: url.split("?")[0] ?? url,
      rateLimit: undefined
    }
    requestMetas.set(NodeHttpServerRequest.toIncomingMessage(request), meta)

    const finish = (response: HttpServerResponse.HttpServerResponse) => {
      const headers: Record<string, string> = { "x-request-id": requestId }
      if (meta.rateLimit && response.headers["x-ratelimit-limit"] === undefined) {
        Object.assign(headers, rateLimitHeaders(meta.rateLimit))
      }
      return HttpServerResponse.setHeaders(response, headers)
    }

    const limit = bodyLimitOf(request.method, meta.path)
    const length = Number(request.headers["content-length"] ?? "0")
    if (length > limit) {
      return finish(errorResponse(new Errors.PayloadTooLarge({ message: `request body exceeds ${limit} bytes`, details: { limit_bytes: limit } })))
    }
    if (Option.isSome(config.publicRateLimit) && chargedAtEdge(request.method, meta.path, request.headers.authorization)) {
      const charged = yield* Effect.either(chargePublic(config, yield* RateLimiter, meta))
      if (charged._tag === "Left") return finish(errorResponse(charged.left))
    }
    if (urlHasNul(request.url)) return finish(errorResponse(NUL_IN_URL()))
    if (request.headers["content-length"] === undefined) keepSocketOnOversizedBody(request)
    const normalized = normalizeRequest(request, url)
    if (request.method !== "GET" && request.method !== "HEAD") {
      // Read (and cache on this request) the body once, so every route refuses
      // U+0000 and deep nesting the same way before its schema sees the value.
      const text = yield* normalized.text.pipe(
        HttpServerRequest.withMaxBodySize(Option.some(limit)),
        Effect.mapError((e) =>
          isBodyTooLarge(e)
            ? new Errors.PayloadTooLarge({ message: "request body exceeds the size limit of this route" })
            : INVALID_JSON()
        ),
        Effect.either
      )
      if (text._tag === "Left") return finish(errorResponse(text.left))
      const bad = bodyScanError(text.right)
      if (bad) return finish(errorResponse(bad))
    }
    // The inner app writes the response itself; headers go on through a pre-response handler.
    yield* HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(finish(response)))
    return yield* app.pipe(
      Effect.provideService(RequestMeta, meta),
      Effect.provideService(HttpServerRequest.HttpServerRequest, normalized),
      HttpServerRequest.withMaxBodySize(Option.some(limit)),
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.failCause(cause)
          : Effect.provideService(failureResponse(cause, []), RequestMeta, meta)
      )
    )
  }) as any
