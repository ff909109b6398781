/**
 * The one outbound HTTP layer: @effect/platform's HttpClient over node:http
 * (NodeHttpClient) for the TSA client, the OpenTimestamps calendars, the
 * Bitcoin header sources and the webhook dispatcher.
 *
 * `exchange` applies the policy every caller shares: a user agent (unless the
 * request sets its own), one timeout (Effect.timeout) over connect, headers and
 * body, no redirects followed, and a cap on the body read. A non-2xx status is
 * a reply like any other; the caller decides what it means.
 *
 * `layer` is the general client; `layerWithLookup(lookup)` the same client
 * whose agent resolves host names through `lookup` (the webhook dispatcher's
 * refuses non-public addresses, so the address checked is the address
 * connected to: no DNS-rebinding window between check and connect). Neither
 * sends trace headers.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Clock, Data, Duration, Effect, Layer, Stream } from "effect"
import type { LookupFunction } from "node:net"
import { concatBytes } from "../Domain/Bytes.js"

export const USER_AGENT = "attestd"

export class OutboundError extends Data.TaggedError("OutboundError")<{ readonly message: string }> {}

export interface Policy {
  readonly timeout: Duration.DurationInput
  readonly maxBytes: number
  /** "fail" (default): a longer body fails the call; "truncate": keep the first maxBytes and stop reading. */
  readonly overflow?: "fail" | "truncate"
  /**
   * Measure the timeout on the wall clock even where a TestClock is installed
   * (the TSA client and the calendars always have: a test that holds its
   * clock still must not hang on a dead server).
   */
  readonly wallClock?: boolean
}

export interface Reply {
  readonly status: number
  readonly body: Uint8Array
}

const liveClock = Clock.make()

/** The innermost message: node's socket error (ECONNREFUSED, the public-only refusal) rather than "Transport error". */
const describe = (e: unknown): string => {
  let cur: unknown = e
  while (typeof cur === "object" && cur !== null && "cause" in cur && cur.cause instanceof Error) cur = cur.cause
  return cur instanceof Error ? cur.message : String(cur)
}

const readBody = (stream: Stream.Stream<Uint8Array, unknown>, declared: string | undefined, policy: Policy) =>
  Effect.gen(function*() {
    const cap = policy.maxBytes
    const truncate = policy.overflow === "truncate"
    if (!truncate && declared !== undefined && Number(declared) > cap) {
      return yield* new OutboundError({ message: `response too large (${declared} bytes > ${cap})` })
    }
    const chunks: Array<Uint8Array> = []
    let total = 0
    yield* Stream.runForEachWhile(stream, (chunk) =>
      Effect.suspend(() => {
        if (total + chunk.byteLength <= cap) {
          chunks.push(chunk)
          total += chunk.byteLength
          return Effect.succeed(true)
        }
        if (!truncate) return Effect.fail(new OutboundError({ message: `response too large (> ${cap} bytes)` }))
        chunks.push(chunk.subarray(0, cap - total))
        total = cap
        return Effect.succeed(false)
      }))
    return concatBytes(...chunks)
  })

/**
 * `base` with `suffix` appended to its path: a query the operator configured (an API
 * token, say) stays at the end, where the server looks for it.
 */
export const appendPath = (base: string, suffix: string): string => {
  try {
    const url = new URL(base)
    url.pathname = url.pathname.replace(/\/+$/, "") + suffix
    return url.search === "" && url.hash === "" && !base.includes("?") ? base.replace(/\/+$/, "") + suffix : url.toString()
  } catch {
    return base.replace(/\/+$/, "") + suffix
  }
}

/** One request under `policy`: the status and the body read up to the cap. */
export const exchange = (
  request: HttpClientRequest.HttpClientRequest,
  policy: Policy
): Effect.Effect<Reply, OutboundError, HttpClient.HttpClient> => {
  const timeoutMs = Duration.toMillis(policy.timeout)
  const bounded = Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const req = request.headers["user-agent"] === undefined ? HttpClientRequest.setHeader(request, "user-agent", USER_AGENT) : request
    const res = yield* client.execute(req)
    const declared = res.headers["content-length"]
    // A body that cannot exceed the cap (none, or a declared length within it: Node's parser
    // reads no further) is read whole, which costs far less than reading through the capped
    // stream (~0.5 ms of CPU per exchange here, most of a webhook delivery's)
    const body = res.status === 204 || res.status === 304
      ? new Uint8Array(0)
      : declared !== undefined && Number(declared) <= policy.maxBytes
      ? new Uint8Array(yield* res.arrayBuffer)
      : yield* readBody(res.stream, declared, policy)
    return { status: res.status, body }
  }).pipe(
    Effect.scoped,
    Effect.mapError((e) => (e instanceof OutboundError ? e : new OutboundError({ message: describe(e) }))),
    Effect.timeoutFail({ duration: timeoutMs, onTimeout: () => new OutboundError({ message: `timed out after ${timeoutMs} ms` }) })
  )
  return policy.wallClock === true ? Effect.withClock(bounded, liveClock) : bounded
}

/**
 * The client without HttpClient's own span per exchange, and so without the trace headers
 * (`b3`, `traceparent`) it would send: webhook receivers, TSAs and calendars are other
 * parties, with no use for our trace ids. The callers' own spans (TsaClient.timestamp, …)
 * stay. (The span also cost ~0.1 ms of CPU per exchange.)
 */
const untraced = (client: Layer.Layer<HttpClient.HttpClient>): Layer.Layer<HttpClient.HttpClient> =>
  Layer.effect(HttpClient.HttpClient, Effect.map(HttpClient.HttpClient, (c) => HttpClient.withTracerDisabledWhen(c, () => true))).pipe(
    Layer.provide(client)
  )

/**
 * The general outbound client: its own agent, closed with the layer. The agent is Node's
 * default, which does not keep connections alive: every exchange opens its own (measured on
 * webhooks), and no request can meet a pooled socket its server has closed.
 */
export const layer: Layer.Layer<HttpClient.HttpClient> = untraced(NodeHttpClient.layer)

/**
 * The same client with its agent resolving names through `lookup` (webhooks in
 * production pass one that refuses non-public addresses).
 */
export const layerWithLookup = (lookup: LookupFunction): Layer.Layer<HttpClient.HttpClient> =>
  untraced(NodeHttpClient.layerWithoutAgent.pipe(Layer.provide(NodeHttpClient.makeAgentLayer({ lookup }))))
