/**
 * One observer at the node:http level sees every request, fast lane or not:
 * it records the HTTP metrics by route template (never the raw path, which
 * would carry hashes and ids) and writes the access log line: request id,
 * method, route, status, duration and the id of the API key — never the key,
 * a token, or a body.
 */
import { HttpApi } from "@effect/platform"
import { Effect, LogLevel } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Api } from "../Api.js"
import { directLogger } from "../Platform/Logging.js"
import { recordHttp } from "../Platform/Metrics.js"
import { stripV1 } from "../Http/Paths.js"
import type { RequestMetaShape } from "../Auth/RequestMeta.js"

/** The meta of each request in flight, written by the edge and the fast lane. */
export const requestMetas = new WeakMap<IncomingMessage, RequestMetaShape>()

interface Template {
  readonly method: string
  readonly template: string
  readonly pattern: RegExp
}

let templates: ReadonlyArray<Template> | undefined

const allTemplates = (): ReadonlyArray<Template> => {
  if (templates) return templates
  const out: Array<Template> = []
  const add = (method: string, template: string) =>
    out.push({
      method,
      template,
      pattern: new RegExp("^" + template.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\/:[^/]+/g, "/[^/]+") + "/?$")
    })
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => add(endpoint.method, endpoint.path)
  })
  // Literal routes before parameterised ones (/keys/current before /keys/:id).
  out.sort((a, b) => (a.template.includes(":") ? 1 : 0) - (b.template.includes(":") ? 1 : 0))
  add("GET", "/openapi.json")
  templates = out
  return out
}

/** Templates of literal routes (no path parameter) by "METHOD url": a bounded set, looked up without regexes. */
const literalTemplates = new Map<string, string>()

/** The route template of a request (`/v1` prefix kept when given), or "unmatched". */
export const routeTemplateOf = (method: string, url: string): string => {
  const known = literalTemplates.get(`${method} ${url}`)
  if (known !== undefined) return known
  const template = matchTemplate(method, url)
  if (template !== "unmatched" && !template.includes(":") && !url.includes("?") && literalTemplates.size < 1_000) {
    literalTemplates.set(`${method} ${url}`, template)
  }
  return template
}

const matchTemplate = (method: string, url: string): string => {
  const raw = url.split("?")[0] ?? url
  const path = stripV1(raw)
  const prefix = path !== raw ? "/v1" : ""
  if (/^\/docs(\/.*)?$/.test(path)) return "/docs"
  const m = method === "HEAD" ? "GET" : method
  const hit = allTemplates().find((t) => t.method === m && t.pattern.test(path)) ??
    allTemplates().find((t) => t.pattern.test(path))
  return hit ? prefix + hit.template : "unmatched"
}

/** The observer the server calls first for every request (metrics and the access log). */
export const accessLogObserver: Effect.Effect<(req: IncomingMessage, res: ServerResponse) => void> = Effect.gen(function*() {
  const runtime = yield* Effect.runtime<never>()
  const log = directLogger(runtime)
  return (req: IncomingMessage, res: ServerResponse) => {
    const start = performance.now()
    const finish = (aborted: boolean) => {
      const seconds = (performance.now() - start) / 1000
      const method = req.method ?? "GET"
      const route = routeTemplateOf(method, req.url ?? "/")
      const status = aborted && !res.headersSent ? 499 : res.statusCode
      recordHttp(method, route, status, seconds)
      const meta = requestMetas.get(req)
      // Dropped as soon as it is read rather than left for the WeakMap to clear: under a
      // verify load the heap then grows half as fast between full collections (--trace-gc:
      // ~7 → ~3.5 MB/s), and a scavenge costs less.
      requestMetas.delete(req)
      const requestId = String(res.getHeader("x-request-id") ?? meta?.requestId ?? "-")
      const annotations: Record<string, unknown> = {
        request_id: requestId,
        method,
        route,
        status,
        duration_ms: Math.round(seconds * 1e6) / 1e3
      }
      if (meta?.keyId !== undefined) annotations.key_id = meta.keyId
      if (meta?.clientIp) annotations.client_ip = meta.clientIp
      log(LogLevel.Info, "request", annotations)
    }
    // 'close' follows 'finish' on every response, and comes alone when the connection went first
    res.on("close", () => finish(!res.writableFinished))
  }
})
