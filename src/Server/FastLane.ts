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
 *
 * A verify, and an attest, with no key or a key this instance has cached, run
 * without a fiber of their own (`verifyWithoutFiber`, `attestWithoutFiber`):
 * the same steps through the same functions, called directly, with forms of
 * those that could wait which answer at once or call back (`admitRequestNow`
 * for the rate limits and the key; the reads on SQLite's read-only connection
 * or through the group read's callback; the attest through the group commit's
 * callback). What cannot be decided at once goes on in a fiber from that step.
 * test/Http/fastLaneParity.test.ts sends one matrix of requests with the lane
 * on and off and requires identical answers. ATTESTD_FAST_LANE=off turns it off.
 */
import { HttpServerError } from "@effect/platform"
import { Cause, Context, Effect, Either, Exit, FiberId, FiberRef, FiberRefs, Option, ParseResult, Runtime, Schema } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { AttestPayload, VerifyPayload } from "../Attestations/Api.js"
import { Attestor } from "../Attestations/Attestor.js"
import { attestInputOf, attestOne, attestReply, verifyAnswer, verifyOne } from "../Attestations/Http.js"
import { AttestationRepo } from "../Attestations/Repo.js"
import { Authenticator } from "../Auth/Authenticator.js"
import { Quota } from "../Auth/Quota.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import type * as Errors from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { fastLaneAnswersWithoutFiber, fastLaneRequests, inc } from "../Platform/Metrics.js"
import { requestMetas } from "./AccessLog.js"
import {
  admitRequest,
  admitRequestNow,
  bearerToken,
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
import { BodyGates } from "../Http/BodyGates.js"
import { compiledStruct } from "../Platform/CompiledSchema.js"
import { UNDECIDED, type Undecided } from "../Domain/Undecided.js"
import type { AttestationStatus } from "../Attestations/Domain.js"

export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => void

/** The routes the fast lane serves, as "METHOD /path" without the /v1 prefix. */
export type FastRouteKey = "POST /attest" | "POST /verify"

export type FastRoutes = Readonly<Partial<Record<FastRouteKey, NodeHandler>>>

/** The fast entry for a request, or undefined when the HttpApi stack serves it. */
export const fastRouteOf = (routes: FastRoutes, req: IncomingMessage): NodeHandler | undefined => {
  // cross-origin requests take the HttpApi path, where the CORS middleware is (Http/Cors.ts)
  if (req.headers["content-length"] === undefined || req.headers["origin"] !== undefined) return undefined
  return routes[`${req.method} ${routePathOf(req.url ?? "/")}` as FastRouteKey]
}

interface Reply {
  readonly status: number
  readonly headers?: Record<string, string> | undefined
  readonly body: unknown
}

type Route = (text: string, headers: EdgeHeaders) => Effect.Effect<Reply, unknown, RequestMeta>

/**
 * Parses and decodes a body synchronously (the payload schemas have no effects): no fiber
 * steps, and the payload's struct compiled (CompiledSchema: Effect's decoder for any body it is
 * not sure of, so every refusal is worded as the HttpApi path words it).
 */
const decodeJson = <A, I>(schema: Schema.Schema<A, I>): (text: string) => Either.Either<A, Errors.ValidationError> => {
  const decode = compiledStruct(schema, Schema.decodeUnknownEither(schema))
  return (text) =>
    Either.flatMap(parseJsonBody(text), (json) =>
      Either.mapLeft(decode(json), (e) => validationErrorFromIssues(ParseResult.ArrayFormatter.formatErrorSync(e))))
}
const decodeAttest = decodeJson(AttestPayload)
const decodeVerify = decodeJson(VerifyPayload)

/** Reads a request's body as UTF-8 text, then calls `done` with it, or with undefined when the stream fails. */
const readBodyThen = (req: IncomingMessage, done: (text: string | undefined) => void): void => {
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => done(Buffer.concat(chunks).toString("utf8")))
  req.on("error", () => done(undefined))
}

