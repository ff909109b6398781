/** The caller's address (socket, or X-Forwarded-For behind a trusted proxy) and CIDR allowlists. */
import { BlockList, isIP } from "node:net"

export const normalizeIp = (raw: string): string => {
  const ip = raw.trim().replace(/^\[|\]$/g, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  return mapped ? mapped[1]! : ip
}

export const clientAddressOf = (
  remoteAddress: string | undefined,
  forwardedFor: string | undefined,
  trustProxy: boolean
): string => {
  if (trustProxy && forwardedFor) {
    const first = forwardedFor.split(",")[0]
    if (first && isIP(normalizeIp(first))) return normalizeIp(first)
  }
  return normalizeIp(remoteAddress ?? "")
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

const cache = new Map<string, BlockList>()

export const ipAllowed = (allow: ReadonlyArray<string>, ip: string): boolean => {
  const cacheKey = allow.join(",")
  let list = cache.get(cacheKey)
  if (!list) {
    list = new BlockList()
    for (const c of allow) {
      const p = parseCidr(c)
      if (p) list.addSubnet(p.address, p.prefix, p.family)
    }
    if (cache.size > 10_000) cache.clear()
    cache.set(cacheKey, list)
  }
  const v = isIP(ip)
  if (v === 0) return false
  return list.check(ip, v === 4 ? "ipv4" : "ipv6")
}
