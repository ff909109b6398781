/** Hex and Base64 codecs for Uint8Array — portable (no Buffer), strict on input. */

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/

export const bytesToHex = (b: Uint8Array): string => {
  let out = ""
  for (const x of b) out += x.toString(16).padStart(2, "0")
  return out
}

/** Throws on odd length or a non-hex character. */
export const hexToBytes = (hex: string): Uint8Array => {
  if (!HEX_RE.test(hex)) throw new Error("not an even-length hex string")
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16)
  return out
}

export const concatBytes = (...parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  let len = 0
  for (const p of parts) len += p.length
  const out = new Uint8Array(len)
  let off = 0
  for (const p of parts) {
    out.set(p, off)
    off += p.length
  }
  return out
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
const B64_INDEX = (() => {
  const t = new Int16Array(128).fill(-1)
  for (let i = 0; i < 64; i++) t[B64.charCodeAt(i)] = i
  t["-".charCodeAt(0)] = 62
  t["_".charCodeAt(0)] = 63
  return t
})()

export const bytesToBase64 = (bytes: Uint8Array): string => {
  let out = ""
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0)
    out += B64[(n >> 18) & 63]! + B64[(n >> 12) & 63]!
    out += i + 1 < bytes.length ? B64[(n >> 6) & 63]! : "="
    out += i + 2 < bytes.length ? B64[n & 63]! : "="
  }
  return out
}

/** Base64URL without padding (RFC 4648 §5; JWK coordinates, ids). */
export const bytesToBase64Url = (bytes: Uint8Array): string =>
  bytesToBase64(bytes).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_")

/** Standard or URL alphabet, padding optional; throws on any other character. */
export const base64ToBytes = (s: string): Uint8Array<ArrayBuffer> => {
  const clean = s.replace(/=+$/, "")
  if (clean.length % 4 === 1) throw new Error("not Base64: bad length")
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4))
  let acc = 0
  let bits = 0
  let o = 0
  for (let i = 0; i < clean.length; i++) {
    const c = clean.charCodeAt(i)
    const v = c < 128 ? B64_INDEX[c]! : -1
    if (v < 0) throw new Error("not Base64: bad character")
    acc = (acc << 6) | v
    bits += 6
    if (bits >= 8) {
      bits -= 8
      out[o++] = (acc >> bits) & 0xff
    }
  }
  return out
}

/** WebCrypto fills at most this many bytes a call. */
const RANDOM_CHUNK = 65_536

/** `n` bytes from WebCrypto's CSPRNG. */
export const randomBytes = (n: number): Uint8Array => {
  const out = new Uint8Array(n)
  for (let at = 0; at < n; at += RANDOM_CHUNK) globalThis.crypto.getRandomValues(out.subarray(at, at + RANDOM_CHUNK))
  return out
}

/**
 * `n` random values of `size` bytes each, from one draw: a call to the CSPRNG costs about
 * as much as 18 bytes of its output, so a group of new attestations draws its ids (and
 * its claims' ETags) at once.
 */
export const randomChunks = (n: number, size: number): Array<Uint8Array> => {
  const bytes = randomBytes(n * size)
  return Array.from({ length: n }, (_, i) => bytes.subarray(i * size, (i + 1) * size))
}
