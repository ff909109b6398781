/**
 * The fast lane: a typed table of node:http entries for the two hottest
 * routes, POST /attest and POST /verify (with or without /v1), which the
 * server (Server.ts) consults before handing a request to the HttpApi stack.
 *
 * An entry runs the same steps as the HttpApi path, through the same
 * functions: the request meta, `admitRequest` (size, public rate limit, U+0000
 * in the target), `bodyScanError`, the same authentication, schemas and
 * handlers (`attestOne`, `verifyOne`), `failureError` and `errorParts` for the
 * envelope and `edgeHeaders` for the headers. What it skips is the router, the
 * middleware chain and response encoding (about 100 µs of CPU per request
 * here, README benchmarks). Bodies without Content-Length (chunked) take the
 * HttpApi path, which drains an oversized one before answering 413.
 * test/Http/fastLaneParity.test.ts sends one matrix of requests with the lane
 * on and off and requires identical answers. ATTESTD_FAST_LANE=off turns it off.
 */
import { HttpServerError } from "@effect/platform"
import { Cause, Context, Effect, Either, FiberId, FiberRef, FiberRefs, ParseResult, Runtime, Schema } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { AttestPayload, VerifyPayload } from "../Attestations/Api.js"
import { Attestor } from "../Attestations/Attestor.js"
import { attestOne, verifyOne } from "../Attestations/Http.js"
import { AttestationRepo } from "../Attestations/Repo.js"
import { Authenticator } from "../Auth/Authenticator.js"
import { Quota } from "../Auth/Quota.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import type * as Errors from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { fastLaneRequests, inc } from "../Platform/Metrics.js"
import { requestMetas } from "./AccessLog.js"
import {
  admitRequest,
  bodyScanError,
  type EdgeHeaders,
  edgeHeaders,
  edgeServices,
  failureError,
  headerOf,
  INVALID_JSON,
  parseJsonBody,
  requestMetaOf,
  routePathOf,
  validationErrorFromIssues
} from "./Edge.js"
import { errorParts } from "../Http/Envelope.js"
import { RequestMeta, type RequestMetaShape } from "../Auth/RequestMeta.js"

export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => void

/** The routes the fast lane serves, as "METHOD /path" without the /v1 prefix. */
export type FastRouteKey = "POST /attest" | "POST /verify"

export type FastRoutes = Readonly<Partial<Record<FastRouteKey, NodeHandler>>>

/** The fast entry for a request, or undefined when the HttpApi stack serves it. */
export const fastRouteOf = (routes: FastRoutes, req: IncomingMessage): NodeHandler | undefined => {
  if (req.headers["content-length"] === undefined) return undefined
  return routes[`${req.method} ${routePathOf(req.url ?? "/")}` as FastRouteKey]
}

interface Reply {
  readonly status: number
  readonly headers?: Record<string, string> | undefined
  readonly body: unknown
}

type Route = (text: string, headers: EdgeHeaders) => Effect.Effect<Reply, unknown, RequestMeta>

/** Parses and decodes a body synchronously (the payload schemas have no effects): no fiber steps. */
const decodeJson = <A, I>(schema: Schema.Schema<A, I>): (text: string) => Either.Either<A, Errors.ValidationError> => {
  const decode = Schema.decodeUnknownEither(schema)
  return (text) =>
    Either.flatMap(parseJsonBody(text), (json) =>
      Either.mapLeft(decode(json), (e) => validationErrorFromIssues(ParseResult.ArrayFormatter.formatErrorSync(e))))
}
const decodeAttest = decodeJson(AttestPayload)
const decodeVerify = decodeJson(VerifyPayload)

const readBody = (req: IncomingMessage): Effect.Effect<string, Errors.ValidationError> =>
  Effect.async((resume) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resume(Effect.succeed(Buffer.concat(chunks).toString("utf8"))))
    req.on("error", () => resume(Effect.fail(INVALID_JSON())))
  })

