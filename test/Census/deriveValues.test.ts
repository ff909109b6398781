/**
 * The third-party helper `deriveValues` (src/Client/DerivedLists.ts) against a
 * plain node:crypto HMAC (spec 2.14): HMAC-SHA256 keyed with the raw bytes of
 * the hex list_key, over the ASCII hash_hex, as lowercase hex. Pure; no server.
 */
import fc from "fast-check"
import { createHmac } from "node:crypto"
import { describe, expect, it } from "vitest"
import { derivedValue } from "../../src/Census/Domain.js"
import { deriveValues } from "../../src/Client/DerivedLists.js"

const hex32 = fc.uint8Array({ minLength: 32, maxLength: 32 }).map((b) => Buffer.from(b).toString("hex"))

const plainHmac = (listKey: string, hash: string): string => {
  const key = Buffer.alloc(32)
  for (let i = 0; i < 32; i++) key[i] = parseInt(listKey.slice(2 * i, 2 * i + 2), 16)
  return createHmac("sha256", key).update(Buffer.from(hash, "ascii")).digest("hex")
}

describe("deriveValues", () => {
  it("agrees with a plain node:crypto HMAC, element by element and in order (property)", () => {
    fc.assert(
      fc.property(hex32, fc.array(hex32, { maxLength: 20 }), (listKey, hashes) => {
        const out = deriveValues(listKey, hashes)
        expect(out).toHaveLength(hashes.length)
        out.forEach((v, i) => {
          expect(v).toMatch(/^[0-9a-f]{64}$/)
          expect(v).toBe(plainHmac(listKey, hashes[i]!))
          // the server side derives the same value
          expect(v).toBe(derivedValue(listKey, hashes[i]!))
        })
      }),
      { numRuns: 300 }
    )
  })

  it("depends on the key: two different keys give different values for the same hash (property)", () => {
    fc.assert(
      fc.property(hex32, hex32, hex32, (k1, k2, h) => {
        fc.pre(k1 !== k2)
        expect(deriveValues(k1, [h])[0]).not.toBe(deriveValues(k2, [h])[0])
      }),
      { numRuns: 100 }
    )
  })

  it("a known vector: key = 32 zero bytes, message = 64 ASCII zeros", () => {
    const key = "00".repeat(32)
    const hash = "0".repeat(64)
    expect(deriveValues(key, [hash])).toEqual([createHmac("sha256", Buffer.alloc(32)).update("0".repeat(64)).digest("hex")])
    // keyed with the RAW bytes of the hex key, not its ASCII text
    expect(deriveValues(key, [hash])[0]).not.toBe(createHmac("sha256", key).update(hash).digest("hex"))
    expect(deriveValues(key, [])).toEqual([])
  })

  it("invalid list_key or hash throws", () => {
    const good = "ab".repeat(32)
    const hash = "cd".repeat(32)
    for (const badKey of ["", "ab".repeat(31), "ab".repeat(33), "AB".repeat(32), "zz".repeat(32), ` ${"ab".repeat(32)}`, "ab".repeat(32) + "\n"]) {
      expect(() => deriveValues(badKey, [hash]), JSON.stringify(badKey)).toThrow()
    }
    for (const badHash of ["", "cd".repeat(31), "cd".repeat(33), "CD".repeat(32), "gg".repeat(32), `${"cd".repeat(32)} `]) {
      expect(() => deriveValues(good, [hash, badHash]), JSON.stringify(badHash)).toThrow()
    }
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (s) => {
        fc.pre(!/^[0-9a-f]{64}$/.test(s))
        expect(() => deriveValues(s, [hash])).toThrow()
        expect(() => deriveValues(good, [s])).toThrow()
      }),
      { numRuns: 200 }
    )
  })
})
