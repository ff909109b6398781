/** RecentDigests: remembers what it was told, forgets a digest only when a newer one takes its slot. */
import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeRecentDigests } from "../../src/Attestations/RecentDigests.js"

const hex = (n: number) => fc.array(fc.constantFrom(..."0123456789abcdef"), { minLength: n, maxLength: n }).map((cs) => cs.join(""))
const digest = hex(64)

describe("RecentDigests", () => {
  it("has what it remembered, and not what it was never told", () => {
    fc.assert(fc.property(fc.uniqueArray(digest, { minLength: 1, maxLength: 200 }), digest, (told, never) => {
      const recent = makeRecentDigests()
      for (const d of told) recent.remember(d)
      // the last digest told for each slot (the first four hex digits) is remembered
      const last = new Map(told.map((d) => [d.slice(0, 4), d]))
      for (const d of last.values()) expect(recent.has(d)).toBe(true)
      if (!told.some((d) => d.slice(0, 12) === never.slice(0, 12))) expect(recent.has(never)).toBe(false)
    }))
  })

  it("a newer digest in the same slot pushes the older out; one that differs past its first 48 bits is taken for it", () => {
    const recent = makeRecentDigests()
    const a = "abcd" + "0".repeat(60)
    const b = "abcd" + "1".repeat(60)
    expect(recent.has(a)).toBe(false)
    recent.remember(a)
    expect(recent.has(a)).toBe(true)
    expect(recent.has("abce" + "0".repeat(60))).toBe(false)
    recent.remember(b)
    expect([recent.has(a), recent.has(b)]).toEqual([false, true])
    // slot and tag come from the first 12 hex digits: the rest is not compared (a plan, never an answer)
    expect(recent.has("abcd" + "1".repeat(8) + "f".repeat(52))).toBe(true)
    // an empty slot is not a tag of zero
    expect(makeRecentDigests().has("0".repeat(64))).toBe(false)
  })
})
