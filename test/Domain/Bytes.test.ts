/** The pooled random bytes behind attestation ids and etags. */
import { describe, expect, it } from "vitest"
import { bytesToHex, randomBytes } from "../../src/Domain/Bytes.js"
import { newAttestationId } from "../../src/Domain/AttestationId.js"

describe("randomBytes (pooled)", () => {
  it("hands out the requested length, never the same bytes twice across pool refills", () => {
    const seen = new Set<string>()
    // 18 bytes × 1,000 is ~4.4 pools: the refills and the pool's tail are crossed
    for (let i = 0; i < 1_000; i++) {
      const b = randomBytes(18)
      expect(b).toHaveLength(18)
      const hex = bytesToHex(b)
      expect(seen.has(hex)).toBe(false)
      seen.add(hex)
    }
    expect(randomBytes(5_000)).toHaveLength(5_000)
    expect(randomBytes(0)).toHaveLength(0)
  })

  it("returns copies: changing one leaves the next draw alone", () => {
    const a = randomBytes(16)
    a.fill(0)
    const b = randomBytes(16)
    expect(b.buffer).not.toBe(a.buffer)
    expect(b.some((x) => x !== 0)).toBe(true)
  })

  it("the bytes look uniform: each bit is set about half the time", () => {
    const bytes = randomBytes(4_000)
    for (let bit = 0; bit < 8; bit++) {
      const set = bytes.reduce((n, x) => n + ((x >> bit) & 1), 0)
      // mean 2,000, sd ~32: 6 sd either side
      expect(set).toBeGreaterThan(1_800)
      expect(set).toBeLessThan(2_200)
    }
  })

  it("attestation ids drawn from it are well formed and distinct", () => {
    const ids = Array.from({ length: 500 }, newAttestationId)
    for (const id of ids) expect(id).toMatch(/^att_[A-Za-z0-9_-]{24}$/)
    expect(new Set(ids).size).toBe(ids.length)
  })
})
