import { describe, expect, it } from "vitest"
import fc from "fast-check"
import {
  blockHash,
  headerBytes,
  meetsTarget,
  mineHeader,
  parseHeader,
  REGTEST_BITS,
  reverseHex,
  serializeHeader,
  targetFromBits
} from "../../src/Domain/BitcoinHeader.js"
import { bytesToHex } from "@noble/hashes/utils.js"

// Bitcoin's genesis block (height 0), as Esplora serves it.
const GENESIS =
  "0100000000000000000000000000000000000000000000000000000000000000000000003ba3edfd7a7b12b27ac72c3e67768f617fc81bc3888a51323a9fb8aa4b1e5e4a29ab5f49ffff001d1dac2b7c"

describe("Bitcoin block headers", () => {
  it("parses the genesis header and computes its hash", () => {
    const h = parseHeader(GENESIS)
    expect(h.version).toBe(1)
    expect(h.prevBlockHash).toBe("0".repeat(64))
    expect(reverseHex(h.merkleRoot)).toBe("4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b")
    expect(h.time).toBe(1231006505)
    expect(h.bits).toBe(0x1d00ffff)
    expect(h.nonce).toBe(2083236893)
    expect(blockHash(headerBytes(GENESIS))).toBe("000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f")
    expect(bytesToHex(serializeHeader(h))).toBe(GENESIS)
  })

  it("checks proof of work against nBits", () => {
    expect(meetsTarget(headerBytes(GENESIS))).toBe(true)
    const tampered = headerBytes(GENESIS)
    tampered[79] = tampered[79]! ^ 1
    expect(meetsTarget(tampered)).toBe(false)
    expect(targetFromBits(0x1d00ffff)).toBe(0xffffn << 208n)
  })

  it("rejects headers that are not 80 bytes", () => {
    expect(() => parseHeader(GENESIS.slice(2))).toThrow(/80 bytes/)
    expect(() => parseHeader(GENESIS + "00")).toThrow(/80 bytes/)
  })

  it("mines regtest headers that round-trip and meet their target", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.nat(2 ** 31), (root, prev, time) => {
        const header = mineHeader({ prevBlockHash: bytesToHex(prev), merkleRoot: bytesToHex(root), time })
        const parsed = parseHeader(bytesToHex(header))
        expect(parsed.merkleRoot).toBe(bytesToHex(root))
        expect(parsed.prevBlockHash).toBe(bytesToHex(prev))
        expect(parsed.bits).toBe(REGTEST_BITS)
        expect(meetsTarget(header)).toBe(true)
      }),
      { numRuns: 50 }
    )
  })
})
