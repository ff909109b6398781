/**
 * The edge of the HTTP service: request ids, the /v1 alias, CORS headers, the body limit,
 * client addresses, public rate limits, and the mapping of every failure
 * (typed errors, decode errors, unknown routes, defects) to the error envelope.
 */
import * as Headers from "@effect/platform/Headers"
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiError from "@effect/platform/HttpApiError"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Cause, Effect, Either, Option, Predicate } from "effect"
import { randomUUID } from "node:crypto"
import type { IncomingMessage } from "node:http"
import { Readable } from "node:stream"
import { Api } from "../Api.js"
import type { Principal } from "../Auth/Api.js"
import { clientAddressOf } from "../Platform/ClientAddress.js"
import type { Scope } from "../Auth/Domain.js"
import { Authenticator, presentedCredential } from "../Auth/Authenticator.js"
import { keyWithAnyScope, keyWithScope } from "../Auth/Http.js"
import { PublicLimit } from "../Auth/PublicLimit.js"
import * as Errors from "../Domain/Errors.js"
import { AppConfig, type AppConfigShape } from "../Platform/Config.js"
import { isTransientDatabaseFailure } from "../Platform/Sql.js"
import { errorResponse, rateLimitHeaders } from "../Http/Envelope.js"
import { corsHeadersFor } from "../Http/Cors.js"
import { scanJson, urlHasNul } from "../Http/JsonScan.js"
import { RequestMetas, type RequestMetaShape } from "../Auth/RequestMeta.js"
import { stripV1 } from "../Http/Paths.js"
import { bodyLimitOf } from "./BodyLimits.js"
import { type BodyGate, BodyGates } from "../Http/BodyGates.js"
import { apiRoutes, isKeyed, matchRoute, type Route, type RouteMatch, routeTemplate } from "./Routes.js"
import { afterRequestBody } from "./Linger.js"

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

const isBodyTooLarge = (defect: unknown): boolean =>
  /max(imum)?[ _-]?(body|bytes)|too large|exceed/i.test(String(Predicate.hasProperty(defect, "cause") && defect.cause != null ? defect.cause : defect))

/**
 * The API error for a failed request: typed errors as they are, decode errors
 * as VALIDATION_ERROR, unknown routes as 404/405, an unreadable body as 400/413;
 * anything else is logged with the request's id and path (`meta`) and becomes INTERNAL_ERROR.
 */
export const failureError = (
  cause: Cause.Cause<unknown>,
  routes: ReadonlyArray<KnownRoute>,
  meta?: RequestMetaShape
): Effect.Effect<Errors.ApiError> =>
  Effect.gen(function*() {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const e = failure.value
      if (Errors.isApiError(e)) return e
      if (e instanceof HttpApiError.HttpApiDecodeError) return validationErrorFromIssues(e.issues)
      if (HttpServerError.isServerError(e) && e._tag === "RouteNotFound") {
        return notFoundOrMethod(routes, e.request.method, e.request.url)
      }
    }
    const defect = Cause.dieOption(cause)
    if (Option.isSome(defect)) {
      const d = defect.value
      if (HttpServerError.isServerError(d) && d._tag === "RequestError") {
        return isBodyTooLarge(d)
          ? new Errors.PayloadTooLarge({ message: "request body exceeds the size limit of this route" })
          : INVALID_JSON()
      }
    }
    const annotations = { request_id: meta?.requestId ?? "-", path: meta?.path ?? "" }
    // out of reach, or conflicts that outlasted their retries: either may pass when retried
    if (isTransientDatabaseFailure(cause)) {
      yield* Effect.logWarning("database unavailable", cause).pipe(Effect.annotateLogs(annotations))
      return new Errors.ServiceUnavailable({ message: "the database is unavailable; retry shortly" })
    }
    yield* Effect.logError("request failed", cause).pipe(Effect.annotateLogs(annotations))
    return new Errors.InternalError({ message: "internal error; quote the X-Request-Id when reporting it" })
  })

/** Maps a failed request to an envelope response; unexpected failures are logged with the request id. */
export const failureResponse = (
  cause: Cause.Cause<unknown>,
  routes: ReadonlyArray<KnownRoute>,
  meta: RequestMetaShape | undefined
): Effect.Effect<HttpServerResponse.HttpServerResponse> => Effect.map(failureError(cause, routes, meta), errorResponse)

