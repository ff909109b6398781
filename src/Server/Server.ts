/**
 * The node:http server, created here with one request listener that
 * dispatches each request explicitly:
 *
 * 1. the arrival (Edge.ts) keeps the request's meta and takes /v1 off its
 *    target; the observer (metrics and access log, AccessLog.ts) and the
 *    drainer (Drain.ts) see every request;
 * 2. every request goes to the handler that `NodeHttpServer.makeHandler`
 *    builds for the HttpApi app (with the edge middleware, Edge.ts).
 *
 * The layer is an ordinary `HttpServer` implementation: `HttpApiBuilder.serve`
 * calls its `serve`, which builds that handler. Nothing patches the server.
 */
import * as Etag from "@effect/platform/Etag"
import * as FileSystem from "@effect/platform/FileSystem"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpPlatform from "@effect/platform/HttpPlatform"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as Path from "@effect/platform/Path"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer, Option } from "effect"
import { createServer } from "node:http"
import { ServiceUnavailable } from "../Domain/Errors.js"
import { accessLogObserver } from "./AccessLog.js"
import type { Drainer } from "./Drain.js"
import { answerClientErrors, applyServerLimits, serverOptionsOf } from "./Connections.js"
import { afterRequestBody } from "./Linger.js"
import type { TrustProxy } from "../Platform/ClientAddress.js"
import type { ServerLimits } from "../Platform/Config.js"
import { arrival, edgeResponseHeaders } from "./Edge.js"
import { errorParts } from "../Http/Envelope.js"
import * as Metrics from "../Platform/Metrics.js"
import type { IncomingMessage, ServerResponse } from "node:http"

type NodeHandler = (req: IncomingMessage, res: ServerResponse) => void

export interface NodeServerOptions {
  readonly port: number
  readonly host: string
  readonly drainer: Drainer
  /** Timeouts and connection caps (Connections.ts); node's defaults when absent. */
  readonly limits?: { readonly server: ServerLimits; readonly trustProxy: TrustProxy } | undefined
}

/**
 * The services a request's fiber starts with: the platform's that a response may need
 * (files, etags). The edge reads its own once, as the server starts (Edge.ts makeEdge),
 * and HttpApiBuilder gives each handler its group's; a small context keeps each copy of
 * it on the way (every provide) cheap.
 */
const platformServices = Context.pick(HttpPlatform.HttpPlatform, Etag.Generator, FileSystem.FileSystem, Path.Path)

/**
 * Before the HttpApi handler is installed (listening, layers still starting) and after it
 * is removed. The request's body is not read: the answer lingers for it (Linger.ts).
 */
const unavailable = (req: IncomingMessage, res: ServerResponse, requestId: string) => {
  const { body, headers, status } = errorParts(new ServiceUnavailable({ message: "the server is starting or stopping; retry shortly" }))
  const text = JSON.stringify(body)
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
    "x-request-id": requestId,
    connection: "close"
  })
  if (req.complete) {
    res.end(text)
    return
  }
  res.write(text)
  afterRequestBody(req, () => res.end())
}

const make = (options: NodeServerOptions) =>
  Effect.gen(function*() {
    const observe = yield* accessLogObserver
    const arrive = yield* arrival
    const responseHeaders = yield* edgeResponseHeaders
    let api: NodeHandler | undefined
    const server = yield* Effect.acquireRelease(
      Effect.sync(() =>
        createServer(options.limits ? serverOptionsOf(options.limits.server) : {}, (req, res) => {
          const meta = arrive(req)
          observe(req, res, meta)
          options.drainer.track(req, res)
          if (api === undefined) unavailable(req, res, meta.requestId)
          else api(req, res)
        })
      ),
      (server) =>
        Effect.async<void>((resume) => {
          if (!server.listening) return resume(Effect.void)
          server.close(() => resume(Effect.void))
        })
    )
    options.drainer.server = server
    answerClientErrors(server, (status) => Metrics.inc(Metrics.httpRequests, { method: "-", route: "(unreadable)", status: String(status) }))
    if (options.limits) applyServerLimits(server, options.limits.server, options.limits.trustProxy)
    yield* Effect.async<void, HttpServerError.ServeError>((resume) => {
      const onError = (cause: Error) => resume(Effect.fail(new HttpServerError.ServeError({ cause })))
      server.once("error", onError)
      server.listen({ port: options.port, host: options.host }, () => {
        server.off("error", onError)
        resume(Effect.void)
      })
    })
    const address = server.address()
    return HttpServer.make({
      address: typeof address === "string" || address === null
        ? { _tag: "UnixAddress", path: String(address) }
        : { _tag: "TcpAddress", hostname: address.address === "::" ? "0.0.0.0" : address.address, port: address.port },
      serve: (app, middleware) =>
        Effect.gen(function*() {
          // every request's fiber starts with the edge's pre-response handler (Edge.ts)
          const handler = Effect.locally(
            middleware ? NodeHttpServer.makeHandler(app, middleware) : NodeHttpServer.makeHandler(app),
            HttpApp.currentPreResponseHandlers,
            Option.some(responseHeaders)
          )
          // The cast: serve is generic in the app's requirements, which the platform's
          // services must meet; a missing one fails every request.
          api = yield* Effect.mapInputContext(handler as Effect.Effect<NodeHandler>, (context: Context.Context<never>) => platformServices(context))
          yield* Effect.addFinalizer(() => Effect.sync(() => {
            api = undefined
          }))
        })
    })
  })

/** The HTTP server and the platform services the HttpApi handler needs. */
export const NodeServerLive = (options: NodeServerOptions) =>
  Layer.scoped(HttpServer.HttpServer, make(options)).pipe(Layer.provideMerge(NodeHttpServer.layerContext))