/** The fast lane's table, over the same services as the HttpApi handlers. */
export const makeFastRoutes = Effect.gen(function*() {
  const config = yield* AppConfig
  const auth = yield* Authenticator
  const attestor = yield* Attestor
  const quota = yield* Quota
  const repo = yield* AttestationRepo
  const runtime = yield* Effect.runtime<AppConfig | RateLimiter | Authenticator>()
  // A request's fiber starts with only the services the edge reads (Edge.ts edgeServices)
  // and its RequestMeta: providing a service copies the context, so a small one keeps that
  // cheap. Spans are not recorded here (with tracing on, every request takes the HttpApi
  // path, which opens them).
  const services = edgeServices(runtime.context)
  const fiberRefs = FiberRefs.updateAs(runtime.fiberRefs, { fiberId: FiberId.none, fiberRef: FiberRef.currentTracerEnabled, value: false })
  const runForkWith = (meta: RequestMetaShape) =>
    Runtime.runFork(Runtime.make({ context: Context.add(services, RequestMeta, meta), fiberRefs, runtimeFlags: runtime.runtimeFlags }))

  const write = (res: ServerResponse, reply: Reply, extra: Record<string, string>) => {
    if (res.writableEnded || res.destroyed) return
    const text = JSON.stringify(reply.body)
    res.writeHead(reply.status, {
      ...reply.headers,
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(text)),
      ...extra
    })
    res.end(text)
  }

  const entry = (route: Route): NodeHandler => (req, res) => {
    const url = req.url ?? "/"
    const headers = req.headers as EdgeHeaders
    inc(fastLaneRequests, {})
    const meta = requestMetaOf(config, url, req.socket.remoteAddress, headers)
    requestMetas.set(req, meta)
    // Combinators rather than Effect.gen: this runs for every request, and a generator's
    // steps cost more than the flatMaps they stand for (BENCH_ONLY=instructions).
    const program = admitRequest(config, req.method ?? "POST", url, headers, meta).pipe(
      Effect.flatMap((refused) => refused ? Effect.fail(refused) : readBody(req)),
      Effect.flatMap((text) => {
        const bad = bodyScanError(text)
        return bad ? Effect.fail(bad) : route(text, headers)
      }),
      Effect.catchAllCause((cause): Effect.Effect<Reply, never, RequestMeta> =>
        Cause.isInterruptedOnly(cause) ? Effect.failCause(Cause.stripFailures(cause)) : Effect.map(failureError(cause, []), errorParts)
      ),
      Effect.tap((reply) =>
        Effect.sync(() => write(res, reply, edgeHeaders(meta, reply.headers?.["x-ratelimit-limit"] !== undefined)))
      )
    )
    const fiber = runForkWith(meta)(program)
    // As the HttpApi handler does: a client that goes away interrupts the request.
    res.on("close", () => {
      if (!res.writableEnded) fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
    })
  }

  const routes: FastRoutes = {
    "POST /attest": entry((text, headers) =>
      Effect.flatMap(RequestMeta, (meta) => {
        // admitRequest authenticated the key and checked the attest scope before the body was read
        const principal = meta.principal !== undefined
          ? Effect.succeed(meta.principal)
          : auth.authenticate((headerOf(headers, "authorization") ?? "").slice("Bearer ".length).trim())
        return Effect.flatMap(principal, (principal) => {
          const payload = decodeAttest(text)
          return Either.isLeft(payload)
            ? Effect.fail(payload.left)
            : attestOne(attestor, quota, payload.right, principal)
        })
      })),
    "POST /verify": entry((text, headers) => {
      const payload = decodeVerify(text)
      if (Either.isLeft(payload)) return Effect.fail(payload.left)
      return Effect.flatMap(auth.optionalKey(headerOf(headers, "authorization")), (key) =>
        Effect.map(
          verifyOne(repo, payload.right.hash_hex, key._tag === "Some" ? key.value.id : undefined),
          (body): Reply => ({ status: 200, body })
        ))
    })
  }
  return routes
})
