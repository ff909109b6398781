/** Webhook events, signatures, and the SSRF guard for delivery URLs. */
import { createHmac, randomBytes } from "node:crypto"
import { lookup } from "node:dns/promises"
import ipaddr from "ipaddr.js"
import { isIP } from "node:net"

export * from "./Limits.js"
import type { WebhookEvent } from "./Limits.js"
/** Live webhooks one key may hold. */
export const WEBHOOKS_PER_KEY = 10
export const DELIVERY_HISTORY = 100
export const DELIVERY_TIMEOUT_MS = 10_000

/**
 * Fair scheduling: attempts one dispatcher instance runs at once, and the most
 * attempts in flight (over all instances) for one webhook and for one key, so a
 * slow endpoint holds at most its share of the slots.
 */
export const SEND_CONCURRENCY = 64
export const WEBHOOK_IN_FLIGHT = 16
export const KEY_IN_FLIGHT = 16

/**
 * The circuit of a webhook: after CIRCUIT_THRESHOLD failed attempts in a row it
 * opens for CIRCUIT_BASE_MS, doubling with each reopening up to CIRCUIT_MAX_MS;
 * while open its deliveries wait (delayed, never dropped, attempts unchanged);
 * once the period is over one attempt at a time probes it (half-open): a success
 * closes it, a failure opens it again for longer.
 */
export const CIRCUIT_THRESHOLD = 5
export const CIRCUIT_BASE_MS = 30_000
export const CIRCUIT_MAX_MS = 15 * 60_000

/** How long a circuit opened for the `opens`-th time in a row (0-based) stays open. */
export const circuitOpenMillis = (opens: number): number => Math.min(CIRCUIT_MAX_MS, CIRCUIT_BASE_MS * 2 ** Math.min(opens, 20))
export const RESPONSE_EXCERPT_BYTES = 512
export const USER_AGENT = "attestd-webhooks/1 (+https://github.com/attestd)"

export const newWebhookId = (): string => `wh_${randomBytes(12).toString("base64url")}`
export const newSigningSecret = (): string => randomBytes(32).toString("hex")

/** `sha256=<hex>` of HMAC-SHA256 over the raw body, keyed with the ASCII bytes of the 64-hex secret. */
export const signBody = (body: string, secret: string): string =>
  `sha256=${createHmac("sha256", Buffer.from(secret, "ascii")).update(body, "utf8").digest("hex")}`

const globalV4 = (a: ipaddr.IPv4): boolean => a.range() === "unicast"

const v4At = (parts: ReadonlyArray<number>, i: number, xor = 0): ipaddr.IPv4 =>
  new ipaddr.IPv4([
    ((parts[i]! >> 8) ^ xor) & 0xff,
    (parts[i]! ^ xor) & 0xff,
    ((parts[i + 1]! >> 8) ^ xor) & 0xff,
    (parts[i + 1]! ^ xor) & 0xff
  ])

/**
 * Global unicast IPv6 passes (2000::/3 and no special range); an IPv6 form
 * that carries an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-translated
 * ::ffff:0:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo 2001::/32) passes
 * only when every IPv4 address it carries is global unicast. Local-use NAT64
 * (64:ff9b:1::/48) and site-local fec0::/10 never pass.
 */
const globalV6 = (a: ipaddr.IPv6): boolean => {
  const p = a.parts
  switch (a.range()) {
    case "ipv4Mapped":
    case "rfc6145":
      return globalV4(v4At(p, 6))
    case "rfc6052":
      return p[2] === 0 && globalV4(v4At(p, 6))
    case "6to4":
      return globalV4(v4At(p, 1))
    case "teredo":
      return globalV4(v4At(p, 2)) && globalV4(v4At(p, 6, 0xffff))
    case "unicast":
      return (p[0]! & 0xe000) === 0x2000
    default:
      return false
  }
}

/** True only for global unicast addresses (classified by ipaddr.js); anything unparsable is refused. */
export const isPublicAddress = (address: string): boolean => {
  const ip = address.replace(/^\[|\]$/g, "").replace(/%.*$/, "")
  if (isIP(ip) === 0) return false // strict forms only (ipaddr.js also takes legacy ones like "1.2.3")
  const a = ipaddr.parse(ip)
  return a.kind() === "ipv4" ? globalV4(a as ipaddr.IPv4) : globalV6(a as ipaddr.IPv6)
}

/** The TCP port a URL connects to. */
export const urlPort = (url: URL): number => url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80

export type UrlCheck = { readonly ok: true; readonly url: URL } | { readonly ok: false; readonly reason: string }

/** A URL's hostname without IPv6 brackets: what isIP and DNS take. */
const unbracketed = (hostname: string): string => hostname.replace(/^\[|\]$/g, "")

/**
 * What a webhook URL shows without DNS. Production: https only, no credentials,
 * a port from ATTESTD_WEBHOOK_PORTS (443 by default), and a host given as an IP
 * address must be global unicast. Demo: http and loopback allowed.
 *
 * A delivery checks only this: its connection's lookup (`publicOnlyLookup` in
 * Dispatcher.ts) refuses a name that resolves to a non-public address, so the
 * address checked is the one connected to, with one DNS query per attempt. An IP
 * address needs the check here, since node:net connects to it without a lookup.
 */
export const webhookUrlShape = (raw: string, production: boolean, ports: ReadonlyArray<number> = [443]): UrlCheck => {
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
  if (!ports.includes(urlPort(url))) {
    return { ok: false, reason: `port ${urlPort(url)} is not allowed (ATTESTD_WEBHOOK_PORTS: ${ports.join(",")})` }
  }
  const host = unbracketed(url.hostname)
  if (isIP(host) !== 0 && !isPublicAddress(host)) {
    return { ok: false, reason: `host ${url.hostname} resolves to a non-public address (${host})` }
  }
  return { ok: true, url }
}

/**
 * Checks a webhook URL at registration: its shape (`webhookUrlShape`) and, in
 * production, every address its host name resolves to now, so that a URL that
 * could never be delivered to is refused with its reason.
 */
export const checkWebhookUrl = async (
  raw: string,
  production: boolean,
  ports: ReadonlyArray<number> = [443]
): Promise<UrlCheck> => {
  const shape = webhookUrlShape(raw, production, ports)
  if (!shape.ok || !production) return shape
  const { url } = shape
  const addresses = await resolveAll(url.hostname)
  if (addresses.length === 0) return { ok: false, reason: `host ${url.hostname} does not resolve` }
  const bad = addresses.find((a) => !isPublicAddress(a))
  return bad ? { ok: false, reason: `host ${url.hostname} resolves to a non-public address (${bad})` } : { ok: true, url }
}

export const resolveAll = async (hostname: string): Promise<Array<string>> => {
  const host = unbracketed(hostname)
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
