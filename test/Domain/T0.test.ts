/**
 * T0 signatures and the wire time format, checked by implementations that share
 * no code with the signer: node:crypto from the published JWK, @noble/curves with
 * its strict (low-S) verify, and a hand-written DER reader.
 */
import { p256 } from "@noble/curves/nist.js"
import fc from "fast-check"
import { createHash, createPublicKey, verify as nodeVerify } from "node:crypto"
import { describe, expect, it } from "vitest"
import { FORMAT_VERSION, t0Payload } from "../../src/Domain/T0.js"
import { formatMicros, formatMillis, parseMicros } from "../../src/Domain/Time.js"
import { ephemeralKey, signPayload } from "../../src/Platform/Keys/FileKeys.js"

const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n
const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/
/** 0001-01-01 .. 9999-12-31T23:59:59.999999 would need negative micros; registrations are after 1970. */
const MAX_MICROS = 253402300799999999n

const hashArb = fc.uint8Array({ minLength: 32, maxLength: 32 }).map((b) => Buffer.from(b).toString("hex"))
const microsArb = fc.bigInt({ min: 0n, max: MAX_MICROS })

type Jwk = { readonly kty: string; readonly crv: string; readonly x: string; readonly y: string }

/** node:crypto, from the JWK alone. */
const nodeCheck = (jwk: Jwk, payload: string, signatureB64: string): boolean => {
  const key = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, format: "jwk" })
  return nodeVerify("sha256", Buffer.from(payload, "utf8"), { key, dsaEncoding: "der" }, Buffer.from(signatureB64, "base64"))
}

/** @noble/curves: strict low-S verify, message hashed with SHA-256 by noble itself (prehash default). */
const nobleCheck = (jwk: Jwk, payload: string, signatureB64: string): boolean => {
  const pub = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x, "base64url"), Buffer.from(jwk.y, "base64url")])
  try {
    return p256.verify(Buffer.from(signatureB64, "base64"), Buffer.from(payload, "utf8"), pub, { format: "der" })
  } catch {
    return false
  }
}

/** The same, with the digest computed here and prehash off. */
const noblePrehashedCheck = (jwk: Jwk, payload: string, signatureB64: string): boolean => {
  const pub = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x, "base64url"), Buffer.from(jwk.y, "base64url")])
  const digest = createHash("sha256").update(payload, "utf8").digest()
  return p256.verify(Buffer.from(signatureB64, "base64"), digest, pub, { format: "der", prehash: false })
}

/** Minimal DER reader for SEQUENCE { INTEGER r, INTEGER s }, written independently of src/Domain/T0.ts. */
const derRS = (der: Buffer): { r: bigint; s: bigint } => {
  expect(der[0]).toBe(0x30)
  expect(der[1]).toBe(der.length - 2) // short form length: P-256 signatures are < 128 bytes
  let offset = 2
  const ints: Array<bigint> = []
  for (let i = 0; i < 2; i++) {
    expect(der[offset]).toBe(0x02)
    const len = der[offset + 1]!
    const bytes = der.subarray(offset + 2, offset + 2 + len)
    expect(bytes.length).toBe(len)
    expect(len).toBeGreaterThan(0)
    // minimal encoding: no superfluous leading zero, no negative numbers
    expect(bytes[0]! & 0x80).toBe(0)
    if (len > 1 && bytes[0] === 0) expect(bytes[1]! & 0x80).toBe(0x80)
    ints.push(BigInt("0x" + bytes.toString("hex")))
    offset += 2 + len
  }
  expect(offset).toBe(der.length)
  return { r: ints[0]!, s: ints[1]! }
}

