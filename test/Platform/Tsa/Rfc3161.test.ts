import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { issueTimeStampToken, loadSigner } from "../../../src/Platform/Tsa/DemoTsa.js"
import {
  buildTimeStampRequest,
  OID,
  parseTimeStampResponse,
  parseTimeStampToken,
  toHex,
  TsaValidationError,
  validateTimeStampToken,
  verifyTokenOffline
} from "../../../src/Platform/Tsa/Rfc3161.js"
import { type OpensslTsa, opensslVerify, startOpensslTsa, TEST_TSA_POLICY } from "../../helpers/opensslTsa.js"

const digest32 = () => new Uint8Array(randomBytes(32))

const post = async (url: string, der: Uint8Array): Promise<Uint8Array> => {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/timestamp-query" }, body: der })
  expect(res.status).toBe(200)
  return new Uint8Array(await res.arrayBuffer())
}

/** Request a token from an openssl TSA; returns token + the request nonce. */
const stampAt = async (tsa: OpensslTsa, digest: Uint8Array) => {
  const req = buildTimeStampRequest(digest)
  const parsed = parseTimeStampResponse(await post(tsa.url, req.der))
  expect(parsed.status).toBe(0)
  expect(parsed.token).toBeDefined()
  return { token: parsed.token!, nonce: req.nonce }
}

const expectReject = async (p: Promise<unknown>, reason: RegExp) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e
  )
  expect(err).toBeInstanceOf(TsaValidationError)
  expect((err as TsaValidationError).reason).toMatch(reason)
}