/** HttpApi-level middleware: sees handler failures before HttpApi's own encoder would. */
export const ApiErrorsLive = HttpApiBuilder.middleware(
  Api,
  Effect.map(RequestMetas, (metas) => {
    const routes = knownRoutes()
    return (app: HttpApp.Default) =>
      Effect.catchAllCause(app, (cause) => Effect.flatMap(metas.current, (meta) => failureResponse(cause, routes, meta)))
  })
)

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/

/** The caller's X-Request-Id when it is printable ASCII of at most 128 characters, else a new one. */
export const requestIdOf = (given: string | undefined): string =>
  given !== undefined && REQUEST_ID.test(given) ? given : randomUUID()

/** The path of a request target without its query and without the /v1 prefix. */
export const routePathOf = (url: string): string => {
  const stripped = stripV1(url)
  const q = stripped.indexOf("?")
  return q < 0 ? stripped : stripped.slice(0, q)
}

/** The request headers the edge reads (node and platform requests both have them lower-cased). */
export type EdgeHeaders = { readonly [name: string]: string | ReadonlyArray<string> | undefined }

/** A header's value (the first, if repeated). */
export const headerOf = (headers: EdgeHeaders, name: string): string | undefined => {
  const v = headers[name]
  return typeof v === "string" || v === undefined ? v : v[0]
}

/** The meta of a request as it arrives: its id, the client address and the route path. */
export const requestMetaOf = (
  config: AppConfigShape,
  url: string,
  remoteAddress: string | undefined,
  headers: EdgeHeaders
): RequestMetaShape => ({
  requestId: requestIdOf(headerOf(headers, "x-request-id")),
  clientIp: clientAddressOf(remoteAddress, headerOf(headers, "x-forwarded-for"), config.trustProxy),
  path: routePathOf(url),
  target: url,
  rateLimit: undefined
})

/**
 * What the server's listener does first with every request, as node received it:
 * keeps its meta (RequestMetas) for the edge and the handlers, returns it for the access log, and
 * takes the /v1 prefix off its target, so that one route table serves the prefix and
 * the alias, and the platform's request is the one every step reads (no provide of a
 * rewritten request per request).
 */
export const arrival: Effect.Effect<(req: IncomingMessage) => RequestMetaShape, never, AppConfig | RequestMetas> = Effect.map(
  Effect.all([AppConfig, RequestMetas]),
  ([config, metas]) => (req: IncomingMessage) => {
    const url = req.url ?? "/"
    const meta = requestMetaOf(config, url, req.socket.remoteAddress, req.headers)
    metas.arrived(req, meta)
    const stripped = stripV1(url)
    if (stripped !== url) req.url = stripped
    return meta
  }
)

/**
 * Whether the edge counts a request against the public limit of its address: every
 * request but those to a keyed route that present a credential. Those are counted
 * against their key, or against the address when the credential fails (Authenticator),
 * so an `Authorization` header by itself never exempts a request.
 */
export const chargedAtEdge = (keyedRoute: boolean, presentsCredential: boolean): boolean =>
  !keyedRoute || !presentsCredential

/** The credential a request presents to `route`: a bearer token, or HTTP Basic's password where the route takes it. */
const credentialFor = (route: Route | undefined, headers: EdgeHeaders): string | undefined =>
  presentedCredential(headerOf(headers, "authorization"), route?.keyedWhen !== undefined)

/** The scope check of a keyed route, from the scopes its contract documents. */
const routeScopes = (principal: Principal, scopes: ReadonlyArray<Scope>) =>
  scopes.length === 1 ? keyWithScope(principal, scopes[0]!) : keyWithAnyScope(principal, scopes)

const ROUTES = apiRoutes()

const responseOf = (e: Errors.ApiError | undefined) => e && errorResponse(e)

/** Whether the edge reads a request's body: every method but GET and HEAD (an answer before it lingers for it, `lingering`). */
const carriesBody = (method: string): boolean => method !== "GET" && method !== "HEAD"

