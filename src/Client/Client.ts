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

import type { AttestBatchPayload, AttestBatchResponse, VerifyBatchPayload } from "../Attestations/Api.js"

type Json = Record<string, unknown>

export interface AttestRequest {
  readonly hash_hex: string
  readonly source?: string | null
  readonly extra_data?: Json | null
  readonly client_encrypted?: boolean
}
export interface AttestationItem {
  readonly id: string
  readonly hash_hex: string
  readonly timestamp: string
  readonly signature: string
  readonly signing_key_id: string
  readonly format_version: number
  readonly status: "created" | "existing"
  readonly etag: string
  readonly claim_id: number
  readonly source: string | null
  readonly extra_data: Json | null
  readonly client_encrypted: boolean
}

const newRequestId = (): string => {
  const b = crypto.getRandomValues(new Uint8Array(16))
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")
}

const parseRetryAfter = (v: string | null, now: number): number | null => {
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
    init: { body?: unknown; query?: Record<string, string | number | undefined>; retry: boolean; headers?: Record<string, string>; raw?: boolean }
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
        if (init.raw) return (await res.arrayBuffer()) as A
        const text = await res.text()
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
  const get = <A = Json>(path: string, query?: Record<string, string | number | undefined>) =>
    request<A>("GET", path, { retry: true, ...(query ? { query } : {}) })
  const post = <A = Json>(path: string, body: unknown, retry = true) => request<A>("POST", path, { body, retry })
  const del = <A = Json>(path: string) => request<A>("DELETE", path, { retry: true })
  const id = (ref: string) => `/v1/attestation/${enc(ref)}`

  return {
    request,
    info: () => get("/v1/info"),
    healthz: () => get("/v1/healthz"),
    keys: () => get("/v1/keys"),
    key: (keyId: string) => get(`/v1/keys/${enc(keyId)}`),
    stats: () => get("/v1/stats"),
    attest: (body: AttestRequest) => post<AttestationItem>("/v1/attest", body),
    attestBatch: (body: typeof AttestBatchPayload.Encoded) => post<typeof AttestBatchResponse.Encoded>("/v1/attest/batch", body),
    verify: (body: { hash_hex: string } & Json) => post("/v1/verify", body),
    verifyBatch: (body: typeof VerifyBatchPayload.Encoded) => post("/v1/verify/batch", body),
    lookup: (ref: string) => get(id(ref)),
    status: (ref: string) => get(`${id(ref)}/status`),
    signature: (ref: string) => get(`${id(ref)}/signature`),
    evidence: (ref: string) => get(`${id(ref)}/evidence`),
    merkle: (ref: string) => get(`${id(ref)}/merkle`),
    tsa: (ref: string) => get(`${id(ref)}/tsa`),
    ots: (ref: string) => get(`${id(ref)}/ots`),
    otsProof: (ref: string) => request<ArrayBuffer>("GET", `${id(ref)}/ots/proof`, { retry: true, raw: true }),
    getMetadata: (ref: string) => get(`${id(ref)}/metadata`),
    patchMetadata: (ref: string, patch: { source?: string | null; extra_data?: Json | null; client_encrypted?: boolean }, ifMatch?: string) =>
      request<Json>("PATCH", `${id(ref)}/metadata`, {
        body: patch,
        retry: false,
        ...(ifMatch !== undefined ? { headers: { "if-match": `"${ifMatch.replace(/^"|"$/g, "")}"` } } : {})
      }),
    deleteMetadata: (ref: string) => del(`${id(ref)}/metadata`),
    getTags: (ref: string) => get(`${id(ref)}/tags`),
    putTags: (ref: string, body: Json) => request<Json>("PUT", `${id(ref)}/tags`, { body, retry: true }),
    deleteTag: (ref: string, key: string) => del(`${id(ref)}/tags/${enc(key)}`),
    queryTags: (body: Json) => post("/v1/tags/query", body),
    createShareToken: (body: Json) => post("/v1/share-tokens", body, false),
    listShareTokens: () => get("/v1/share-tokens"),
    getShareToken: (tokenId: string) => get(`/v1/share-tokens/${enc(tokenId)}`),
    revokeShareToken: (tokenId: string) => del(`/v1/share-tokens/${enc(tokenId)}`),
    shareTokenAccessLog: (tokenId: string) => get(`/v1/share-tokens/${enc(tokenId)}/access-log`),
    registerWebhook: (body: Json) => post("/v1/webhook/register", body, false),
    listWebhooks: () => get("/v1/webhooks"),
    removeWebhook: (webhookId: string) => del(`/v1/webhook/${enc(webhookId)}`),
    webhookDeliveries: (webhookId: string) => get(`/v1/webhook/${enc(webhookId)}/deliveries`),
    scan: (body: Json) => post("/v1/scan", body),
    inventoryStats: () => get("/v1/inventory/stats"),
    createDerivedList: (body: Json) => post("/v1/derived-lists", body, false),
    listDerivedLists: () => get("/v1/derived-lists"),
    getDerivedList: (listId: string) => get(`/v1/derived-lists/${enc(listId)}`),
    revokeDerivedList: (listId: string) => del(`/v1/derived-lists/${enc(listId)}`),
    derivedListAccessLog: (listId: string) => get(`/v1/derived-lists/${enc(listId)}/access-log`),
    matchDerivedList: (listId: string, body: Json) => post(`/v1/derived-lists/${enc(listId)}/match`, body)
  }
}

export type AttestdClient = ReturnType<typeof createClient>

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")

/** SHA-256 of a string per spec §1.9: UTF-8, no BOM, no newline added, no normalisation. */
export const hashString = async (s: string): Promise<string> =>
  hex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s))))

/** HMAC-SHA256(key, value) as hex, for low-entropy values (spec §1.8). */
export const hmacDigest = async (key: Uint8Array | string, value: Uint8Array | string): Promise<string> => {
  const k = typeof key === "string" ? new TextEncoder().encode(key) : key
  const v = typeof value === "string" ? new TextEncoder().encode(value) : value
  const ck = await crypto.subtle.importKey("raw", k as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  return hex(new Uint8Array(await crypto.subtle.sign("HMAC", ck, v as Uint8Array<ArrayBuffer>)))
}
