/** Webhook events, signatures, and the SSRF guard for delivery URLs. */
import { createHmac, randomBytes } from "node:crypto"
import { lookup } from "node:dns/promises"
import { BlockList, isIP } from "node:net"

export const WEBHOOK_EVENTS = ["t1_complete", "t2_complete"] as const
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number]
export const WEBHOOK_LABEL_MAX = 200
export const DELIVERY_HISTORY = 100
export const DELIVERY_TIMEOUT_MS = 10_000
export const RESPONSE_EXCERPT_BYTES = 512
export const USER_AGENT = "attestd-webhooks/1 (+https://github.com/attestd)"

export const newWebhookId = (): string => `wh_${randomBytes(12).toString("base64url")}`
export const newSigningSecret = (): string => randomBytes(32).toString("hex")

/** `sha256=<hex>` of HMAC-SHA256 over the raw body, keyed with the ASCII bytes of the 64-hex secret. */
export const signBody = (body: string, secret: string): string =>
  `sha256=${createHmac("sha256", Buffer.from(secret, "ascii")).update(body, "utf8").digest("hex")}`

const forbidden = new BlockList()
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4]
] as const) forbidden.addSubnet(net, prefix, "ipv4")
for (const [net, prefix] of [
  ["::", 96],
  ["::1", 128],
  ["64:ff9b::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8]
] as const) forbidden.addSubnet(net, prefix, "ipv6")

/** True for addresses a production webhook may reach: not loopback, private, link-local, multicast or metadata. */
export const isPublicAddress = (address: string): boolean => {
  const ip = address.replace(/^\[|\]$/g, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  const v4 = mapped ? mapped[1]! : ip
  const family = isIP(v4)
  if (family === 0) return false
  return !forbidden.check(v4, family === 4 ? "ipv4" : "ipv6")
}

export type UrlCheck = { readonly ok: true; readonly url: URL } | { readonly ok: false; readonly reason: string }

/**
 * Checks a webhook URL. Production: https only, and every address the host
 * resolves to must be public (checked at registration and again at delivery).
 * Demo: http and loopback allowed.
 */
export const checkWebhookUrl = async (raw: string, production: boolean): Promise<UrlCheck> => {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: "not a valid URL" }
  }
  if (url.username || url.password) return { ok: false, reason: "credentials in the URL are not allowed" }
  if (production ? url.protocol !== "https:" : url.protocol !== "https:" && url.protocol !== "http:") {
    return { ok: false, reason: production ? "webhook URLs must be https:// in production" : "webhook URLs must be http(s)://" }
  }
  if (!production) return { ok: true, url }
  const addresses = await resolveAll(url.hostname)
  if (addresses.length === 0) return { ok: false, reason: `host ${url.hostname} does not resolve` }
  const bad = addresses.find((a) => !isPublicAddress(a))
  return bad ? { ok: false, reason: `host ${url.hostname} resolves to a non-public address (${bad})` } : { ok: true, url }
}

export const resolveAll = async (hostname: string): Promise<Array<string>> => {
  const host = hostname.replace(/^\[|\]$/g, "")
  if (isIP(host)) return [host]
  try {
    return (await lookup(host, { all: true, verbatim: true })).map((a) => a.address)
  } catch {
    return []
  }
}

export interface EventPayloadInput {
  readonly event: WebhookEvent
  readonly deliveryId: number
  readonly attestationId: string
  readonly hashHex: string
  readonly tsaTimestamp: string | null
  readonly bitcoinBlock: number | null
  readonly confirmedAt: string | null
  readonly createdAt: string
}

/** The JSON body: spec §6 fields plus `event` and `delivery_id`. */
export const eventBody = (p: EventPayloadInput): string =>
  JSON.stringify(
    p.event === "t1_complete"
      ? {
        event: p.event,
        delivery_id: p.deliveryId,
        attestation_id: p.attestationId,
        hash_hex: p.hashHex,
        tsa_timestamp: p.tsaTimestamp,
        created_at: p.createdAt
      }
      : {
        event: p.event,
        delivery_id: p.deliveryId,
        attestation_id: p.attestationId,
        hash_hex: p.hashHex,
        bitcoin_block: p.bitcoinBlock,
        confirmed_at: p.confirmedAt,
        created_at: p.createdAt
      }
  )
