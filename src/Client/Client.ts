/**
 * The Promise client for attestd (`attestd/client`). Portable: fetch and Web
 * Crypto only, no `node:*`, no `Buffer`, no server modules.
 *
 * Retries (spec §7): only on 429 and 5xx (and network errors), exponential
 * backoff with full jitter, honouring Retry-After, bounded by `maxAttempts`
 * and `maxElapsedMs`; every retry carries the same X-Request-Id. Retried
 * operations: all GETs, attest and batch attest (re-attesting is idempotent),
 * verify, batch verify, scan, tag query and derived-list match (read-only
 * POSTs), PUT tags (idempotent) and DELETEs. Not retried: metadata PATCH (it
 * carries If-Match; a retry after a lost reply could 412), share token, webhook
 * and derived-list creation (a retry could create a second one).
 */

export interface RetryOptions {
  /** Total attempts, the first included (default 5). */
  readonly maxAttempts?: number
  /** Give up retrying once this much time has passed since the first attempt (default 30 s). */
  readonly maxElapsedMs?: number
  /** Backoff base (default 200 ms): delay n is uniform in [0, min(cap, base·2^n)]. */
  readonly baseDelayMs?: number
  /** Backoff cap (default 10 s); a Retry-After longer than what is left of maxElapsedMs stops retrying. */
  readonly maxDelayMs?: number
  /** Observes each retry (for metrics and tests). */
  readonly onRetry?: (info: { attempt: number; status: number | null; delayMs: number; requestId: string }) => void
}

export interface ClientOptions {
  readonly baseUrl: string
  readonly apiKey?: string
  readonly fetch?: typeof globalThis.fetch
  readonly retry?: RetryOptions | false
  /** Injected for tests; defaults to setTimeout. */
  readonly sleep?: (ms: number) => Promise<void>
  readonly random?: () => number
}

/** Every failed call: the server's error envelope, or `HTTP <status>` when the body was not JSON. */
export class AttestdError extends Error {
  readonly status: number
  readonly code: string
  readonly details: unknown
  readonly requestId: string | null
  constructor(args: { status: number; code: string; message: string; details?: unknown; requestId: string | null }) {
    super(args.message)
    this.name = "AttestdError"
    this.status = args.status
    this.code = args.code
    this.details = args.details ?? []
    this.requestId = args.requestId
  }
}

import type * as HttpApi from "@effect/platform/HttpApi"
import type * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import type { Brand } from "effect"
import type { Api } from "../Api.js"
import { bytesToHex } from "../Domain/Bytes.js"

// Request and response types come from the server's contract (src/Api.ts; type-only
// imports, nothing of it is loaded at run time): a contract change breaks this client
// at compile time, as it breaks the Effect client.
type Groups = typeof Api extends HttpApi.HttpApi<infer _Id, infer G, infer _E, infer _R> ? G : never
/** The contract's group names (`attestations`, `lookup`, `claims`, …). */
export type GroupName = HttpApiGroup.HttpApiGroup.Name<Groups>
type EndpointOf<G extends GroupName, N extends string> = HttpApiEndpoint.HttpApiEndpoint.WithName<
  HttpApiGroup.HttpApiGroup.EndpointsWithName<Groups, G>,
  N
>
/** Brands of the contract (HashHex, …) are plain strings and numbers on the wire. */
type Plain<T> = T extends Brand.Brand<any> ? (T extends string ? string : T extends number ? number : T)
  : T extends Uint8Array ? T
  : T extends ReadonlyArray<infer U> ? ReadonlyArray<Plain<U>>
  : T extends object ? { readonly [K in keyof T]: Plain<T[K]> }
  : T
/** The JSON body operation `N` of group `G` answers with. */
export type ResponseOf<G extends GroupName, N extends string> = Plain<HttpApiEndpoint.HttpApiEndpoint.Success<EndpointOf<G, N>>>
/** The JSON body operation `N` of group `G` takes. */
export type RequestOf<G extends GroupName, N extends string> = Plain<HttpApiEndpoint.HttpApiEndpoint.Payload<EndpointOf<G, N>>>

export type AttestRequest = RequestOf<"attestations", "attest">