/**
 * What the edge refuses before it reads a body, in this order: the public
 * per-address rate limit (429; the verdict is kept on `meta` for the headers;
 * see chargedAtEdge), U+0000 in the request target (400); then,
 * for a request with a body, on a keyed route the key (401; 403 for its
 * environment or allow-list; 429 for its limit; the principal is kept on
 * `meta` for the bearer middleware) and the scope the route documents (403),
 * and the route's own gate (a public match: its list exists, 404); last a
 * body of a media type the route does not take (415) and a declared body
 * over the route's limit (413). So a stranger, or a key without
 * the scope, never gets a body read or validated. Succeeds with the refusal, if any.
 */
export const admitRequest = (
  edge: EdgeServices,
  method: string,
  url: string,
  headers: EdgeHeaders,
  meta: RequestMetaShape,
  match: RouteMatch | undefined
): Effect.Effect<Errors.ApiError | undefined> => {
  const { config, gates } = edge
  const afterPublicLimit = !urlHasNul(url) && checksBeforeBody(config, match, method, gates)
    ? Effect.match(beforeBody(edge, match!, headers, meta), {
      onFailure: (refused): Errors.ApiError | undefined => refused,
      onSuccess: () => bodyShapeError(config, match, method, headers)
    })
    : Effect.sync(() => refusalNow(config, method, url, headers, match))
  if (chargedPublicly(config, match, headers)) {
    return Effect.flatMap(Effect.either(edge.publicLimit.charge(meta)), (charged) =>
      charged._tag === "Left" ? Effect.succeed(charged.left) : afterPublicLimit)
  }
  return afterPublicLimit
}

/**
 * Whether admitRequest decides without an effect: no public charge and no key or gate to
 * check, so what is left (refusalNow) is pure and the edge runs no admission steps for it.
 */
const admittedAtOnce = (
  config: AppConfigShape,
  method: string,
  headers: EdgeHeaders,
  match: RouteMatch | undefined,
  gates: ReadonlyMap<string, BodyGate>
): boolean => !chargedPublicly(config, match, headers) && !checksBeforeBody(config, match, method, gates)

/** The refusals that need no effect: U+0000 in the target (400), then the body's type and declared size (415, 413). */
const refusalNow = (config: AppConfigShape, method: string, url: string, headers: EdgeHeaders, match: RouteMatch | undefined) =>
  urlHasNul(url) ? NUL_IN_URL() : bodyShapeError(config, match, method, headers)

/** Whether the edge charges the request against its address's public limit (see chargedAtEdge). */
const chargedPublicly = (config: AppConfigShape, match: RouteMatch | undefined, headers: EdgeHeaders): boolean =>
  Option.isSome(config.publicRateLimit) &&
  chargedAtEdge(match !== undefined && isKeyed(match.route, config), credentialFor(match?.route, headers) !== undefined)

/** Whether a key or a gate is checked before the body is read: a keyed or gated route, for a request with a body. */
const checksBeforeBody = (
  config: AppConfigShape,
  match: RouteMatch | undefined,
  method: string,
  gates: ReadonlyMap<string, BodyGate>
): boolean => match !== undefined && carriesBody(method) && (isKeyed(match.route, config) || gates.has(match.route.id))

/** A request's media type: the Content-Type without parameters, lower case ("" when absent). */
const mediaTypeOf = (headers: EdgeHeaders): string => (headerOf(headers, "content-type") ?? "").split(";")[0]!.trim().toLowerCase()

/**
 * 415 for a body of another type than JSON or the route's own, on a route that takes a
 * binary body (elsewhere every body is read as JSON, whatever its declared type).
 */
const mediaTypeError = (match: RouteMatch | undefined, method: string, headers: EdgeHeaders): Errors.ApiError | undefined => {
  const binaryTypes = match?.route.binaryTypes ?? []
  if (binaryTypes.length === 0 || !carriesBody(method)) return undefined
  const type = mediaTypeOf(headers)
  return type === "application/json" || binaryTypes.includes(type)
    ? undefined
    : new Errors.UnsupportedMediaType({
      message: `Content-Type must be ${binaryTypes.join(", ")} or application/json${type === "" ? "" : `, not ${Errors.excerpt(type, 80)}`}`,
      details: { accepted: [...binaryTypes, "application/json"] }
    })
}

/** What is wrong with a body before it is read: its media type (415), then its declared size (413). */
const bodyShapeError = (config: AppConfigShape, match: RouteMatch | undefined, method: string, headers: EdgeHeaders) =>
  mediaTypeError(match, method, headers) ?? bodySizeError(config, match, headers)

