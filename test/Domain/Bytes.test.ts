/** The random bytes behind attestation ids and ETags (WebCrypto's CSPRNG, drawn per group). */
import { describe, expect, it } from "vitest"
import { bytesToHex, randomBytes, randomChunks } from "../../src/Domain/Bytes.js"
import { newAttestationIds } from "../../src/Domain/AttestationId.js"

describe("randomBytes", () => {
  it("hands out the requested length, never the same bytes twice", () => {
    const seen = new Set<string>()
    for (let i = 0; i < 1_000; i++) {
      const b = randomBytes(18)
      expect(b).toHaveLength(18)
      const hex = bytesToHex(b)
      expect(seen.has(hex)).toBe(false)
      seen.add(hex)
    }
    expect(randomBytes(200_000)).toHaveLength(200_000)
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

  it("attestation ids drawn from it are well formed and distinct, within one draw and across draws", () => {
    const ids = [...newAttestationIds(500), ...Array.from({ length: 100 }, () => newAttestationIds(1)[0]!)]
    for (const id of ids) expect(id).toMatch(/^att_[A-Za-z0-9_-]{24}$/)
    expect(new Set(ids).size).toBe(ids.length)
  })

  it("draws more than WebCrypto fills in one call, every chunk of it random", () => {
    // getRandomValues refuses more than 65,536 bytes; a group of large batches asks for more
    const chunks = randomChunks(5_000, 18)
    expect(chunks).toHaveLength(5_000)
    for (const c of chunks) expect(c.length).toBe(18)
    const tail = chunks.slice(-1_000).map((c) => bytesToHex(c))
    expect(new Set(tail).size).toBe(1_000)
    expect(tail.filter((h) => h === "00".repeat(18))).toEqual([])
  })
})
