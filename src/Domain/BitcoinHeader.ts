/**
 * Bitcoin block headers — pure and portable (Node and browsers; no node:*, no Buffer).
 *
 * An 80-byte header is: version (int32 LE) ‖ previous block hash (32, internal
 * order) ‖ merkle root (32, internal order) ‖ time (uint32 LE) ‖ nBits (uint32 LE)
 * ‖ nonce (uint32 LE). "Internal order" is the order of the bytes in the header;
 * block explorers and Bitcoin Core's RPC show hashes byte-reversed ("display
 * order"). An OpenTimestamps Bitcoin attestation is satisfied when the message
 * its operations reach equals the header's merkle root field in internal order.
 *
 * Used by the verifier (merkle root and proof-of-work checks), by the Esplora
 * header sources and by the simulated chain that produces real headers.
 */
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"

export const HEADER_BYTES = 80

/** nBits of Bitcoin regtest: the easiest target, used by the simulated chain. */
export const REGTEST_BITS = 0x207fffff

export interface BlockHeader {
  readonly version: number
  /** Previous block hash, display order (as Esplora and block explorers show it). */
  readonly prevBlockHash: string
  /** Merkle root, internal order: the message an OTS Bitcoin attestation commits to. */
  readonly merkleRoot: string
  /** Unix time in seconds. */
  readonly time: number
  readonly bits: number
  readonly nonce: number
}

export class BitcoinHeaderError extends Error {
  override readonly name = "BitcoinHeaderError"
}

const reverse = (b: Uint8Array): Uint8Array => Uint8Array.from(b).reverse()

/** Byte-reverses a hex string (display order ↔ internal order). */
export const reverseHex = (hex: string): string => bytesToHex(reverse(hexToBytes(hex)))

export const sha256d = (b: Uint8Array): Uint8Array => sha256(sha256(b))

const HEADER_HEX = /^[0-9a-fA-F]{160}$/

/** The 80 header bytes of a hex string; throws BitcoinHeaderError when it is not 160 hex characters. */
export const headerBytes = (hex: string): Uint8Array => {
  if (!HEADER_HEX.test(hex)) throw new BitcoinHeaderError("a block header is 80 bytes (160 hex characters)")
  return hexToBytes(hex.toLowerCase())
}

export const parseHeader = (hex: string): BlockHeader => {
  const b = headerBytes(hex)
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength)
  return {
    version: view.getInt32(0, true),
    prevBlockHash: bytesToHex(reverse(b.subarray(4, 36))),
    merkleRoot: bytesToHex(b.subarray(36, 68)),
    time: view.getUint32(68, true),
    bits: view.getUint32(72, true),
    nonce: view.getUint32(76, true)
  }
}

export const serializeHeader = (h: BlockHeader): Uint8Array => {
  const b = new Uint8Array(HEADER_BYTES)
  const view = new DataView(b.buffer)
  view.setInt32(0, h.version, true)
  b.set(reverse(hexToBytes(h.prevBlockHash)), 4)
  b.set(hexToBytes(h.merkleRoot), 36)
  view.setUint32(68, h.time, true)
  view.setUint32(72, h.bits, true)
  view.setUint32(76, h.nonce, true)
  return b
}

/** The block hash of a header, display order (what `GET /block-height/{h}` returns). */
export const blockHash = (header: Uint8Array): string => bytesToHex(reverse(sha256d(header)))

/** The target encoded by nBits (compact form); throws on a negative or overflowing encoding. */
export const targetFromBits = (bits: number): bigint => {
  const exponent = bits >>> 24
  const mantissa = bits & 0x007fffff
  if ((bits & 0x00800000) !== 0 && mantissa !== 0) throw new BitcoinHeaderError(`nBits 0x${bits.toString(16)} encodes a negative target`)
  const target = exponent <= 3
    ? BigInt(mantissa >>> (8 * (3 - exponent)))
    : BigInt(mantissa) << BigInt(8 * (exponent - 3))
  if (target >= 1n << 256n) throw new BitcoinHeaderError(`nBits 0x${bits.toString(16)} overflows 256 bits`)
  return target
}

/** The header's double SHA-256, read as a little-endian number, is at most the target its nBits encodes. */
export const meetsTarget = (header: Uint8Array): boolean => {
  const bits = new DataView(header.buffer, header.byteOffset, header.byteLength).getUint32(72, true)
  const target = targetFromBits(bits)
  if (target === 0n) return false
  return BigInt("0x" + blockHash(header)) <= target
}

/**
 * A header over `merkleRoot` chained to `prevBlockHash` whose nonce meets the
 * target of `bits` (regtest by default: about two tries). For simulated chains only.
 */
export const mineHeader = (fields: Omit<BlockHeader, "nonce" | "bits" | "version"> & { readonly version?: number; readonly bits?: number }): Uint8Array => {
  const header = serializeHeader({ version: fields.version ?? 0x20000000, bits: fields.bits ?? REGTEST_BITS, nonce: 0, ...fields })
  const view = new DataView(header.buffer)
  for (let nonce = 0; nonce <= 0xffffffff; nonce++) {
    view.setUint32(76, nonce, true)
    if (meetsTarget(header)) return header
  }
  throw new BitcoinHeaderError("no nonce meets the target")
}