const bodyTooLarge = (limit: number) =>
  new Errors.PayloadTooLarge({ message: `request body exceeds ${limit} bytes`, details: { limit_bytes: limit } })

/** 413 for a declared body over the route's limit. */
const bodySizeError = (config: AppConfigShape, match: RouteMatch | undefined, headers: EdgeHeaders): Errors.ApiError | undefined => {
  const limit = bodyLimitOf(match?.route.id, config.scanMaxHashes)
  const length = Number(headerOf(headers, "content-length") ?? "0")
  return length > limit
    ? bodyTooLarge(limit)
    : undefined
}

const beforeBody = (edge: EdgeServices, match: RouteMatch, headers: EdgeHeaders, meta: RequestMetaShape) => {
  const gate = edge.gates.get(match.route.id)
  const gated = gate ? Effect.suspend(() => gate(match.params)) : Effect.void
  if (!isKeyed(match.route, edge.config)) return gated
  const scopes = match.route.scopes
  return Effect.flatMap(edge.authenticator.authenticate(credentialFor(match.route, headers) ?? ""), (principal) => {
    meta.principal = principal
    return scopes ? Effect.zipRight(routeScopes(principal, scopes), gated) : gated
  })
}

/**
 * The headers the edge adds to every response: X-Request-Id, once a limit counted the
 * request X-RateLimit-*, and the CORS headers its request calls for (`cors`, Http/Cors.ts).
 */
const edgeHeaders = (
  meta: RequestMetaShape,
  responseHasRateLimit: boolean,
  cors: Readonly<Record<string, string>> | undefined
): Record<string, string> => {
  const headers: Record<string, string> = { "x-request-id": meta.requestId }
  if (meta.rateLimit && !responseHasRateLimit) Object.assign(headers, rateLimitHeaders(meta.rateLimit))
  if (cors !== undefined) Object.assign(headers, cors)
  return headers
}

