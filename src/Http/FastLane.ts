/**
 * A fast lane for the two hottest routes, POST /v1/attest and public POST
 * /v1/verify (and their aliases). Same schemas, same handlers (attestOne,
 * verifyOne), same authentication and envelope as the HttpApi routes — only
 * the router, the middleware chain and response encoding are skipped, which
 * cost about 100 µs of CPU per request here (README, benchmarks). Anything
 * unusual (another route, chunked or oversized bodies, verify with a key)
 * takes the full stack. The public limit is charged here as at the edge.
 */
import { Cause, Effect, Exit, Layer, ParseResult, Runtime, Schema } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { AttestPayload, VerifyPayload } from "../Attestations/Api.js"
import { Attestor } from "../Attestations/Attestor.js"
import { attestOne, verifyOne } from "../Attestations/Http.js"
import { AttestationRepo } from "../Attestations/Repo.js"
import { CurrentPrincipal } from "../Auth/Api.js"
import { clientAddressOf } from "../Auth/ClientAddress.js"
import { Authenticator } from "../Auth/Http.js"
import { Quota } from "../Auth/Quota.js"
import { chargePublic } from "../Auth/PublicLimit.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import * as Errors from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { bodyScanError, INVALID_JSON, MAX_BODY_BYTES, requestIdOf, stripV1, validationErrorFromIssues } from "./Edge.js"
import { errorParts, rateLimitHeaders } from "./Envelope.js"
import type { Drainer } from "./Drain.js"
import { RequestMeta, type RequestMetaShape } from "./RequestMeta.js"
import { requestMetas } from "./AccessLog.js"

type Handler = (req: IncomingMessage, res: ServerResponse) => boolean

export interface FastLaneHolder {
  handle: Handler | undefined
  /** Sees every request first (metrics and the access log); set by AccessLogLive. */
  observe?: ((req: IncomingMessage, res: ServerResponse) => void) | undefined
}

export const makeFastLaneHolder = (): FastLaneHolder => ({ handle: undefined })

/** A node:http server whose request listeners first offer each request to the fast lane. */
export const serverWithFastLane = (holder: FastLaneHolder, drainer?: Drainer) => (): Server => {
  const server = createServer()
  if (drainer) drainer.server = server
  const wrappers = new Map<unknown, (...args: Array<any>) => void>()
  const on = server.on.bind(server)
  const off = server.off.bind(server)
  server.on = ((event: string, listener: (...args: Array<any>) => void) => {
    if (event !== "request") return on(event, listener)
    const wrapped = (req: IncomingMessage, res: ServerResponse) => {
      holder.observe?.(req, res)
      drainer?.track(req, res)
      if (!holder.handle?.(req, res)) listener(req, res)
    }
    wrappers.set(listener, wrapped)
    return on(event, wrapped)
  }) as typeof server.on
  server.off = ((event: string, listener: (...args: Array<any>) => void) =>
    off(event, wrappers.get(listener) ?? listener)) as typeof server.off
  return server
}

const decode = <A, I>(schema: Schema.Schema<A, I>, json: unknown) =>
  Effect.mapError(
    Schema.decodeUnknown(schema)(json),
    (e) => validationErrorFromIssues(ParseResult.ArrayFormatter.formatErrorSync(e))
  )

const parseJson = (text: string) => {
  const bad = bodyScanError(text)
  return bad ? Effect.fail(bad) : Effect.try({ try: () => (text === "" ? null : JSON.parse(text)) as unknown, catch: () => INVALID_JSON() })
}

export const FastLaneLive = (holder: FastLaneHolder) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const config = yield* AppConfig
    const auth = yield* Authenticator
    const attestor = yield* Attestor
    const quota = yield* Quota
    const repo = yield* AttestationRepo
    const limiter = yield* RateLimiter
    const runtime = yield* Effect.runtime<never>()
    const run = Runtime.runCallback(runtime)

    const respond = (res: ServerResponse, requestId: string, meta: RequestMetaShape, exit: Exit.Exit<{ status: number; body: unknown }, unknown>) => {
      let status: number
      let body: unknown
      const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": requestId }
      if (Exit.isSuccess(exit)) {
        status = exit.value.status
        body = exit.value.body
      } else {
        const failure = Cause.failureOption(exit.cause)
        const e = failure._tag === "Some" && Errors.isApiError(failure.value)
          ? failure.value
          : new Errors.InternalError({ message: "internal error; quote the X-Request-Id when reporting it" })
        if (failure._tag === "None" || !Errors.isApiError(failure.value)) {
          run(Effect.logError("request failed", exit.cause).pipe(Effect.annotateLogs({ request_id: requestId, path: meta.path })))
        }
        const parts = errorParts(e)
        status = parts.status
        body = parts.body
        Object.assign(headers, parts.headers)
      }
      if (meta.rateLimit && headers["x-ratelimit-limit"] === undefined) Object.assign(headers, rateLimitHeaders(meta.rateLimit))
      const text = JSON.stringify(body)
      headers["content-length"] = String(Buffer.byteLength(text))
      res.writeHead(status, headers)
      res.end(text)
    }

    holder.handle = (req, res) => {
      if (req.method !== "POST") return false
      const url = req.url ?? ""
      const q = url.indexOf("?")
      const path = stripV1(q < 0 ? url : url.slice(0, q))
      if (path !== "/attest" && path !== "/verify") return false
      const authorization = req.headers.authorization
      if (path === "/verify" && authorization !== undefined) return false
      const length = req.headers["content-length"]
      if (length === undefined || !(Number(length) <= MAX_BODY_BYTES)) return false

      const requestId = requestIdOf(req.headers["x-request-id"] as string | undefined)
      const meta: RequestMetaShape = {
        requestId,
        clientIp: clientAddressOf(req.socket.remoteAddress, req.headers["x-forwarded-for"] as string | undefined, config.trustProxy),
        path,
        rateLimit: undefined
      }
      requestMetas.set(req, meta)
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        const handled: Effect.Effect<{ status: number; body: unknown }, unknown> = path === "/verify"
          ? Effect.flatMap(Effect.flatMap(parseJson(text), (json) => decode(VerifyPayload, json)), (payload) =>
            Effect.map(verifyOne(repo, payload.hash_hex, undefined), (body) => ({ status: 200, body })))
          : Effect.gen(function*() {
            const principal = yield* auth.authenticate((authorization ?? "").slice(7).trim())
            const payload = yield* Effect.flatMap(parseJson(text), (json) => decode(AttestPayload, json))
            return yield* Effect.provideService(attestOne(attestor, quota, payload), CurrentPrincipal, principal)
          })
        // As at the edge (chargedAtEdge): public verify, and attest without a bearer credential.
        const program = path === "/verify" || !(authorization ?? "").startsWith("Bearer ")
          ? Effect.zipRight(chargePublic(config, limiter, meta), handled)
          : handled
        run(Effect.provideService(program, RequestMeta, meta), { onExit: (exit) => respond(res, requestId, meta, exit) })
      })
      req.on("error", () => res.destroy())
      return true
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => {
      holder.handle = undefined
    }))
  }))