/** The filters and page of GET /v1/attestations: `from` inclusive, `to` exclusive (ISO 8601 instants). */
export interface ListAttestationsQuery {
  readonly limit?: number
  readonly cursor?: string
  readonly level?: "T0" | "T1" | "T2"
  readonly from?: string
  readonly to?: string
}
export type AttestationItem = ResponseOf<"attestations", "attest">

const newRequestId = (): string => {
  const b = crypto.getRandomValues(new Uint8Array(16))
  return bytesToHex(b)
}

export const parseRetryAfter = (v: string | null, now: number): number | null => {
  if (v === null) return null
  const s = Number(v.trim())
  if (Number.isFinite(s) && s >= 0) return s * 1000
  const at = Date.parse(v)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

const enc = encodeURIComponent

export const createClient = (options: ClientOptions) => {
  const base = options.baseUrl.replace(/\/+$/, "")
  const doFetch = options.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a))
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)))
  const random = options.random ?? Math.random
  const r = options.retry === false ? { maxAttempts: 1 } : options.retry ?? {}
  const maxAttempts = Math.max(1, r.maxAttempts ?? 5)
  const maxElapsedMs = r.maxElapsedMs ?? 30_000
  const baseDelayMs = r.baseDelayMs ?? 200
  const maxDelayMs = r.maxDelayMs ?? 10_000

  const request = async <A>(
    method: string,
    path: string,
    init: { body?: unknown; query?: Record<string, string | number | undefined>; retry: boolean; headers?: Record<string, string>; as?: "json" | "text" | "bytes" }
  ): Promise<A> => {
    const requestId = newRequestId()
    const qs = init.query
      ? Object.entries(init.query).filter(([, v]) => v !== undefined).map(([k, v]) => `${enc(k)}=${enc(String(v))}`).join("&")
      : ""
    const url = `${base}${path}${qs ? `?${qs}` : ""}`
    const headers: Record<string, string> = { "x-request-id": requestId, ...(init.headers ?? {}) }
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`
    if (init.body !== undefined) headers["content-type"] = "application/json"
    const started = Date.now()
    for (let attempt = 1;; attempt++) {
      let res: Response | null = null
      let netError: unknown = null
      try {
        res = await doFetch(url, { method, headers, ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}) })
      } catch (e) {
        netError = e
      }
      const retryable = res === null || res.status === 429 || res.status >= 500
      if (res !== null && res.ok) {
        if (init.as === "bytes") return new Uint8Array(await res.arrayBuffer()) as A
        const text = await res.text()
        if (init.as === "text") return text as A
        return (text === "" ? undefined : JSON.parse(text)) as A
      }
      if (init.retry && retryable && attempt < maxAttempts) {
        const elapsed = Date.now() - started
        const after = res === null ? null : parseRetryAfter(res.headers.get("retry-after"), Date.now())
        const backoff = Math.floor(random() * Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1)))
        const delay = after !== null ? Math.max(after, backoff) : backoff
        if (elapsed + delay <= maxElapsedMs) {
          r.onRetry?.({ attempt, status: res?.status ?? null, delayMs: delay, requestId })
          if (res !== null) await res.body?.cancel().catch(() => undefined)
          await sleep(delay)
          continue
        }
      }
      if (res === null) throw netError
      const text = await res.text()
      const rid = res.headers.get("x-request-id") ?? requestId
      let body: unknown = null
      try {
        body = JSON.parse(text)
      } catch {
        body = null
      }
      const e = body as { error?: unknown; code?: unknown; message?: unknown; details?: unknown } | null
      if (e && typeof e === "object" && e.error === true && typeof e.code === "string") {
        throw new AttestdError({ status: res.status, code: e.code, message: String(e.message ?? e.code), details: e.details, requestId: rid })
      }
      throw new AttestdError({ status: res.status, code: `HTTP_${res.status}`, message: `HTTP ${res.status}`, requestId: rid })
    }
  }
  const get = <A>(path: string) => request<A>("GET", path, { retry: true })
  const post = <A>(path: string, body: unknown, retry = true) => request<A>("POST", path, { body, retry })
  const del = <A>(path: string) => request<A>("DELETE", path, { retry: true })
  const id = (ref: string) => `/v1/attestation/${enc(ref)}`
  type R<G extends GroupName, N extends string> = ResponseOf<G, N>
  type B<G extends GroupName, N extends string> = RequestOf<G, N>

  return {
    /** Any call by path, for what the typed operations do not cover. */
    request,
    // info
    info: () => get<R<"info", "info">>("/v1/info"),
    healthz: () => get<R<"info", "healthz">>("/v1/healthz"),
    keys: () => get<R<"info", "keys">>("/v1/keys"),
    key: (keyId: string) => get<R<"info", "key">>(`/v1/keys/${enc(keyId)}`),
    stats: () => get<R<"info", "stats">>("/v1/stats"),
    tsaCertificates: () => get<R<"info", "tsaCertificates">>("/v1/tsa/certificates"),
    testVectors: () => get<R<"info", "testVectors">>("/test-vectors.json"),
    // attest and verify
    attest: (body: B<"attestations", "attest">) => post<R<"attestations", "attest">>("/v1/attest", body),
    attestBatch: (body: B<"attestations", "attestBatch">) => post<R<"attestations", "attestBatch">>("/v1/attest/batch", body),
    verify: (body: B<"verification", "verify">) => post<R<"verification", "verify">>("/v1/verify", body),
    verifyBatch: (body: B<"verification", "verifyBatch">) => post<R<"verification", "verifyBatch">>("/v1/verify/batch", body),
    // one attestation and its evidence
    lookup: (ref: string) => get<R<"lookup", "attestation">>(id(ref)),
    status: (ref: string) => get<R<"lookup", "status">>(`${id(ref)}/status`),
    signature: (ref: string) => get<R<"lookup", "signature">>(`${id(ref)}/signature`),
    evidence: (ref: string) => get<R<"lookup", "evidence">>(`${id(ref)}/evidence`),
    merkle: (ref: string) => get<R<"proofs", "merkle">>(`${id(ref)}/merkle`),
    tsa: (ref: string) => get<R<"proofs", "tsa">>(`${id(ref)}/tsa`),
    tsaDetails: (ref: string) => get<R<"proofs", "tsaDetails">>(`${id(ref)}/tsa/details`),
    ots: (ref: string) => get<R<"anchors", "ots">>(`${id(ref)}/ots`),
    /** The standard OpenTimestamps file (`.ots`) bytes. */
    otsProof: (ref: string) => request<Uint8Array>("GET", `${id(ref)}/ots/proof`, { retry: true, as: "bytes" }),
    // the caller's own attestations
    /** One page of the caller's own live claims, newest first (scope metadata:read); pass next_cursor back as `cursor` for the next. */
    listAttestations: (query: ListAttestationsQuery = {}) =>
      request<R<"attestationList", "list">>("GET", "/v1/attestations", { retry: true, query: { ...query } }),
    // the caller's claim: metadata and tags
    getMetadata: (ref: string) => get<R<"claims", "getMetadata">>(`${id(ref)}/metadata`),
    /** `ifMatch`: the etag last read; a concurrent change then fails with 412 instead of being overwritten. */
    patchMetadata: (ref: string, patch: B<"claims", "patchMetadata">, ifMatch?: string) =>
      request<R<"claims", "patchMetadata">>("PATCH", `${id(ref)}/metadata`, {
        body: patch,
        retry: false,
        ...(ifMatch !== undefined ? { headers: { "if-match": `"${ifMatch.replace(/^"|"$/g, "")}"` } } : {})
      }),
    deleteMetadata: (ref: string) => del<R<"claims", "deleteMetadata">>(`${id(ref)}/metadata`),
    getTags: (ref: string) => get<R<"tags", "getTags">>(`${id(ref)}/tags`),
    putTags: (ref: string, body: B<"tags", "putTags">) => request<R<"tags", "putTags">>("PUT", `${id(ref)}/tags`, { body, retry: true }),
    deleteTag: (ref: string, key: string) => del<R<"tags", "deleteTag">>(`${id(ref)}/tags/${enc(key)}`),
    queryTags: (body: B<"tags", "queryTags">) => post<R<"tags", "queryTags">>("/v1/tags/query", body),
    // share tokens
    createShareToken: (body: B<"shareTokens", "create">) => post<R<"shareTokens", "create">>("/v1/share-tokens", body, false),
    listShareTokens: () => get<R<"shareTokens", "list">>("/v1/share-tokens"),
    getShareToken: (tokenId: string) => get<R<"shareTokens", "get">>(`/v1/share-tokens/${enc(tokenId)}`),
    revokeShareToken: (tokenId: string) => del<R<"shareTokens", "revoke">>(`/v1/share-tokens/${enc(tokenId)}`),
    shareTokenAccessLog: (tokenId: string) => get<R<"shareTokens", "accessLog">>(`/v1/share-tokens/${enc(tokenId)}/access-log`),
    // webhooks
    registerWebhook: (body: B<"webhooks", "register">) => post<R<"webhooks", "register">>("/v1/webhook/register", body, false),
    listWebhooks: () => get<R<"webhooks", "list">>("/v1/webhooks"),
    removeWebhook: (webhookId: string) => del<R<"webhooks", "remove">>(`/v1/webhook/${enc(webhookId)}`),
    webhookDeliveries: (webhookId: string) => get<R<"webhooks", "deliveries">>(`/v1/webhook/${enc(webhookId)}/deliveries`),
    // inventory and derived lists
    scan: (body: B<"census", "scan">) => post<R<"census", "scan">>("/v1/scan", body),
    inventoryStats: () => get<R<"census", "inventoryStats">>("/v1/inventory/stats"),
    createDerivedList: (body: B<"census", "createList">) => post<R<"census", "createList">>("/v1/derived-lists", body, false),
    listDerivedLists: () => get<R<"census", "lists">>("/v1/derived-lists"),
    getDerivedList: (listId: string) => get<R<"census", "getList">>(`/v1/derived-lists/${enc(listId)}`),
    revokeDerivedList: (listId: string) => del<R<"census", "revokeList">>(`/v1/derived-lists/${enc(listId)}`),
    derivedListAccessLog: (listId: string) => get<R<"census", "listAccessLog">>(`/v1/derived-lists/${enc(listId)}/access-log`),
    /** Public: the body carries list_key and the values of deriveValues(list_key, yourHashes). */
    matchDerivedList: (listId: string, body: B<"derivedListsPublic", "match">) =>
      post<R<"derivedListsPublic", "match">>(`/v1/derived-lists/${enc(listId)}/match`, body),
    derivedListSignature: (listId: string) => get<R<"derivedListsPublic", "signature">>(`/v1/derived-lists/${enc(listId)}/signature`),
    // branding and the demo's simulated chain
    brand: (slug: string) => get<R<"brand", "brand">>(`/v1/brand/${enc(slug)}`),
    simulatedChainHeaders: () => get<R<"simulatedChain", "headers">>("/v1/simulated-chain/headers"),
    /** Hash (hex) of the simulated block at `height`. */
    simulatedBlockHash: (height: number) => request<string>("GET", `/v1/simulated-chain/block-height/${height}`, { retry: true, as: "text" }),
    /** The 80-byte header (hex) of a simulated block. */
    simulatedBlockHeader: (hash: string) => request<string>("GET", `/v1/simulated-chain/block/${enc(hash)}/header`, { retry: true, as: "text" })
  }
}

export type AttestdClient = ReturnType<typeof createClient>

/** SHA-256 of a string per spec §1.9: UTF-8, no BOM, no newline added, no normalisation. */
export const hashString = async (s: string): Promise<string> =>
  bytesToHex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s))))

/** HMAC-SHA256(key, value) as hex, for low-entropy values (spec §1.8). */
export const hmacDigest = async (key: Uint8Array | string, value: Uint8Array | string): Promise<string> => {
  const k = typeof key === "string" ? new TextEncoder().encode(key) : key
  const v = typeof value === "string" ? new TextEncoder().encode(value) : value
  const ck = await crypto.subtle.importKey("raw", k as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  return bytesToHex(new Uint8Array(await crypto.subtle.sign("HMAC", ck, v as Uint8Array<ArrayBuffer>)))
}
