/**
 * The wire format of instants: formatMillis agrees with formatMicros, and parseMicros reads both back.
 * isoMillis (the logs' time) is Date's toISOString, however instants repeat.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { formatMicros, formatMillis, isoMillis, parseMicros } from "../../src/Domain/Time.js"

describe("wire time", () => {
  it("formatMillis is formatMicros of the same instant, and parseMicros reads it back", () => {
    // 0 to year 9999 (the wire format has four year digits), fractions truncated as before
    fc.assert(fc.property(fc.double({ min: 0, max: 253_402_300_799_999, noNaN: true }), (millis) => {
      const micros = BigInt(Math.trunc(millis)) * 1000n
      expect(formatMillis(millis)).toBe(formatMicros(micros))
      expect(parseMicros(formatMillis(millis))).toBe(micros)
    }), { numRuns: 2000 })
    expect(formatMillis(0)).toBe("1970-01-01T00:00:00.000000+00:00")
    expect(formatMillis(Date.UTC(2026, 10, 23, 7, 5, 9, 42))).toBe("2026-11-23T07:05:09.042000+00:00")
  })

  it("formatMillis answers a repeated instant as a new one (it keeps the last one's text)", () => {
    const instants = [0, 1, 1.5, 999, -1, -1.5, 1_700_000_000_000, 1_700_000_000_000.9]
    fc.assert(fc.property(fc.array(fc.constantFrom(...instants), { minLength: 1, maxLength: 20 }), (seq) => {
      for (const millis of seq) expect(formatMillis(millis)).toBe(formatMicros(BigInt(Math.trunc(millis)) * 1000n))
    }), { numRuns: 500 })
  })

  it("isoMillis is toISOString of the instant, repeated or not", () => {
    const instants = [0, 1, 1.5, 999, -1, -1.5, -8.64e15, 1_700_000_000_000, 1_700_000_000_000.9]
    const some = fc.oneof(fc.constantFrom(...instants), fc.double({ min: -8.64e15, max: 8.64e15, noNaN: true }))
    fc.assert(fc.property(fc.array(some, { minLength: 1, maxLength: 20 }), (seq) => {
      for (const millis of seq) expect(isoMillis(millis)).toBe(new Date(millis).toISOString())
    }), { numRuns: 500 })
  })
})
