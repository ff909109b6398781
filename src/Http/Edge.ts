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
import { CurrentPrincipal } from "../Auth/Api.js"
import { clientAddressOf } from "../Auth/ClientAddress.js"
import type { Scope } from "../Auth/Domain.js"
import { Authenticator, requireAnyScope, requireScope } from "../Auth/Http.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import * as Errors from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { errorResponse, rateLimitHeaders } from "./Envelope.js"
import { scanJson, urlHasNul } from "./JsonScan.js"
import { currentRequestMeta, RequestMeta, type RequestMetaShape } from "./RequestMeta.js"
import { requestMetas } from "./AccessLog.js"
import { bodyLimitOf } from "./BodyLimits.js"
import { BodyGates } from "./BodyGates.js"
import { apiRoutes, matchRoute, type RouteMatch } from "./Routes.js"

export { MAX_BODY_BYTES } from "./BodyLimits.js"

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

const notFoundOrMethod = (routes: ReadonlyArray<KnownRoute>, method: string, url: string): Errors.ApiError => {
  const path = url.split("?")[0] ?? url
  const allowed = routes.filter((r) => r.pattern.test(path)).map((r) => r.method)
  return allowed.length > 0 && !allowed.includes(method)
    ? new Errors.MethodNotAllowed({
      message: `${method} is not allowed on ${Errors.excerpt(path, 80)}`,
      details: { allowed: [...new Set(allowed)] }
    })
    : new Errors.NotFound({ message: `no route for ${method} ${Errors.excerpt(path, 80)}` })
}

const MAX_ISSUES = 20
const MAX_RULE_CHARS = 160

/**
 * One schema issue as the caller sees it: the path (each segment cut to a few
 * dozen characters: keys are input too) and the rule. Effect's formatters end
 * a type error with ", actual <the whole value>", which is dropped here: an
 * error never echoes the value it refuses.
 */
const safeIssue = (issue: { readonly path: ReadonlyArray<PropertyKey>; readonly message: string }) => {
  const actual = issue.message.indexOf(", actual ")
  const rule = actual >= 0 ? issue.message.slice(0, actual) : issue.message
  return {
    path: issue.path.map((p) => (typeof p === "number" ? p : Errors.excerpt(String(p)))),
    message: Errors.excerpt(rule, MAX_RULE_CHARS)
  }
}

const decodeErrorDetails = (issues: ReadonlyArray<{ readonly path: ReadonlyArray<PropertyKey>; readonly message: string }>) => {
  const seen = new Set<string>()
  const details: Array<ReturnType<typeof safeIssue>> = []
  for (const issue of issues) {
    const d = safeIssue(issue)
    const k = JSON.stringify(d)
    if (seen.has(k)) continue
    seen.add(k)
    details.push(d)
    if (details.length === MAX_ISSUES) break
  }
  return details
}

/** The VALIDATION_ERROR for schema issues: the first one in the message, at most 20 in details, no input echoed. */
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

/** The bearer token as the HttpApi security middleware reads it (after "Bearer "). */
const bearerToken = (authorization: string | undefined): string => (authorization ?? "").slice(7).trim()

/** The scope check of a keyed route, from the scopes its contract documents. */
const requireRouteScopes = (scopes: ReadonlyArray<Scope>) => scopes.length === 1 ? requireScope(scopes[0]!) : requireAnyScope(scopes)

/**
 * What a request with a body must pass before the body is read: on a keyed
 * route the key (401, env/allowlist 403, 429) and then the route's scope (403),
 * so a stranger or a key without the scope never gets a body parsed; then the
 * route's own gate (a public match: the list exists).
 */
const beforeBody = (match: RouteMatch | undefined, authorization: string | undefined, meta: RequestMetaShape) =>
  Effect.gen(function*() {
    if (match === undefined) return
    if (match.route.keyed) {
      const auth = yield* Authenticator
      const principal = yield* auth.authenticate(bearerToken(authorization))
      meta.principal = principal
      if (match.route.scopes) yield* Effect.provideService(requireRouteScopes(match.route.scopes), CurrentPrincipal, principal)
    }
    const gate = (yield* BodyGates).get(match.route.id)
    if (gate) yield* gate(match.params)
  }).pipe(Effect.provideService(RequestMeta, meta))

/** The server-level middleware given to HttpApiBuilder.serve. */
export const edge = (app: HttpApp.Default): HttpApp.Default<never, AppConfig | RateLimiter | Authenticator> => {
  const routes = apiRoutes()
  return Effect.gen(function*() {
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

    const hasBody = request.method !== "GET" && request.method !== "HEAD"
    const match = matchRoute(routes, request.method, meta.path)
    if (Option.isSome(config.publicRateLimit) && !/^Bearer atk_/.test(request.headers.authorization ?? "")) {
      const limiter = yield* RateLimiter
      const verdict = yield* limiter.hit(`ip:${meta.clientIp}`, config.publicRateLimit.value)
      meta.rateLimit = verdict
      if (!verdict.allowed) {
        return finish(errorResponse(
          new Errors.RateLimited({
            message: `public rate limit of ${verdict.limit} requests per minute exceeded for this address`,
            rateLimit: verdict
          })
        ))
      }
    }
    if (urlHasNul(request.url)) return finish(errorResponse(NUL_IN_URL()))
    if (hasBody) {
      const refused = yield* beforeBody(match, request.headers.authorization, meta).pipe(
        Effect.as(Option.none<HttpServerResponse.HttpServerResponse>()),
        Effect.catchAllCause((cause) => Effect.map(Effect.provideService(failureResponse(cause, []), RequestMeta, meta), Option.some))
      )
      if (Option.isSome(refused)) return finish(refused.value)
    }
    const limit = bodyLimitOf(match?.route.id, config.scanMaxHashes)
    const length = Number(request.headers["content-length"] ?? "0")
    if (length > limit) {
      return finish(errorResponse(new Errors.PayloadTooLarge({ message: `request body exceeds ${limit} bytes`, details: { limit_bytes: limit } })))
    }
    if (request.headers["content-length"] === undefined) keepSocketOnOversizedBody(request)
    const normalized = normalizeRequest(request, url)
    if (hasBody) {
      // Read (and cache on this request) the body once, so every route refuses
      // U+0000 and deep nesting the same way before its schema sees the value.
      const text = yield* normalized.text.pipe(
        HttpServerRequest.withMaxBodySize(Option.some(limit)),
        Effect.mapError((e) =>
          isBodyTooLarge(e)
            ? new Errors.PayloadTooLarge({ message: `request body exceeds ${limit} bytes`, details: { limit_bytes: limit } })
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
}
