/**
 * The caller's address and CIDR allowlists.
 *
 * Behind proxies (ATTESTD_TRUST_PROXY) the address is taken from
 * X-Forwarded-For, counted from the RIGHT: each proxy appends the address it
 * received the request from, so only the entries written by proxies we trust
 * are trustworthy; everything to their left was written by the client.
 */
import { BlockList, isIP } from "node:net"

/**
 * Which peers are proxies:
 * - `false` / `0`: none; the socket peer is the client and X-Forwarded-For is ignored;
 * - `n` (or `true`, meaning 1): the socket peer and the n-1 rightmost X-Forwarded-For
 *   entries are proxies; the client is the n-th entry from the right;
 * - a list of CIDRs: the peer and entries inside them are proxies; the client is the
 *   first address from the right that is not.
 */
export type TrustProxy = boolean | number | ReadonlyArray<string>

export const normalizeIp = (raw: string): string => {
  const ip = raw.trim().replace(/^\[|\]$/g, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  return mapped ? mapped[1]! : ip
}

/** An X-Forwarded-For entry as an address: `[v6]:port` and `v4:port` lose the port; undefined when not an address. */
const entryAddress = (raw: string): string | undefined => {
  let s = raw.trim()
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(s)
  if (bracketed) s = bracketed[1]!
  else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(s)) s = s.slice(0, s.lastIndexOf(":"))
  const ip = normalizeIp(s)
  return isIP(ip) === 0 ? undefined : ip
}

/** Parses ATTESTD_TRUST_PROXY; a string describing why when it is malformed. */
export const parseTrustProxy = (raw: string): TrustProxy | string => {
  const s = raw.trim().toLowerCase()
  if (s === "" || s === "false" || s === "no" || s === "off") return 0
  if (s === "true" || s === "yes" || s === "on") return 1
  if (/^\d+$/.test(s)) {
    const n = Number(s)
    return n <= 32 ? n : `ATTESTD_TRUST_PROXY: at most 32 proxy hops, got ${raw}`
  }
  const cidrs = raw.split(",").map((c) => c.trim()).filter((c) => c !== "")
  const bad = cidrs.filter((c) => parseCidr(c) === undefined)
  return bad.length === 0 && cidrs.length > 0
    ? cidrs
    : `ATTESTD_TRUST_PROXY: expected a number of proxy hops, true/false, or comma-separated proxy CIDRs; not understood: ${bad.join(", ") || raw}`
}

/** Whether the socket peer itself is a trusted proxy (then limits per peer do not apply to it). */
export const peerIsTrustedProxy = (trust: TrustProxy, peer: string): boolean => {
  if (trust === false || trust === 0) return false
  if (typeof trust === "boolean" || typeof trust === "number") return true
  return ipAllowed(trust, normalizeIp(peer))
}

export const clientAddressOf = (
  remoteAddress: string | undefined,
  forwardedFor: string | undefined,
  trust: TrustProxy
): string => {
  const peer = normalizeIp(remoteAddress ?? "")
  if (trust === false || trust === 0 || !forwardedFor) return peer
  // Right to left: the peer, then the entries each proxy appended.
  const entries = forwardedFor.split(",")
  if (typeof trust === "boolean" || typeof trust === "number") {
    const hops = trust === true ? 1 : trust
    let client = peer
    for (let i = 0; i < hops && entries.length > 0; i++) {
      const ip = entryAddress(entries.pop()!)
      // Garbage where a trusted proxy should have written an address: keep the nearest known hop.
      if (ip === undefined) return client
      client = ip
    }
    return client
  }
  let client = peer
  while (ipAllowed(trust, client) && entries.length > 0) {
    const ip = entryAddress(entries.pop()!)
    if (ip === undefined) return client
    client = ip
  }
  return client
}

/** Parses `addr` or `addr/prefix`; returns undefined when malformed. */
export const parseCidr = (cidr: string): { address: string; prefix: number; family: "ipv4" | "ipv6" } | undefined => {
  const [addrRaw, prefixRaw] = cidr.trim().split("/")
  if (!addrRaw) return undefined
  const address = normalizeIp(addrRaw)
  const v = isIP(address)
  if (v === 0) return undefined
  const family = v === 4 ? "ipv4" : "ipv6"
  const max = v === 4 ? 32 : 128
  const prefix = prefixRaw === undefined ? max : Number(prefixRaw)
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max || (prefixRaw !== undefined && !/^\d+$/.test(prefixRaw))) {
    return undefined
  }
  return { address, prefix, family }
}

export const ipAllowed = (allow: ReadonlyArray<string>, ip: string): boolean => {
  const v = isIP(ip)
  if (v === 0) return false
  const list = new BlockList()
  for (const c of allow) {
    const p = parseCidr(c)
    if (p) list.addSubnet(p.address, p.prefix, p.family)
  }
  return list.check(ip, v === 4 ? "ipv4" : "ipv6")
}