describe("buildTimeStampRequest", () => {
  it("encodes the raw digest, SHA-256, certReq and a positive nonce", () => {
    const digest = digest32()
    const { der, nonce } = buildTimeStampRequest(digest)
    expect(nonce.byteLength).toBe(8)
    const req = pkijs.TimeStampReq.fromBER(der)
    expect(req.version).toBe(1)
    expect(req.messageImprint.hashAlgorithm.algorithmId).toBe(OID.sha256)
    expect(toHex(new Uint8Array(req.messageImprint.hashedMessage.valueBlock.valueHexView))).toBe(toHex(digest))
    expect(req.certReq).toBe(true)
    expect(req.nonce).toBeDefined()
    const n = req.nonce!.toBigInt()
    expect(n > 0n).toBe(true)
    expect(n).toBe(BigInt(`0x${toHex(nonce)}`))
  })

  it("keeps a high-bit nonce positive and minimally encoded", () => {
    const nonce = new Uint8Array([0xff, 1, 2, 3, 4, 5, 6, 7])
    const { der } = buildTimeStampRequest(digest32(), nonce)
    const req = pkijs.TimeStampReq.fromBER(der)
    const raw = new Uint8Array(req.nonce!.valueBlock.valueHexView)
    expect(raw[0]).toBe(0)
    expect(raw.length).toBe(9)
    expect(req.nonce!.toBigInt()).toBe(BigInt("0xff01020304050607"))
    const small = buildTimeStampRequest(digest32(), new Uint8Array([0, 0, 0x12]))
    expect(new Uint8Array(pkijs.TimeStampReq.fromBER(small.der).nonce!.valueBlock.valueHexView)).toEqual(new Uint8Array([0x12]))
  })

  it("rejects digests that are not 32 bytes", () => {
    expect(() => buildTimeStampRequest(new Uint8Array(31))).toThrow(RangeError)
  })

  it("is understood by `openssl ts -query -in … -text`", async () => {
    const digest = digest32()
    const { der, nonce } = buildTimeStampRequest(digest)
    const dir = await mkdtemp(join(tmpdir(), "attestd-tsq-"))
    try {
      await writeFile(join(dir, "q.tsq"), der)
      const out = await new Promise<string>((resolve, reject) =>
        execFile("openssl", ["ts", "-query", "-in", join(dir, "q.tsq"), "-text"], (err, stdout) => (err ? reject(err) : resolve(stdout)))
      )
      expect(out).toMatch(/Hash Algorithm: sha256/)
      expect(out).toMatch(/Certificate required: yes/)
      expect(out.toLowerCase()).toContain(`nonce: 0x${toHex(nonce).replace(/^(00)+/, "")}`)
      const dumped = [...out.matchAll(/^\s*[0-9a-f]{4} - ([0-9a-f -]+?)\s{2,}/gim)].map((m) => m[1]!.replace(/[ -]/g, "")).join("")
      expect(dumped).toBe(toHex(digest))
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe("parseTimeStampResponse", () => {
  it("throws TsaValidationError on garbage", () => {
    expect(() => parseTimeStampResponse(new Uint8Array(randomBytes(64)))).toThrow(TsaValidationError)
    expect(() => parseTimeStampResponse(new Uint8Array(0))).toThrow(TsaValidationError)
  })
})

describe("against an OpenSSL TSA", () => {
  let tsa: OpensslTsa
  let other: OpensslTsa
  let v1: OpensslTsa
  let rsa: OpensslTsa

  beforeAll(async () => {
    ;[tsa, other, v1, rsa] = await Promise.all([
      startOpensslTsa(),
      startOpensslTsa({ commonName: "other" }),
      startOpensslTsa({ commonName: "legacy", essCertIdAlg: "sha1", includeChain: true }),
      startOpensslTsa({ commonName: "rsa", keyType: "rsa" })
    ])
  })
  afterAll(async () => {
    await Promise.all([tsa?.close(), other?.close(), v1?.close(), rsa?.close()])
  })

  it("accepts a genuine token, which openssl also verifies", async () => {
    const digest = digest32()
    const { token, nonce } = await stampAt(tsa, digest)
    const v = await validateTimeStampToken(token, { digest, nonce, trustAnchorsPem: tsa.caPem, requireChain: true })
    expect(v.chainVerified).toBe(true)
    expect(v.hashedMessage).toBe(toHex(digest))
    expect(v.policy).toBe(TEST_TSA_POLICY)
    expect(v.nonce).toBe(BigInt(`0x${toHex(nonce)}`).toString())
    expect(Math.abs(v.genTime.getTime() - Date.now())).toBeLessThan(60_000)
    const ossl = await opensslVerify(token, toHex(digest), tsa.caFile, tsa.tsaCertFile)
    expect(ossl.ok, ossl.output).toBe(true)
  })

  it("accepts ESS signingCertificate (v1, SHA-1) tokens with an embedded chain", async () => {
    const digest = digest32()
    const { token, nonce } = await stampAt(v1, digest)
    const v = await validateTimeStampToken(token, { digest, nonce, trustAnchorsPem: v1.caPem, requireChain: true })
    expect(v.details.certificates.length).toBe(2)
    expect((await opensslVerify(token, toHex(digest), v1.caFile)).ok).toBe(true)
  })

  it("accepts RSA-signed tokens", async () => {
    const digest = digest32()
    const { token, nonce } = await stampAt(rsa, digest)
    await validateTimeStampToken(token, { digest, nonce, trustAnchorsPem: rsa.caPem, requireChain: true })
    const sig = new Uint8Array(token)
    sig[sig.length - 1] = sig[sig.length - 1]! ^ 0x01
    await expectReject(validateTimeStampToken(sig, { digest, trustAnchorsPem: rsa.caPem, requireChain: true }), /signature/i)
  })

  it("accepts the TSA certificate itself pinned as trust anchor", async () => {
    const { readFile } = await import("node:fs/promises")
    const digest = digest32()
    const { token } = await stampAt(tsa, digest)
    const v = await validateTimeStampToken(token, { digest, trustAnchorsPem: await readFile(tsa.tsaCertFile, "utf8"), requireChain: true })
    expect(v.chainVerified).toBe(true)
    // a different TSA's leaf pinned does not help
    await expectReject(
      validateTimeStampToken(token, { digest, trustAnchorsPem: await readFile(other.tsaCertFile, "utf8"), requireChain: true }),
      /certificate|path/i
    )
  })

  it("parseTimeStampToken gives the expected fields", async () => {
    const digest = digest32()
    const before = Date.now()
    const { token, nonce } = await stampAt(tsa, digest)
    const d = parseTimeStampToken(token)
    const genTime = Date.parse(d.gen_time)
    expect(d.gen_time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(genTime).toBeGreaterThanOrEqual(before - 2000)
    expect(genTime).toBeLessThanOrEqual(Date.now() + 2000)
    expect(d.hashed_message).toBe(toHex(digest))
    expect(d.hash_algorithm).toBe("SHA-256")
    expect(d.policy).toBe(TEST_TSA_POLICY)
    expect(d.nonce).toBe(BigInt(`0x${toHex(nonce)}`).toString())
    expect(d.serial_number).toMatch(/^\d+$/)
    expect(d.accuracy).toEqual({ seconds: 1, millis: 500, micros: 100 })
    expect(d.tsa_name).toBe("CN=attestd test tsa,O=attestd test")
    expect(d.certificates.length).toBeGreaterThan(0)
    expect(d.certificates[0]).toMatchObject({ subject: "CN=attestd test tsa,O=attestd test", issuer: "CN=attestd test root CA,O=attestd test" })
    expect(Date.parse(d.certificates[0]!.not_after)).toBeGreaterThan(Date.now())
    // same as what validation returns
    const v = await validateTimeStampToken(token, { digest, trustAnchorsPem: tsa.caPem, requireChain: true })
    expect(v.details).toEqual(d)
  })

  it("rejects a wrong digest", async () => {
    const digest = digest32()
    const { token } = await stampAt(tsa, digest)
    const wrong = digest32()
    await expectReject(validateTimeStampToken(token, { digest: wrong, trustAnchorsPem: tsa.caPem, requireChain: true }), /imprint/)
    expect((await opensslVerify(token, toHex(wrong), tsa.caFile)).ok).toBe(false)
  })

  it("rejects a wrong or missing nonce", async () => {
    const digest = digest32()
    const { token, nonce } = await stampAt(tsa, digest)
    const wrong = new Uint8Array(nonce)
    wrong[7] = wrong[7]! ^ 1
    await expectReject(validateTimeStampToken(token, { digest, nonce: wrong, trustAnchorsPem: tsa.caPem, requireChain: true }), /nonce/)
  })

  it("rejects a token from a different CA", async () => {
    const digest = digest32()
    const { token } = await stampAt(other, digest)
    await validateTimeStampToken(token, { digest, trustAnchorsPem: other.caPem, requireChain: true })
    await expectReject(validateTimeStampToken(token, { digest, trustAnchorsPem: tsa.caPem, requireChain: true }), /certificate|path/i)
    // ...but several anchors in one PEM are fine
    await validateTimeStampToken(token, { digest, trustAnchorsPem: tsa.caPem + other.caPem, requireChain: true })
  })

  it("rejects a signer without a critical (or with a wrong) EKU", async () => {
    const digest = digest32()
    const mi = () =>
      new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: digest })
      })
    // control: the proper TSA certificate signed through our own token builder passes
    const { readFile } = await import("node:fs/promises")
    const good = await loadSigner(await readFile(tsa.tsaCertFile, "utf8"), await readFile(tsa.tsaKeyFile, "utf8"))
    const okToken = await issueTimeStampToken(good, { messageImprint: mi(), includeCertificate: true })
    await validateTimeStampToken(okToken, { digest, trustAnchorsPem: tsa.caPem, requireChain: true })
    expect((await opensslVerify(okToken, toHex(digest), tsa.caFile)).ok).toBe(true)

    const nonCrit = await tsa.issueLeaf({ name: "noncrit", ekuCritical: false })
    const s1 = await loadSigner(nonCrit.certPem, nonCrit.keyPem)
    const t1 = await issueTimeStampToken(s1, { messageImprint: mi(), includeCertificate: true })
    await expectReject(validateTimeStampToken(t1, { digest, trustAnchorsPem: tsa.caPem, requireChain: true }), /not critical/)
    expect((await opensslVerify(t1, toHex(digest), tsa.caFile)).ok).toBe(false)

    const extra = await tsa.issueLeaf({ name: "extra", ekuCritical: true, eku: "timeStamping, codeSigning" })
    const s2 = await loadSigner(extra.certPem, extra.keyPem)
    const t2 = await issueTimeStampToken(s2, { messageImprint: mi(), includeCertificate: true })
    await expectReject(validateTimeStampToken(t2, { digest, trustAnchorsPem: tsa.caPem, requireChain: true }), /exactly id-kp-timeStamping/)
  })

  it("rejects a tampered signature and a tampered TSTInfo", async () => {
    const digest = digest32()
    const { token } = await stampAt(tsa, digest)
    // The signature OCTET STRING is the last element of the token (no unsigned attrs).
    const sig = new Uint8Array(token)
    sig[sig.length - 3] = sig[sig.length - 3]! ^ 0x01
    await expectReject(validateTimeStampToken(sig, { digest, trustAnchorsPem: tsa.caPem, requireChain: true }), /signature|verif/i)
    await expectReject(verifyTokenOffline(sig, digest), /signature|verif/i)
    expect((await opensslVerify(sig, toHex(digest), tsa.caFile)).ok).toBe(false)

    // Flip the last byte of the TSTInfo (a character of the TSA name, so it still parses).
    const sd = new pkijs.SignedData({ schema: pkijs.ContentInfo.fromBER(token).content })
    const tstDer = Buffer.from(sd.encapContentInfo.eContent!.getValue())
    const at = Buffer.from(token).indexOf(tstDer)
    expect(at).toBeGreaterThan(0)
    const tst = new Uint8Array(token)
    const idx = at + tstDer.length - 1
    tst[idx] = tst[idx]! ^ 0x01
    expect(parseTimeStampToken(tst).tsa_name).not.toBe(parseTimeStampToken(token).tsa_name)
    await expectReject(validateTimeStampToken(tst, { digest, trustAnchorsPem: tsa.caPem, requireChain: true }), /digest/i)
    expect((await opensslVerify(tst, toHex(digest), tsa.caFile)).ok).toBe(false)
  })

  it("verifyTokenOffline works without anchors (chain unverified) and with them", async () => {
    const digest = digest32()
    const { token } = await stampAt(tsa, digest)
    const loose = await verifyTokenOffline(token, digest)
    expect(loose.chainVerified).toBe(false)
    const strict = await verifyTokenOffline(token, digest, tsa.caPem)
    expect(strict.chainVerified).toBe(true)
    await expectReject(verifyTokenOffline(token, digest, other.caPem), /certificate|path/i)
  })

  it("parses a rejection reply", async () => {
    // SHA-1 imprint is not in the TSA's `digests` list → rejection with badAlg.
    const req = new pkijs.TimeStampReq({
      version: 1,
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha1, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(20) })
      }),
      certReq: true
    })
    const parsed = parseTimeStampResponse(await post(tsa.url, new Uint8Array(req.toSchema().toBER())))
    expect(parsed.status).toBe(2)
    expect(parsed.failInfo).toContain("badAlg")
    expect(parsed.token).toBeUndefined()
  })
})
