/**
 * Consumer side of attestd webhooks: check the signature in constant time and
 * reject stale payloads. Deduplicate on X-Service-Delivery; the business
 * identity of an event is attestation_id plus event. Portable (no node:*, no
 * Buffer): it runs in Node, Deno, Bun, browsers and edge workers alike.
 */
import { hmac } from "@noble/hashes/hmac.js"
import { sha256 } from "@noble/hashes/sha2.js"

const utf8 = new TextEncoder()

/** Constant-time equality of two byte strings of the same length. */
const bytesEqual = (a: Uint8Array, b: Uint8Array): boolean => {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!
  return diff === 0
}

const hexBytes = (hex: string): Uint8Array | null => {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return null
  const out = new Uint8Array(32)
  for (let i = 0; i < 32; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16)
  return out
}

export interface VerifiedWebhook {
  readonly event: "t1_complete" | "t2_complete"
  readonly deliveryId: string
  readonly payload: {
    readonly event: string
    readonly delivery_id: number
    readonly attestation_id: string
    readonly hash_hex: string
    readonly created_at: string
    readonly tsa_timestamp?: string | null
    readonly bitcoin_block?: number | null
    readonly confirmed_at?: string | null
  }
}

export type WebhookVerification =
  | { readonly ok: true; readonly webhook: VerifiedWebhook }
  | { readonly ok: false; readonly reason: string }

const header = (headers: Headers | Record<string, string | ReadonlyArray<string> | undefined>, name: string): string | undefined => {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined
  const rec = headers as Record<string, string | ReadonlyArray<string> | undefined>
  const v = rec[name] ?? rec[name.toLowerCase()] ?? Object.entries(rec).find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1]
  return Array.isArray(v) ? v[0] : (v as string | undefined)
}

/**
 * Verifies a webhook request: `rawBody` must be the exact bytes received.
 * `toleranceSeconds` (default 300) bounds the age of `created_at`; note that
 * retries resend the original body, so a consumer that wants the 1/5/15-minute
 * retries should allow at least 21 minutes or rely on delivery-id dedup.
 */
export const verifyWebhook = (
  rawBody: string | Uint8Array,
  headers: Headers | Record<string, string | ReadonlyArray<string> | undefined>,
  secret: string,
  options: { readonly toleranceSeconds?: number; readonly now?: Date } = {}
): WebhookVerification => {
  const body = typeof rawBody === "string" ? utf8.encode(rawBody) : rawBody
  const signature = header(headers, "x-service-signature")
  if (!signature || !signature.startsWith("sha256=")) return { ok: false, reason: "missing X-Service-Signature" }
  const expected = hmac(sha256, utf8.encode(secret), body)
  const given = hexBytes(signature.slice(7))
  if (given === null || !bytesEqual(given, expected)) return { ok: false, reason: "bad signature" }
  let payload: VerifiedWebhook["payload"]
  try {
    payload = JSON.parse(new TextDecoder().decode(body))
  } catch {
    return { ok: false, reason: "body is not JSON" }
  }
  const created = Date.parse(String(payload.created_at).replace(/(\.\d{3})\d+/, "$1"))
  const tolerance = options.toleranceSeconds ?? 300
  const now = (options.now ?? new Date()).getTime()
  if (Number.isNaN(created)) return { ok: false, reason: "created_at missing" }
  if (now - created > tolerance * 1000) return { ok: false, reason: "payload older than the tolerance" }
  const event = header(headers, "x-service-event")
  if (event !== payload.event) return { ok: false, reason: "X-Service-Event does not match the payload" }
  const deliveryId = header(headers, "x-service-delivery")
  if (deliveryId !== String(payload.delivery_id)) return { ok: false, reason: "X-Service-Delivery does not match the payload" }
  return { ok: true, webhook: { event: payload.event as VerifiedWebhook["event"], deliveryId, payload } }
}