/** A response with the edge's headers for the request of `meta` (a limit's own X-RateLimit-* kept). */
const withEdgeHeaders = (meta: RequestMetaShape, response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(response, edgeHeaders(meta, response.headers["x-ratelimit-limit"] !== undefined, meta.cors))

/**
 * The pre-response handler of every request the app answers: the edge's headers, with
 * the rate-limit verdict the handlers left on the request's meta. It is set once for the
 * server (Server.ts): a handler appended per request is a FiberRef update per request.
 * The edge's own refusals are answered outside the app and get the headers there.
 */
export const edgeResponseHeaders: Effect.Effect<HttpApp.PreResponseHandler, never, RequestMetas> = Effect.map(
  RequestMetas,
  (metas) => (request, response) => {
    const meta = metas.of(request.source)
    return Effect.succeed(meta === undefined ? response : withEdgeHeaders(meta, response))
  }
)

/**
 * The CORS headers of a request (none without an Origin). Whether its route needs a key
 * comes from the edge's match; a preflight asks about another method, matched here.
 */
const corsOf = (config: AppConfigShape, request: HttpServerRequest.HttpServerRequest, path: string, match: RouteMatch | undefined) => {
  const origin = headerOf(request.headers, "origin")
  if (origin === undefined) return undefined
  const asked = request.method === "OPTIONS" ? headerOf(request.headers, "access-control-request-method") : undefined
  const route = asked === undefined ? match : matchRoute(ROUTES, asked.toUpperCase(), path)
  return corsHeadersFor(config.corsOrigins, { origin, preflight: asked !== undefined, keyed: route !== undefined && isKeyed(route.route, config) })
}

/** A JSON body as the platform parses it (the empty body is null), or VALIDATION_ERROR. */
export const parseJsonBody = (text: string): Either.Either<unknown, Errors.ValidationError> => {
  try {
    return Either.right(text === "" ? null : JSON.parse(text) as unknown)
  } catch {
    return Either.left(INVALID_JSON())
  }
}

/**
 * Whether a request carries a body of a binary media type its route declares (a DER
 * TimeStampReq): such a body reaches the handler as bytes, unread by the edge. Only
 * a request with a non-JSON type is looked up: the JSON routes pay nothing for it.
 */
const carriesBinaryBody = (request: HttpServerRequest.HttpServerRequest, match: RouteMatch | undefined): boolean => {
  const type = request.headers["content-type"]
  if (!carriesBody(request.method) || type === undefined || type.includes("json")) return false
  return match?.route.binaryTypes.includes(mediaTypeOf(request.headers)) === true
}

/**
 * Bodies are JSON whatever the declared type (curl -d sends form encoding), but for a
 * binary type the route declares: the request with `application/json` for such a
 * body, or undefined when it is fine as it is (nearly always).
 */
const asJsonBody = (request: HttpServerRequest.HttpServerRequest, binary: boolean) => {
  const type = request.headers["content-type"]
  const jsonBody = !binary && carriesBody(request.method) && (type === undefined || !type.includes("json"))
  return jsonBody ? request.modify({ headers: Headers.set(request.headers, "content-type", "application/json") }) : undefined
}

/**
 * A body sent without Content-Length, measured here before the platform reads
 * it: the platform's reader destroys the request at the limit, and with it the
 * socket, before the 413 is written. What arrives is taken off the stream until
 * the request is complete, then given back (`unshift`) for the platform to read;
 * true when it fits in `limit` bytes. Over the limit the rest is left to arrive
 * (the 413 lingers for it).
 */
const unsizedBodyFits = (incoming: IncomingMessage, limit: number): Effect.Effect<boolean, Errors.ValidationError> =>
  Effect.async((resume) => {
    const parts: Array<Buffer> = []
    let size = 0
    const stop = () => {
      incoming.off("readable", onReadable)
      incoming.off("error", onError)
    }
    const onReadable = () => {
      if (incoming.complete) {
        // Everything has arrived: the rest is in the stream's buffer. Nothing is read now,
        // so the stream cannot end before its body is given back.
        stop()
        if (size + incoming.readableLength > limit) return resume(Effect.succeed(false))
        if (parts.length > 0) incoming.unshift(Buffer.concat(parts))
        return resume(Effect.succeed(true))
      }
      // Still arriving: take what is buffered, so that more is read from the socket.
      const chunk: Buffer | null = incoming.read()
      if (chunk === null) return
      size += chunk.length
      if (size > limit) {
        stop()
        return resume(Effect.succeed(false))
      }
      parts.push(chunk)
    }
    const onError = () => {
      stop()
      resume(Effect.fail(INVALID_JSON()))
    }
    // Complete already (no body, or a short one): decide without reading, which would end
    // the stream before the platform listens for its end.
    if (incoming.complete) return resume(Effect.succeed(incoming.readableLength <= limit))
    incoming.on("readable", onReadable)
    incoming.once("error", onError)
    return Effect.sync(stop)
  })

/**
 * An answer given while the request's body is still arriving: sent at once with
 * `Connection: close`, ended once the body has been read and dropped (or
 * LINGER_MS pass), so closing the connection resets nothing the client must
 * still read (Linger.ts).
 */
const lingering = (incoming: IncomingMessage, response: HttpServerResponse.HttpServerResponse): HttpServerResponse.HttpServerResponse => {
  if (incoming.complete || response.body._tag !== "Uint8Array") return response
  const bytes = response.body.body
  const body = new Readable({ read() {} })
  body.push(bytes)
  afterRequestBody(incoming, () => body.push(null))
  return HttpServerResponse.raw(body, {
    status: response.status,
    headers: { ...response.headers, "content-length": String(bytes.byteLength), connection: "close" }
  })
}

/** What the edge uses, read once as the server starts: no request's fiber looks a service up for it. */
export interface EdgeServices {
  readonly config: AppConfigShape
  readonly metas: RequestMetas
  readonly gates: ReadonlyMap<string, BodyGate>
  readonly publicLimit: PublicLimit
  readonly authenticator: Authenticator
}

/**
 * The server-level middleware given to HttpApiBuilder.serve, made once with the edge's
 * services (EdgeServices) as the server layer is built. It reads the request's meta
 * kept as it arrived (`arrival`) and matches its route once for every check. The fiber's
 * context is provided anew only for a body whose declared type is not JSON (`asJsonBody`):
 * each provide is a FiberRef locally (about twenty steps of the fiber's loop, two copies
 * of its refs) and a copy of its context; providing none cut a trivial GET's and a
 * verify's instructions by 13% (docs/performance.md).
 */
export const makeEdge: Effect.Effect<
  (app: HttpApp.Default) => HttpApp.Default,
  never,
  AppConfig | PublicLimit | Authenticator | RequestMetas | BodyGates
> = Effect.map(
  Effect.all({ config: AppConfig, metas: RequestMetas, gates: BodyGates, publicLimit: PublicLimit, authenticator: Authenticator }),
  (services: EdgeServices) => (app) =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const meta = services.metas.of(request.source)
      if (meta === undefined) return Effect.dieMessage("a request reached the edge without passing the server's arrival (Server.ts)")
      const match = matchRoute(ROUTES, request.method, meta.path)
      meta.route = routeTemplate(ROUTES, request.method, meta.target, match)
      const binary = carriesBinaryBody(request, match)
      const limit = carriesBody(request.method) ? bodyLimitOf(match?.route.id, services.config.scanMaxHashes) : undefined
      meta.cors = corsOf(services.config, request, meta.path, match)
      const asJson = asJsonBody(request, binary)
      return asJson === undefined
        ? edgeFor(app, services, request, request, limit, binary, meta, match)
        : Effect.provideService(edgeFor(app, services, request, asJson, limit, binary, meta, match), HttpServerRequest.HttpServerRequest, asJson)
    })
)

