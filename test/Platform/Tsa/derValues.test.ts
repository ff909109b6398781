/**
 * The two DER values attestd reads or writes through asn1js with a step of its own:
 * an OBJECT IDENTIFIER's dotted form with arcs above 2^53, and an INTEGER from
 * unsigned bytes. Each is checked against OpenSSL's own encoder (`openssl asn1parse
 * -genstr`), which shares no code with asn1js.
 */
import * as asn1js from "asn1js"
import * as fc from "fast-check"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { oidToString, positiveInteger } from "../../../src/Platform/Tsa/Rfc3161.js"

const dir = mkdtempSync(join(tmpdir(), "attestd-der-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const opensslDer = (spec: string): Uint8Array => {
  const out = join(dir, "value.der")
  execFileSync("openssl", ["asn1parse", "-genstr", spec, "-noout", "-out", out])
  return new Uint8Array(readFileSync(out))
}

const arc = fc.oneof(
  fc.integer({ min: 0, max: 2 ** 31 }).map(BigInt),
  fc.bigInt({ min: 2n ** 53n - 2n, max: 2n ** 160n })
)

/** A valid dotted OID: 0.x and 1.x with x < 40, 2.x with any x (its first subidentifier 80 + x). */
const dottedOid = fc.tuple(
  fc.oneof(
    fc.tuple(fc.constantFrom(0n, 1n), fc.bigInt({ min: 0n, max: 39n })),
    fc.tuple(fc.constant(2n), arc)
  ),
  fc.array(arc, { maxLength: 5 })
).map(([[first, second], rest]) => [first, second, ...rest].join("."))

describe("DER values beside asn1js", () => {
  it("oidToString gives back every arc of what OpenSSL encodes, however large", () => {
    fc.assert(
      fc.property(dottedOid, (oid) => {
        const parsed = asn1js.fromBER(opensslDer(`OID:${oid}`))
        expect(parsed.result).toBeInstanceOf(asn1js.ObjectIdentifier)
        expect(oidToString(parsed.result as asn1js.ObjectIdentifier)).toBe(oid)
      }),
      { numRuns: 60 }
    )
  })

  it("positiveInteger encodes unsigned bytes as OpenSSL encodes the same value", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 24 }), (bytes) => {
        const hex = Buffer.from(bytes).toString("hex") || "0"
        const ours = new Uint8Array(positiveInteger(bytes).toBER())
        expect(Buffer.from(ours).toString("hex")).toBe(Buffer.from(opensslDer(`INTEGER:0x${hex}`)).toString("hex"))
      }),
      { numRuns: 60 }
    )
  })

  it("positiveInteger keeps the high bit positive and drops redundant zeros", () => {
    const contents = (hex: string) => Buffer.from(positiveInteger(Buffer.from(hex, "hex")).valueBlock.valueHexView).toString("hex")
    expect(contents("")).toBe("00")
    expect(contents("0000")).toBe("00")
    expect(contents("80")).toBe("0080")
    expect(contents("000080")).toBe("0080")
    expect(contents("00007f")).toBe("7f")
  })
})