const readBody = (req: IncomingMessage): Effect.Effect<string, Errors.ValidationError> =>
  Effect.async((resume) => readBodyThen(req, (text) => resume(text === undefined ? Effect.fail(INVALID_JSON()) : Effect.succeed(text))))

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
  // What the entries without a fiber (below) read outside one: the runtime's clock (a
  // TestClock in tests that provide one), the rate limiter and the body gates.
  const clock = yield* Effect.clock
  const limiter = Context.get(runtime.context, RateLimiter)
  const gates = yield* BodyGates

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
  /** Writes an answer with the edge's headers (the request id; the rate limit's unless the answer has its own). */
  const answer = (res: ServerResponse, meta: RequestMetaShape, reply: Reply) =>
    write(res, reply, edgeHeaders(meta, reply.headers?.["x-ratelimit-limit"] !== undefined))

  /** A request as it arrives: counted, its meta made and kept for the access log. */
  const arrive = (req: IncomingMessage): RequestMetaShape => {
    inc(fastLaneRequests, {})
    const meta = requestMetaOf(config, req.url ?? "/", req.socket.remoteAddress, req.headers as EdgeHeaders)
    requestMetas.set(req, meta)
    return meta
  }

  /** Runs a request's program in its own fiber, failures mapped to the envelope; a client that goes away interrupts it. */
  const fork = (res: ServerResponse, meta: RequestMetaShape, program: Effect.Effect<Reply, unknown, RequestMeta | RateLimiter | Authenticator>) => {
    const fiber = runForkWith(meta)(program.pipe(
      Effect.catchAllCause((cause): Effect.Effect<Reply, never, RequestMeta> =>
        Cause.isInterruptedOnly(cause) ? Effect.failCause(Cause.stripFailures(cause)) : Effect.map(failureError(cause, []), errorParts)
      ),
      Effect.tap((reply) => Effect.sync(() => answer(res, meta, reply)))
    ))
    // As the HttpApi handler does: a client that goes away interrupts the request.
    res.on("close", () => {
      if (!res.writableEnded) fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
    })
  }

  /** What follows the body: its scan for U+0000 and depth, then the route. */
  const afterBody = (route: Route, headers: EdgeHeaders) => (text: string): Effect.Effect<Reply, unknown, RequestMeta> => {
    const bad = bodyScanError(text)
    return bad ? Effect.fail(bad) : route(text, headers)
  }

  /** A request's whole program: admission, the body, the route. */
  const program = (req: IncomingMessage, meta: RequestMetaShape, route: Route) => {
    const url = req.url ?? "/"
    const headers = req.headers as EdgeHeaders
    // Combinators rather than Effect.gen: this runs for every request, and a generator's
    // steps cost more than the flatMaps they stand for (BENCH_ONLY=instructions).
    return admitRequest(config, req.method ?? "POST", url, headers, meta).pipe(
      Effect.flatMap((refused) => refused ? Effect.fail(refused) : readBody(req)),
      Effect.flatMap(afterBody(route, headers))
    )
  }

  const attestRoute: Route = (text, headers) =>
    Effect.flatMap(RequestMeta, (meta) => {
      // admitRequest authenticated the key and checked the attest scope before the body was read
      const principal = meta.principal !== undefined
        ? Effect.succeed(meta.principal)
        : auth.authenticate(bearerToken(headerOf(headers, "authorization")))
      return Effect.flatMap(principal, (principal) => {
        const payload = decodeAttest(text)
        return Either.isLeft(payload)
          ? Effect.fail(payload.left)
          : attestOne(attestor, quota, payload.right, principal)
      })
    })

  const verifyRoute: Route = (text, headers) => {
    const payload = decodeVerify(text)
    if (Either.isLeft(payload)) return Effect.fail(payload.left)
    return Effect.flatMap(auth.optionalKey(headerOf(headers, "authorization")), (key) =>
      Effect.map(
        verifyOne(repo, payload.right.hash_hex, key._tag === "Some" ? key.value.id : undefined),
        (body): Reply => ({ status: 200, body })
      ))
  }

  /** What an entry without a fiber hands its route: the decoded payload, and `done` to answer. */
  interface Decoded<A> {
    readonly payload: A
    readonly text: string
    readonly headers: EdgeHeaders
    readonly meta: RequestMetaShape
    readonly res: ServerResponse
    /** Answers, and counts the answer as given without a fiber. */
    readonly done: (reply: Reply) => void
  }

  /**
   * An entry without a fiber of its own: the steps of `program` over `route`, through
   * the same functions, called directly. The request meta; the admission decided at
   * once (`admitRequestNow`, with `authenticateNow` for a keyed route), else the fiber's
   * whole program; the body; `bodyScanError`; the payload's schema; then `then`. A step
   * that answers UNDECIDED has changed nothing, so the request goes on in a fiber from
   * that step and nothing is counted twice.
   */
  const withoutFiber = <A>(
    route: Route,
    decode: (text: string) => Either.Either<A, Errors.ValidationError>,
    authenticateNow: typeof auth.authenticateNow | undefined,
    then: (decoded: Decoded<A>) => void
  ): NodeHandler =>
  (req, res) => {
    const headers = req.headers as EdgeHeaders
    const meta = arrive(req)
    const now = clock.unsafeCurrentTimeMillis()
    const admitted = admitRequestNow(config, limiter, gates, req.method ?? "POST", req.url ?? "/", headers, meta, now, authenticateNow)
    if (admitted === UNDECIDED) return fork(res, meta, program(req, meta, route))
    const done = (reply: Reply) => {
      inc(fastLaneAnswersWithoutFiber, {})
      answer(res, meta, reply)
    }
    if (admitted !== undefined) return done(errorParts(admitted))
    readBodyThen(req, (text) => {
      if (text === undefined) return done(errorParts(INVALID_JSON()))
      const bad = bodyScanError(text)
      if (bad) return done(errorParts(bad))
      const payload = decode(text)
      if (Either.isLeft(payload)) return done(errorParts(payload.left))
      then({ payload: payload.right, text, headers, meta, res, done })
    })
  }

  /**
   * The callback for an outcome of a group (the group read, the group commit). It
   * runs inside the group's batch, before the group's other requests are resumed,
   * so it never throws: a failure, or a throw, becomes a defect in the request's own
   * fiber (logged, 500, as the fiber's orDie would make it); an interruption (the
   * server closing) gets no answer, as for a fiber the shutdown interrupts.
   */
  const fromGroup = <A>(res: ServerResponse, meta: RequestMetaShape, found: (a: A) => void) => (exit: Exit.Exit<A, unknown>) => {
    if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) return
    try {
      if (Exit.isSuccess(exit)) found(exit.value)
      else fork(res, meta, Effect.orDie(Effect.failCause(exit.cause)))
    } catch (e) {
      fork(res, meta, Effect.die(e))
    }
  }

  const findNow = repo.findByHashNow
  const findThen = repo.findByHashThen
  const claimNow = repo.liveClaimNow
  const claimThen = repo.liveClaimThen

  /**
   * POST /verify without a fiber. The key, if one is presented, from the key cache
   * (Authenticator's optionalKeyNow; a key not cached yet goes on in a fiber); the
   * lookup synchronous on SQLite's read-only connection (findByHashNow), else through
   * the group read's callback (findByHashThen: none per request; on Postgres none per
   * group either, PgDirect runs it with callbacks);
   * for a key, its own claim's source on the same connection (liveClaimNow), else
   * through a group read of claims (liveClaimThen). About half a verify's CPU was its
   * fiber and steps (README, Performance).
   */
  const verifyWithoutFiber = withoutFiber(verifyRoute, decodeVerify, undefined, ({ done, headers, meta, payload, res, text }) => {
    const key = auth.optionalKeyNow(headerOf(headers, "authorization"), meta.clientIp)
    if (key === UNDECIDED) return fork(res, meta, verifyRoute(text, headers))
    const hash = payload.hash_hex
    const keyId = Option.isSome(key) ? key.value.id : undefined
    const answerWith = (status: AttestationStatus | undefined, claim: { readonly source: string | null } | undefined): Reply => ({
      status: 200,
      body: verifyAnswer(hash, status, claim, clock.unsafeCurrentTimeMillis())
    })
    const found = (status: AttestationStatus | undefined) => {
      if (status === undefined || keyId === undefined) return done(answerWith(status, undefined))
      if (claimNow === undefined) return claimThen(keyId, status.seq, fromGroup(res, meta, (claim) => done(answerWith(status, claim))))
      const claim = claimNow(keyId, status.seq)
      if (claim !== UNDECIDED) return done(answerWith(status, claim))
      fork(res, meta, Effect.map(Effect.orDie(repo.liveClaimSource(keyId, status.seq)), (c) => answerWith(status, c)))
    }
    if (findNow === undefined) return findThen(hash, fromGroup(res, meta, found))
    let status: AttestationStatus | undefined | Undecided
    try {
      status = findNow(hash)
      if (status !== UNDECIDED) return found(status)
    } catch (e) {
      return fork(res, meta, Effect.die(e))
    }
    fork(res, meta, verifyRoute(text, headers))
  })

  /**
   * POST /attest without a fiber, for a key this instance has cached (admission's
   * authenticateNow), without a monthly quota (Quota's consumeNow), whose limit the
   * limiter decides now: attestOne's checks (`attestInputOf`), then the attest through
   * the group commit's callback (Attestor's attestThen: one fiber per group, none per
   * request). Otherwise the request goes on in a fiber from admission, or from attestOne.
   */
  const attestWithoutFiber = withoutFiber(attestRoute, decodeAttest, auth.authenticateNow, ({ done, headers, meta, payload, res, text }) => {
    // admitRequestNow authenticated the key and checked the attest scope before the body was read
    const principal = meta.principal
    if (principal === undefined) return fork(res, meta, attestRoute(text, headers))
    const input = attestInputOf(payload, principal)
    if (Either.isLeft(input)) return done(errorParts(input.left))
    if (quota.consumeNow(input.right.key, 1) === UNDECIDED) return fork(res, meta, attestOne(attestor, quota, payload, principal))
    attestor.attestThen(input.right, fromGroup(res, meta, ([result]) => done(attestReply(result!))))
  })

  const routes: FastRoutes = {
    "POST /attest": attestWithoutFiber,
    "POST /verify": verifyWithoutFiber
  }
  return routes
})