/**
 * The edge's steps for `request` as received. `own`: the request in the fiber's context,
 * which the app reads, and through which the edge reads the body for it (the same request
 * but for a body whose declared type is not JSON, `asJsonBody`). `limit`: the route's body limit, for a
 * method that carries a body, held by the edge's checks (a declared size over it is
 * refused before the body is read, a body without one is measured), so the platform
 * reads without a limit of its own; `binary`: the body is bytes of a type its route
 * declares, left for the handler to read; `match`: the route it reaches. A preflight
 * (OPTIONS) that passes is answered 204 here, with the edge's headers (its CORS ones among
 * them), in place of the router's 404 or 405. One generator function for every request
 * (Effect.fnUntraced): V8 keeps state for each generator function in the old generation,
 * so one made per call kept each request's objects alive there until a full collection
 * (trivial GET: ~860 against ~200 KB surviving each young collection).
 */
const edgeFor = Effect.fnUntraced(function*(
  app: HttpApp.Default,
  services: EdgeServices,
  request: HttpServerRequest.HttpServerRequest,
  own: HttpServerRequest.HttpServerRequest,
  limit: number | undefined,
  binary: boolean,
  meta: RequestMetaShape,
  match: RouteMatch | undefined
) {
  const finish = (response: HttpServerResponse.HttpServerResponse) => withEdgeHeaders(meta, response)
  const { config, gates } = services

  const refused = admittedAtOnce(config, request.method, request.headers, match, gates)
    ? responseOf(refusalNow(config, request.method, request.url, request.headers, match))
    : yield* admitRequest(services, request.method, request.url, request.headers, meta, match).pipe(
      Effect.map(responseOf),
      Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : failureResponse(cause, [], meta))
    )
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  if (refused) return lingering(incoming, finish(refused))
  if (limit !== undefined && request.headers["content-length"] === undefined) {
    // The edge can run inside node's parsing of the request's first packet: let that
    // parsing finish, so a body that came with the headers is complete when measured.
    if (!incoming.complete) yield* Effect.yieldNow()
    const fits = yield* Effect.either(unsizedBodyFits(incoming, limit))
    if (fits._tag === "Left") return finish(errorResponse(fits.left))
    if (!fits.right) return lingering(incoming, finish(errorResponse(bodyTooLarge(limit))))
  }
  if (limit !== undefined && !binary) {
    // Read (and cache on this request) the body once, so every route refuses
    // U+0000 and deep nesting the same way before its schema sees the value. The
    // body fits the limit: its Content-Length was checked (admitRequest), or it was measured.
    const text = yield* own.text.pipe(Effect.mapError(() => INVALID_JSON()), Effect.either)
    if (text._tag === "Left") return finish(errorResponse(text.left))
    const bad = bodyScanError(text.right)
    if (bad) return finish(errorResponse(bad))
  }
  if (request.method === "OPTIONS") return finish(HttpServerResponse.empty({ status: 204 }))
  // The inner app writes the response itself, its headers added by edgeResponseHeaders.
  return yield* app.pipe(
    Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.map(failureResponse(cause, [], meta), finish))
  )
})