describe("T0 signatures", () => {
  const key = ephemeralKey()
  const other = ephemeralKey()

  it("the published JWK is a P-256 ES256 key whose kid is its RFC 7638 thumbprint", () => {
    expect(key.jwk).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256" })
    expect(Buffer.from(key.jwk.x, "base64url")).toHaveLength(32)
    expect(Buffer.from(key.jwk.y, "base64url")).toHaveLength(32)
    const thumbprint = createHash("sha256")
      .update(`{"crv":"P-256","kty":"EC","x":"${key.jwk.x}","y":"${key.jwk.y}"}`)
      .digest("base64url")
    expect(key.kid).toBe(thumbprint)
    expect(key.jwk.kid).toBe(thumbprint)
    expect(other.kid).not.toBe(key.kid)
  })

  it("the payload is format_version|hash_hex|registered_at with no whitespace", () => {
    const h = "ab".repeat(32)
    expect(t0Payload(h, "2026-01-15T12:34:56.789012+00:00")).toBe(`2.0.0|${h}|2026-01-15T12:34:56.789012+00:00`)
    expect(FORMAT_VERSION).toBe("2.0.0")
  })

  it("signatures verify with the JWK through node:crypto and through @noble/curves (strict low-S)", () => {
    fc.assert(
      fc.property(hashArb, microsArb, (hash, micros) => {
        const registeredAt = formatMicros(micros)
        const payload = `2.0.0|${hash}|${registeredAt}`
        const sig = signPayload(key.privateKey, payload)
        expect(nodeCheck(key.jwk, payload, sig)).toBe(true)
        expect(nobleCheck(key.jwk, payload, sig)).toBe(true)
        expect(noblePrehashedCheck(key.jwk, payload, sig)).toBe(true)
        const { r, s } = derRS(Buffer.from(sig, "base64"))
        expect(r > 0n && r < P256_N).toBe(true)
        expect(s > 0n && s <= P256_N / 2n).toBe(true)
      }),
      { numRuns: 200 }
    )
  })

  it("altering registered_at by 1 µs, the hash, or the key makes verification fail", () => {
    fc.assert(
      fc.property(hashArb, hashArb, fc.bigInt({ min: 0n, max: MAX_MICROS - 1n }), (hash, otherHash, micros) => {
        fc.pre(hash !== otherHash)
        const registeredAt = formatMicros(micros)
        const sig = signPayload(key.privateKey, `2.0.0|${hash}|${registeredAt}`)
        const later = `2.0.0|${hash}|${formatMicros(micros + 1n)}`
        expect(nodeCheck(key.jwk, later, sig)).toBe(false)
        expect(nobleCheck(key.jwk, later, sig)).toBe(false)
        if (micros > 0n) {
          const earlier = `2.0.0|${hash}|${formatMicros(micros - 1n)}`
          expect(nodeCheck(key.jwk, earlier, sig)).toBe(false)
        }
        const otherPayload = `2.0.0|${otherHash}|${registeredAt}`
        expect(nodeCheck(key.jwk, otherPayload, sig)).toBe(false)
        expect(nobleCheck(key.jwk, otherPayload, sig)).toBe(false)
        const payload = `2.0.0|${hash}|${registeredAt}`
        expect(nodeCheck(other.jwk, payload, sig)).toBe(false)
        expect(nobleCheck(other.jwk, payload, sig)).toBe(false)
        // another format version is another payload
        expect(nodeCheck(key.jwk, `2.0.1|${hash}|${registeredAt}`, sig)).toBe(false)
      }),
      { numRuns: 100 }
    )
  })

  it("signatures are randomised but each verifies", () => {
    const payload = t0Payload("00".repeat(32), formatMicros(0n))
    const a = signPayload(key.privateKey, payload)
    const b = signPayload(key.privateKey, payload)
    expect(a).not.toBe(b)
    expect(nodeCheck(key.jwk, payload, a) && nodeCheck(key.jwk, payload, b)).toBe(true)
  })
})

describe("wire time format", () => {
  it("formatMicros gives YYYY-MM-DDTHH:MM:SS.ffffff+00:00 and parseMicros inverts it", () => {
    fc.assert(
      fc.property(microsArb, (micros) => {
        const s = formatMicros(micros)
        expect(s).toMatch(WIRE_TIME)
        expect(parseMicros(s)).toBe(micros)
        // the seconds part agrees with Date
        expect(s.slice(0, 19)).toBe(new Date(Number(micros / 1000n)).toISOString().slice(0, 19))
        expect(s.slice(20, 26)).toBe(String(micros % 1_000_000n).padStart(6, "0"))
      }),
      { numRuns: 500 }
    )
  })

  it("known values", () => {
    expect(formatMicros(0n)).toBe("1970-01-01T00:00:00.000000+00:00")
    expect(formatMicros(1n)).toBe("1970-01-01T00:00:00.000001+00:00")
    expect(formatMicros(1_768_480_496_789_012n)).toBe("2026-01-15T12:34:56.789012+00:00")
    expect(formatMicros(MAX_MICROS)).toBe("9999-12-31T23:59:59.999999+00:00")
    expect(formatMillis(1_768_480_496_789)).toBe("2026-01-15T12:34:56.789000+00:00")
    expect(parseMicros("2026-01-15T12:34:56.789012+00:00")).toBe(1_768_480_496_789_012n)
  })

  it("formatMillis is formatMicros of millis × 1000", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 253402300799999 }), (ms) => {
        expect(formatMillis(ms)).toBe(formatMicros(BigInt(ms) * 1000n))
      })
    )
  })

  it("parseMicros rejects anything but the exact wire format", () => {
    for (
      const s of [
        "2026-01-15T12:34:56.789012Z",
        "2026-01-15T12:34:56.789Z",
        "2026-01-15T12:34:56.789+00:00",
        "2026-01-15T12:34:56.7890123+00:00",
        "2026-01-15T12:34:56.789012+01:00",
        "2026-01-15T12:34:56.789012-00:00",
        "2026-01-15 12:34:56.789012+00:00",
        " 2026-01-15T12:34:56.789012+00:00",
        "2026-01-15T12:34:56.789012+00:00 ",
        "2026-13-01T00:00:00.000000+00:00",
        ""
      ]
    ) expect(parseMicros(s), s).toBeUndefined()
  })

  it("parseMicros rejects impossible calendar dates instead of rolling them over", () => {
    // Date.parse rolls 2024-02-30 over to 2024-03-01; the wire format must not.
    for (
      const s of [
        "2024-02-30T00:00:00.000000+00:00",
        "2023-02-29T00:00:00.000000+00:00",
        "2024-04-31T00:00:00.000000+00:00",
        "2024-01-01T24:00:00.000000+00:00"
      ]
    ) {
      const parsed = parseMicros(s)
      expect(parsed === undefined || formatMicros(parsed) === s, s).toBe(true)
    }
  })
})
