/**
 * The Effect client: `HttpApiClient.make(Api)` over the very contract the
 * server serves (src/Api.ts), so a change of the contract breaks callers at
 * compile time. Portable (fetch; no node:*, no server modules).
 *
 * Errors arrive typed: the envelope `{error, code, message, details}` decodes
 * to the error classes of src/Domain/Errors.ts (`NotFound`, `ValidationError`,
 * `AuthError`, …); anything else is an `HttpClientError` or a `ParseError`.
 * Retries as the Promise client does (spec §7): only 429, 5xx and transport
 * errors, exponential backoff with full jitter, honouring Retry-After, bounded
 * attempts and time, every attempt with the same X-Request-Id; only on the
 * operations a repeat cannot harm (every GET, DELETE and PUT; attest, batch
 * attest, verify, batch verify, scan, tag query, derived-list match). Not
 * retried: metadata PATCH and the creation of share tokens, webhooks and lists.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Clock, Context, Effect, Either, Layer, Random } from "effect"
import { Api } from "../Api.js"
import { bytesToHex } from "../Domain/Bytes.js"
import { parseRetryAfter, type RetryOptions } from "./Client.js"

const SAFE_POSTS = /^\/v1\/(attest|attest\/batch|verify|verify\/batch|scan|tags\/query|derived-lists\/[^/]+\/match)$/

const repeatable = (request: HttpClientRequest.HttpClientRequest): boolean => {
  if (request.method === "GET" || request.method === "HEAD" || request.method === "DELETE" || request.method === "PUT") return true
  if (request.method !== "POST") return false
  try {
    return SAFE_POSTS.test(new URL(request.url).pathname)
  } catch {
    return false
  }
}

const newRequestId = (): string =>
  bytesToHex(crypto.getRandomValues(new Uint8Array(16)))

/** The retry policy of spec §7 as an `HttpClient` transformation (what the `retry` option configures). */
export const withRetries = (options: RetryOptions = {}) => (client: HttpClient.HttpClient): HttpClient.HttpClient => {
  const maxAttempts = Math.max(1, options.maxAttempts ?? 5)
  const maxElapsedMs = options.maxElapsedMs ?? 30_000
  const baseDelayMs = options.baseDelayMs ?? 200
  const maxDelayMs = options.maxDelayMs ?? 10_000
  const withId = HttpClient.mapRequest(client, (r) => r.headers["x-request-id"] ? r : HttpClientRequest.setHeader(r, "x-request-id", newRequestId()))
  return HttpClient.transform(withId, (execute, request) => {
    if (!repeatable(request)) return execute
    const attempt = (n: number, started: number): Effect.Effect<HttpClientResponse.HttpClientResponse, HttpClientError.HttpClientError> =>
      Effect.flatMap(Effect.either(execute), (result) =>
        Effect.gen(function*() {
          const response = Either.isRight(result) ? result.right : null
          const retryable = response === null
            ? Either.isLeft(result) && result.left._tag === "RequestError" && result.left.reason === "Transport"
            : response.status === 429 || response.status >= 500
          if (retryable && n < maxAttempts) {
            const now = yield* Clock.currentTimeMillis
            const after = response === null ? null : parseRetryAfter(response.headers["retry-after"] ?? null, now)
            const backoff = Math.floor((yield* Random.next) * Math.min(maxDelayMs, baseDelayMs * 2 ** (n - 1)))
            const delayMs = after !== null ? Math.max(after, backoff) : backoff
            if (now - started + delayMs <= maxElapsedMs) {
              options.onRetry?.({ attempt: n, status: response?.status ?? null, delayMs, requestId: request.headers["x-request-id"] ?? "" })
              if (response !== null) yield* Effect.ignore(response.arrayBuffer)
              yield* Effect.sleep(delayMs)
              return yield* attempt(n + 1, started)
            }
          }
          return yield* result
        }))
    return Effect.flatMap(Clock.currentTimeMillis, (started) => attempt(1, started))
  })
}

export interface EffectClientOptions {
  /** The instance, e.g. `https://attest.example.org`; calls go to `<baseUrl>/v1/…`. */
  readonly baseUrl: string
  /** Sent as `Authorization: Bearer <apiKey>` (an API key or a share token). */
  readonly apiKey?: string | undefined
  /** Retries on 429/5xx of repeatable operations (default on, as in the Promise client); false: none. */
  readonly retry?: RetryOptions | false | undefined
  /** Applied after the bearer header and the retries: timeouts, tracing, extra headers. */
  readonly transformClient?: ((client: HttpClient.HttpClient) => HttpClient.HttpClient) | undefined
}

/** The typed client; needs an `HttpClient` (e.g. `FetchHttpClient.layer`). */
export const makeEffectClient = (options: EffectClientOptions) =>
  HttpApiClient.make(Api, {
    baseUrl: `${options.baseUrl.replace(/\/+$/, "")}/v1`,
    transformClient: (client) => {
      const authed = options.apiKey === undefined
        ? client
        : HttpClient.mapRequest(client, HttpClientRequest.bearerToken(options.apiKey))
      const retried = options.retry === false ? authed : withRetries(options.retry ?? {})(authed)
      return options.transformClient ? options.transformClient(retried) : retried
    }
  })

export type EffectClient = Effect.Effect.Success<ReturnType<typeof makeEffectClient>>

/** The client as a service: `AttestdClient.layer({ baseUrl, apiKey })` (fetch included). */
export class AttestdClient extends Context.Tag("attestd/AttestdClient")<AttestdClient, EffectClient>() {
  /** Over the `HttpClient` the caller provides. */
  static readonly layerWithoutHttpClient = (options: EffectClientOptions) => Layer.effect(AttestdClient, makeEffectClient(options))
  /** Over the global fetch. */
  static readonly layer = (options: EffectClientOptions) =>
    AttestdClient.layerWithoutHttpClient(options).pipe(Layer.provide(FetchHttpClient.layer))
}
