/**
 * One observer at the node:http level sees every request:
 * it records the HTTP metrics by route template (never the raw path, which
 * would carry hashes and ids) and writes the access log line: request id,
 * method, route, status, duration and the id of the API key — never the key,
 * a token, or a body.
 */
import { Effect, LogLevel } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { directLogger } from "../Platform/Logging.js"
import { type HttpLabels, httpLabels, recordHttpLabelled } from "../Platform/Metrics.js"
import { apiRoutes, routeTemplate } from "./Routes.js"
import type { RequestMetaShape } from "../Auth/RequestMeta.js"

/** The observer the server calls first for every request (metrics and the access log). */
export const accessLogObserver: Effect.Effect<(req: IncomingMessage, res: ServerResponse, meta: RequestMetaShape) => void> = Effect.gen(function*() {
  const runtime = yield* Effect.runtime<never>()
  const log = directLogger(runtime)
  // for a request the edge did not see (the server starting or stopping)
  const routes = apiRoutes()
  // The label arrays of each (method, route, status) seen, kept for this server (a bounded set:
  // route templates and statuses), so the metrics registry finds its entries by the same array.
  const labelsSeen = new Map<string, HttpLabels>()
  const labelsOf = (method: string, route: string, status: number): HttpLabels => {
    const key = `${method} ${route} ${status}`
    let found = labelsSeen.get(key)
    if (found === undefined) {
      if (labelsSeen.size >= 10_000) labelsSeen.clear()
      labelsSeen.set(key, found = httpLabels(method, route, status))
    }
    return found
  }
  return (req: IncomingMessage, res: ServerResponse, meta: RequestMetaShape) => {
    const start = performance.now()
    const finish = (aborted: boolean) => {
      const seconds = (performance.now() - start) / 1000
      const method = req.method ?? "GET"
      // the edge matched the route once and left its template on the meta
      const route = meta.route ?? routeTemplate(routes, method, meta.target, undefined)
      const status = aborted && !res.headersSent ? 499 : res.statusCode
      recordHttpLabelled(labelsOf(method, route, status), seconds)
      const requestId = String(res.getHeader("x-request-id") ?? meta.requestId)
      const annotations: Record<string, unknown> = {
        request_id: requestId,
        method,
        route,
        status,
        duration_ms: Math.round(seconds * 1e6) / 1e3
      }
      if (meta.keyId !== undefined) annotations.key_id = meta.keyId
      if (meta.clientIp) annotations.client_ip = meta.clientIp
      log(LogLevel.Info, "request", annotations)
    }
    // 'close' follows 'finish' on every response, and comes alone when the connection went first
    res.on("close", () => finish(!res.writableFinished))
  }
})
