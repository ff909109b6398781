import { randomBytes, sign } from "node:crypto"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as fc from "fast-check"
import * as pkijs from "pkijs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type DemoTsa, loadOrCreateDemoTsa } from "../../../src/Platform/Tsa/DemoTsa.js"
import { OID, parseTimeStampResponse, validateTimeStampToken } from "../../../src/Platform/Tsa/Rfc3161.js"
import { prepareToken, randomSerial, SIGNATURE_OID, type TokenContent } from "../../../src/Platform/Tsa/TokenIssuer.js"

/**
 * The token's SignedData as it is and as pkijs encodes its own parse of it, and its
 * TSTInfo as it is and as asn1js encodes its parse (pkijs renders the arcs of a
 * 2.25.<uuid> policy as "{hex}", so it cannot write such a TSTInfo back).
 */
const reencodings = (token: Uint8Array) => {
  const contentInfo = new pkijs.ContentInfo({ schema: asn1js.fromBER(token).result })
  const signedData = new pkijs.SignedData({ schema: contentInfo.content })
  const eContent = new Uint8Array(signedData.encapContentInfo.eContent!.valueBlock.valueHexView)
  return {
    signedData: new Uint8Array((contentInfo.content as asn1js.Sequence).toBER()),
    signedDataByPkijs: new Uint8Array(signedData.toSchema(true).toBER()),
    tstInfo: eContent,
    tstInfoByAsn1js: new Uint8Array(asn1js.fromBER(eContent).result.toBER())
  }
}

describe("token issuer", () => {
  let dataDir: string
  let demo: DemoTsa

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "attestd-token-issuer-"))
    demo = await loadOrCreateDemoTsa(dataDir)
  })
  afterAll(async () => {
    await rm(dataDir, { recursive: true, force: true })
  })

  const content = (c: Partial<TokenContent>): TokenContent => ({
    signer: demo.signer.tokens,
    includeCertificates: true,
    signatureAlgorithm: SIGNATURE_OID.ecdsaWithSha256,
    policy: "2.999.1",
    hashAlgorithm: OID.sha256,
    hashedMessage: new Uint8Array(randomBytes(32)),
    serial: randomSerial().integer,
    genTime: new Date(),
    accuracyMs: 1000,
    nonce: undefined,
    ...c
  })

  it("property: tokens spliced from pre-encoded parts are DER that re-encodes byte for byte, and validate", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        fc.option(fc.uint8Array({ minLength: 1, maxLength: 16 }).map((b) => (b[0]! < 0x80 ? b : Uint8Array.of(0, ...b))), { nil: undefined }),
        fc.option(fc.integer({ min: 1, max: 5000 }), { nil: undefined }),
        fc.constantFrom("2.999.1", "2.25.171672182662607890638224622533623195356"),
        fc.constantFrom([OID.sha256, 32], [OID.sha384, 48], [OID.sha512, 64]),
        async (includeCertificates, nonce, accuracyMs, policy, [hashAlgorithm, length]) => {
          const prepared = prepareToken(content({
            includeCertificates,
            nonce,
            accuracyMs,
            policy,
            hashAlgorithm: hashAlgorithm as string,
            hashedMessage: new Uint8Array(randomBytes(length as number))
          }))
          const signature = sign("sha256", prepared.signedAttributes, { key: demo.signer.privateKey, dsaEncoding: "der" })
          const { token, response } = prepared.finishGranted(signature)
          expect(prepared.finish(signature)).toEqual(token)
          expect(parseTimeStampResponse(response).token).toEqual(token)

          const again = reencodings(token)
          expect(again.signedDataByPkijs).toEqual(again.signedData)
          expect(again.tstInfoByAsn1js).toEqual(again.tstInfo)

          const validated = await validateTimeStampToken(token, {
            digest: null,
            ...(nonce !== undefined ? { nonce } : {}),
            trustAnchorsPem: demo.rootPem,
            requireChain: true,
            // without certReq the verifier is handed the TSA certificate, as a client that asked for none has it
            ...(includeCertificates ? {} : { certificatesPem: demo.tsaCertPem })
          })
          expect(validated.policy).toBe(policy)
        }
      ),
      { numRuns: 40 }
    )
  })

  it("embeds the certificates only when asked, and names the TSA either way", () => {
    for (const includeCertificates of [true, false]) {
      const prepared = prepareToken(content({ includeCertificates }))
      const token = prepared.finish(sign("sha256", prepared.signedAttributes, { key: demo.signer.privateKey, dsaEncoding: "der" }))
      const signedData = new pkijs.SignedData({ schema: new pkijs.ContentInfo({ schema: asn1js.fromBER(token).result }).content })
      expect(signedData.certificates?.length ?? 0).toBe(includeCertificates ? 1 : 0)
      const tstInfo = new pkijs.TSTInfo({ schema: asn1js.fromBER(signedData.encapContentInfo.eContent!.valueBlock.valueHexView).result })
      expect(tstInfo.tsa?.value.isEqual(demo.signer.certificate.subject)).toBe(true)
    }
  })
})
