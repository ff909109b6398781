/**
 * The Effect client: `HttpApiClient.make(Api)` over the very contract the
 * server serves (src/Api.ts), so a change of the contract breaks callers at
 * compile time. Portable (fetch; no node:*, no server modules).
 *
 * Errors arrive typed: the envelope `{error, code, message, details}` decodes
 * to the error classes of src/Domain/Errors.ts (`NotFound`, `ValidationError`,
 * `AuthError`, …); anything else is an `HttpClientError` or a `ParseError`.
 * No retries by default: compose one with `transformClient`
 * (e.g. `HttpClient.retryTransient({ times: 3 })`) on the operations where a
 * repeat is safe (attest and every read are; creating tokens, webhooks and
 * lists is not).
 */
import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import { Api } from "../Api.js"

export interface EffectClientOptions {
  /** The instance, e.g. `https://attest.example.org`; calls go to `<baseUrl>/v1/…`. */
  readonly baseUrl: string
  /** Sent as `Authorization: Bearer <apiKey>` (an API key or a share token). */
  readonly apiKey?: string | undefined
  /** Applied after the bearer header: retries, timeouts, tracing, extra headers. */
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
      return options.transformClient ? options.transformClient(authed) : authed
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
