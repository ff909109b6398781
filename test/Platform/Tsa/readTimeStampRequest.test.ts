import * as asn1js from "asn1js"
import * as fc from "fast-check"
import * as pkijs from "pkijs"
import { describe, expect, it } from "vitest"
import { OID, oidToString } from "../../../src/Platform/Tsa/Rfc3161.js"
import { isRefusal, readTimeStampRequest, type TimeStampRequestFields } from "../../../src/Platform/Tsa/TokenIssuer.js"

/**
 * The request as pkijs' TimeStampReq reads it (schema-checked), with whether pkijs writes
 * back exactly `der` (it ignores elements after those it knows); undefined when pkijs
 * refuses it.
 */
const byPkijs = (der: Uint8Array): { readonly fields: TimeStampRequestFields; readonly whole: boolean } | undefined => {
  let req: pkijs.TimeStampReq
  let asn: asn1js.AsnType
  try {
    const parsed = asn1js.fromBER(der)
    if (parsed.offset === -1 || parsed.offset !== der.byteLength || !(parsed.result instanceof asn1js.Sequence)) return undefined
    asn = parsed.result
    req = new pkijs.TimeStampReq({ schema: asn })
  } catch {
    return undefined
  }
  const policyBlock = (asn as asn1js.Sequence).valueBlock.value.find((b) => b instanceof asn1js.ObjectIdentifier)
  return {
    fields: {
      version: req.version,
      hashAlgorithm: req.messageImprint.hashAlgorithm.algorithmId,
      hashedMessage: req.messageImprint.hashedMessage.valueBlock.valueHexView.slice(),
      reqPolicy: policyBlock instanceof asn1js.ObjectIdentifier ? oidToString(policyBlock) : undefined,
      nonce: req.nonce?.valueBlock.valueHexView.slice(),
      certReq: req.certReq === true,
      extensionCount: req.extensions?.length ?? 0
    },
    whole: Buffer.from(req.toSchema().toBER()).equals(der)
  }
}

const request = fc.record({
  version: fc.integer({ min: 0, max: 3 }),
  algorithm: fc.constantFrom(OID.sha256, OID.sha384, OID.sha512, OID.sha1, "1.2.3.4"),
  nullParams: fc.boolean(),
  digest: fc.uint8Array({ minLength: 0, maxLength: 70 }),
  policy: fc.option(fc.constantFrom("2.999.1", "1.2.3", "2.25.171672182662607890638224622533623195356"), { nil: undefined }),
  nonce: fc.option(fc.bigInt({ min: 0n, max: 1n << 80n }), { nil: undefined }),
  certReq: fc.option(fc.boolean(), { nil: undefined }),
  extensions: fc.option(fc.integer({ min: 0, max: 2 }), { nil: undefined })
}).map((r) =>
  new Uint8Array(
    new pkijs.TimeStampReq({
      version: r.version,
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: r.algorithm, ...(r.nullParams ? { algorithmParams: new asn1js.Null() } : {}) }),
        hashedMessage: new asn1js.OctetString({ valueHex: r.digest })
      }),
      ...(r.policy !== undefined ? { reqPolicy: r.policy } : {}),
      ...(r.nonce !== undefined ? { nonce: asn1js.Integer.fromBigInt(r.nonce) } : {}),
      ...(r.certReq !== undefined ? { certReq: r.certReq } : {}),
      ...(r.extensions !== undefined
        ? {
          extensions: Array.from({ length: r.extensions }, (_, i) =>
            new pkijs.Extension({ extnID: `1.2.3.${i}`, critical: i === 1, extnValue: new asn1js.Null().toBER() }))
        }
        : {})
    }).toSchema().toBER()
  )
)

/** A request with one byte changed, cut short, or grown. */
const garbled = fc.tuple(request, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom("set", "cut", "append")).map(
  ([der, at, byte, how]) => {
    const i = at % der.length
    if (how === "cut") return der.slice(0, i)
    if (how === "append") return new Uint8Array([...der, byte])
    const copy = der.slice()
    copy[i] = byte
    return copy
  }
)

describe("readTimeStampRequest", () => {
  it("property: reads a request, whole or garbled, as pkijs' TimeStampReq does, and refuses what pkijs reads only in part", () => {
    fc.assert(
      fc.property(fc.oneof(request, garbled), (der) => {
        const ours = readTimeStampRequest(der)
        const reference = byPkijs(der)
        if (reference === undefined) expect(isRefusal(ours) && ours.failInfo).toBe("badDataFormat")
        else if (isRefusal(ours)) expect([ours.failInfo, reference.whole]).toEqual(["badDataFormat", false])
        else expect(ours).toEqual(reference.fields)
      }),
      { numRuns: 5000 }
    )
  })

  it("refuses, rather than throws on, contents asn1js cannot parse (a GeneralizedTime that is not one)", () => {
    const der = Buffer.from(
      "30370201013013300b06096086480165030402030404296748591803883701020b00d4348a0aa034557477bda00b300906032a030004020500",
      "hex"
    )
    expect(readTimeStampRequest(new Uint8Array(der))).toMatchObject({ failInfo: "badDataFormat" })
  })
})
