/**
 * The route table the edge consults before the router runs: for each endpoint
 * of the HttpApi, its operation id, whether it sits behind the bearer-key
 * middleware, and the scopes its OpenAPI description requires. With it the
 * edge authenticates and checks scopes before it reads a body, and knows a
 * route's body limit and the media types its body may have.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
import { Context, Option } from "effect"
import { Api } from "../Api.js"
import { Authentication, ConfiguredAccess } from "../Auth/Api.js"
import { isScope, type Scope } from "../Auth/Domain.js"
import type { AppConfigShape } from "../Platform/Config.js"
import { stripV1 } from "../Http/Paths.js"

export interface Route {
  /** The OpenAPI operationId: `group.endpoint`. */
  readonly id: string
  readonly method: string
  /** The path template, e.g. /derived-lists/:list_id/match. */
  readonly path: string
  readonly pattern: RegExp
  readonly params: ReadonlyArray<string>
  /** Behind the bearer middleware (an API key or share token is required). */
  readonly keyed: boolean
  /** Alternatives, any one of which suffices; undefined when the handler decides alone. */
  readonly scopes: ReadonlyArray<Scope> | undefined
  /** Public or keyed by configuration (ConfiguredAccess); keyed, it also takes HTTP Basic. */
  readonly keyedWhen: ((config: AppConfigShape) => boolean) | undefined
  /**
   * The media types of its body other than JSON (a DER request): a body of one of them
   * reaches the handler as bytes, and on such a route any other type but JSON is 415.
   */
  readonly binaryTypes: ReadonlyArray<string>
}

/** Whether a request to `route` must present a key under `config`. */
export const isKeyed = (route: Route, config: AppConfigShape): boolean =>
  route.keyed || (route.keyedWhen !== undefined && route.keyedWhen(config))

export interface RouteMatch {
  readonly route: Route
  readonly params: Readonly<Record<string, string>>
}

const escape = (s: string) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&")

const compile = (path: string): { pattern: RegExp; params: Array<string> } => {
  const params: Array<string> = []
  const source = path.split("/").map((segment) => {
    if (!segment.startsWith(":")) return escape(segment)
    params.push(segment.slice(1))
    return "([^/]+)"
  }).join("/")
  return { pattern: new RegExp("^" + source + "/?$"), params }
}

const scopesOf = (annotations: Context.Context<never>): ReadonlyArray<Scope> | undefined => {
  const override = Option.getOrUndefined(Context.getOption(annotations, OpenApi.Override)) as
    | { readonly "x-required-scopes"?: ReadonlyArray<string> }
    | undefined
  const scopes = override?.["x-required-scopes"]?.filter(isScope)
  return scopes && scopes.length > 0 ? scopes : undefined
}

/** Every endpoint of the API, routes with fewer parameters first (as the router prefers literal segments). */
export const apiRoutes = (): ReadonlyArray<Route> => {
  const routes: Array<Route> = []
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, group, mergedAnnotations, middleware, payloads }) => {
      routes.push({
        id: `${group.identifier}.${endpoint.name}`,
        method: endpoint.method,
        path: endpoint.path,
        ...compile(endpoint.path),
        keyed: [...middleware].some((m) => m.key === Authentication.key),
        scopes: scopesOf(mergedAnnotations),
        keyedWhen: Option.getOrUndefined(Context.getOption(mergedAnnotations, ConfiguredAccess)),
        binaryTypes: [...payloads.keys()].filter((type) => type !== "application/json")
      })
    }
  })
  return routes.sort((a, b) => a.params.length - b.params.length)
}

const decodeParam = (raw: string): string => {
  try {
    return decodeURIComponent(raw)
  } catch {
    return raw
  }
}

/** The endpoint a request reaches (path without /v1 and query), if any. */
export const matchRoute = (routes: ReadonlyArray<Route>, method: string, path: string): RouteMatch | undefined => {
  for (const route of routes) {
    if (route.method !== method) continue
    const m = route.pattern.exec(path)
    if (!m) continue
    const params: Record<string, string> = {}
    route.params.forEach((name, i) => {
      params[name] = decodeParam(m[i + 1] ?? "")
    })
    return { route, params }
  }
  return undefined
}

/**
 * The route template a request is counted and logged under (the `/v1` prefix kept when
 * given; never the raw path, which carries hashes and ids), or "unmatched". `match` is
 * the edge's own match of the request, so a routed request is looked up once; only a
 * request it did not match (another method on the path, the documents) is looked up here.
 */
export const routeTemplate = (
  routes: ReadonlyArray<Route>,
  method: string,
  url: string,
  match: RouteMatch | undefined
): string => {
  const q = url.indexOf("?")
  const raw = q < 0 ? url : url.slice(0, q)
  const path = stripV1(raw)
  const prefix = path !== raw ? "/v1" : ""
  if (match !== undefined) return prefix + match.route.path
  if (path === "/openapi.json") return prefix + path
  if (path === "/docs" || path.startsWith("/docs/")) return "/docs"
  const get = method === "HEAD" ? matchRoute(routes, "GET", path) : undefined
  const hit = get?.route ?? routes.find((route) => route.pattern.test(path))
  return hit ? prefix + hit.path : "unmatched"
}
