/**
 * Embedded demo TSA: a local, UNQUALIFIED RFC 3161 time-stamping authority
 * used when no ATTESTD_TSA_URL is configured.
 *
 * Key material lives in `<dataDir>/demo-tsa/`:
 *   root.pem      self-signed root CA (the trust anchor)
 *   root-key.pem  its PKCS#8 private key (0600)
 *   tsa.pem       TSA leaf certificate (critical EKU id-kp-timeStamping only)
 *   tsa-key.pem   its PKCS#8 private key (0600)
 * Generated on first start (ECDSA P-256 / SHA-256), reused afterwards.
 *
 * Tokens are real RFC 3161 TimeStampTokens (CMS SignedData over a DER
 * TSTInfo, signed attributes contentType, messageDigest, signingTime and
 * signingCertificateV2), verifiable with `openssl ts -verify`.
 */
import { createHash, randomBytes, webcrypto } from "node:crypto"
import { chmod, mkdir, readdir, readFile, rename, rm, rmdir, stat, writeFile } from "node:fs/promises"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { makePrivateDir } from "../PrivateFiles.js"
import { derToPem, ensureCryptoEngine, FAIL_INFO_BITS, type FailInfo, OID, pemToDers, positiveIntegerBytes } from "./Rfc3161.js"

type CryptoKey = webcrypto.CryptoKey

/** Provider label recorded for demo stamps. Never claims to be qualified. */
export const DEMO_TSA_PROVIDER = "attestd-demo-tsa (local, unqualified)"

/**
 * TSA policy OID of the demo TSA. It is a UUID-derived OID under the
 * ITU-T X.667 arc 2.25 (self-allocated, no registration needed, so it cannot
 * collide with anybody's real policy): 2.25.<uuid 8126dc16-a9f3-40a4-a302-5e0e67a0a6dc as integer>.
 */
export const DEMO_TSA_POLICY_OID = "2.25.171672182662607890638224622533623195356"

const ROOT_CN = "attestd demo TSA root (local, unqualified)"
const TSA_CN = DEMO_TSA_PROVIDER
const ORG = "attestd demo (not a qualified trust service)"
const VALIDITY_MS = 10 * 365 * 24 * 3600 * 1000

// ---------------------------------------------------------------------------
// Signer (usable with any certificate/key pair, e.g. in tests)
// ---------------------------------------------------------------------------

export interface TsaSigner {
  readonly certificate: pkijs.Certificate
  readonly certificateDer: Uint8Array
  readonly privateKey: CryptoKey
  readonly policy: string
}

const PEM_KEY_RE = /-----BEGIN PRIVATE KEY-----([\s\S]*?)-----END PRIVATE KEY-----/

const keyAlgorithmFor = (
  cert: pkijs.Certificate
): webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams => {
  const alg = cert.subjectPublicKeyInfo.algorithm
  if (alg.algorithmId === "1.2.840.10045.2.1") {
    const params = alg.algorithmParams as asn1js.ObjectIdentifier | undefined
    const curve = params?.valueBlock.toString()
    const namedCurve =
      curve === "1.2.840.10045.3.1.7" ? "P-256" : curve === "1.3.132.0.34" ? "P-384" : curve === "1.3.132.0.35" ? "P-521" : undefined
    if (!namedCurve) throw new Error(`unsupported EC curve ${curve ?? "?"}`)
    return { name: "ECDSA", namedCurve }
  }
  if (alg.algorithmId === "1.2.840.113549.1.1.1") return { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }
  throw new Error(`unsupported key algorithm ${alg.algorithmId}`)
}

/** Build a signer from a PEM certificate and a PEM PKCS#8 private key. */
export const loadSigner = async (certPem: string, keyPem: string, policy = DEMO_TSA_POLICY_OID): Promise<TsaSigner> => {
  ensureCryptoEngine()
  const der = pemToDers(certPem)[0]
  if (!der) throw new Error("no CERTIFICATE in PEM")
  const certificate = pkijs.Certificate.fromBER(der)
  const m = PEM_KEY_RE.exec(keyPem)
  if (!m) throw new Error("no PKCS#8 PRIVATE KEY in PEM")
  const pkcs8 = Buffer.from((m[1] ?? "").replace(/\s+/g, ""), "base64")
  const privateKey = await webcrypto.subtle.importKey("pkcs8", pkcs8, keyAlgorithmFor(certificate), true, ["sign"])
  return { certificate, certificateDer: der, privateKey, policy }
}

const derSortKey = (a: Uint8Array, b: Uint8Array): number => {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!
  return a.length - b.length
}

/** 16 random bytes forming a positive, minimally encoded INTEGER (~126 bits). */
const randomSerial = (): Uint8Array => {
  const b = new Uint8Array(randomBytes(16))
  b[0] = (b[0]! & 0x3f) | 0x40
  return b
}

export interface IssueParams {
  readonly messageImprint: pkijs.MessageImprint
  readonly nonce?: asn1js.Integer
  readonly includeCertificate: boolean
  readonly genTime?: Date
}

/** Sign a TSTInfo and return the TimeStampToken (ContentInfo) DER. */
export const issueTimeStampToken = async (signer: TsaSigner, params: IssueParams): Promise<Uint8Array> => {
  ensureCryptoEngine()
  const genTime = params.genTime ?? new Date()
  const tstInfo = new pkijs.TSTInfo({
    version: 1,
    policy: signer.policy,
    messageImprint: params.messageImprint,
    serialNumber: new asn1js.Integer({ valueHex: randomSerial() }),
    genTime,
    ...(params.nonce !== undefined ? { nonce: params.nonce } : {}),
    tsa: new pkijs.GeneralName({ type: 4, value: signer.certificate.subject })
  })
  const tstInfoDer = new Uint8Array(tstInfo.toSchema().toBER())

  const cert = signer.certificate
  const essCertIdV2 = new asn1js.Sequence({
    value: [
      // hashAlgorithm omitted: DEFAULT id-sha256
      new asn1js.OctetString({ valueHex: new Uint8Array(createHash("sha256").update(signer.certificateDer).digest()) }),
      new asn1js.Sequence({
        value: [
          new asn1js.Sequence({ value: [new pkijs.GeneralName({ type: 4, value: cert.issuer }).toSchema()] }),
          new asn1js.Integer({ valueHex: cert.serialNumber.valueBlock.valueHexView })
        ]
      })
    ]
  })
  const attributes = [
    new pkijs.Attribute({ type: OID.contentType, values: [new asn1js.ObjectIdentifier({ value: OID.tstInfo })] }),
    new pkijs.Attribute({
      type: OID.messageDigest,
      values: [new asn1js.OctetString({ valueHex: new Uint8Array(createHash("sha256").update(tstInfoDer).digest()) })]
    }),
    new pkijs.Attribute({ type: OID.signingTime, values: [new asn1js.UTCTime({ valueDate: genTime })] }),
    new pkijs.Attribute({
      type: OID.signingCertificateV2,
      values: [new asn1js.Sequence({ value: [new asn1js.Sequence({ value: [essCertIdV2] })] })]
    })
  ]
  // DER: SET OF elements sorted by their encodings (OpenSSL re-encodes the
  // signed attributes before verifying, so the order matters).
  const sorted = attributes
    .map((a) => ({ a, der: new Uint8Array(a.toSchema().toBER()) }))
    .sort((x, y) => derSortKey(x.der, y.der))
    .map((x) => x.a)

  const signedData = new pkijs.SignedData({
    version: 3,
    encapContentInfo: new pkijs.EncapsulatedContentInfo({
      eContentType: OID.tstInfo,
      eContent: new asn1js.OctetString({ valueHex: tstInfoDer })
    }),
    signerInfos: [
      new pkijs.SignerInfo({
        version: 1,
        sid: new pkijs.IssuerAndSerialNumber({ issuer: cert.issuer, serialNumber: cert.serialNumber }),
        signedAttrs: new pkijs.SignedAndUnsignedAttributes({ type: 0, attributes: sorted })
      })
    ],
    ...(params.includeCertificate ? { certificates: [cert] } : {})
  })
  await signedData.sign(signer.privateKey, 0, "SHA-256")
  const contentInfo = new pkijs.ContentInfo({ contentType: OID.signedData, content: signedData.toSchema(true) })
  return new Uint8Array(contentInfo.toSchema().toBER())
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

const failInfoBitString = (info: FailInfo): asn1js.BitString => {
  const bit = FAIL_INFO_BITS[info]
  const bytes = new Uint8Array((bit >> 3) + 1)
  bytes[bit >> 3] = 0x80 >> (bit & 7)
  return new asn1js.BitString({ valueHex: bytes, unusedBits: 7 - (bit & 7) })
}

const rejection = (info: FailInfo, text: string): Uint8Array =>
  new Uint8Array(
    new pkijs.TimeStampResp({
      status: new pkijs.PKIStatusInfo({
        status: pkijs.PKIStatus.rejection,
        statusStrings: [new asn1js.Utf8String({ value: text })],
        failInfo: failInfoBitString(info)
      })
    })
      .toSchema()
      .toBER()
  )

/** Answer a DER TimeStampReq with a DER TimeStampResp (granted or rejection). */
export const replyWithSigner = async (signer: TsaSigner, requestDer: Uint8Array): Promise<Uint8Array> => {
  ensureCryptoEngine()
  let req: pkijs.TimeStampReq
  try {
    const asn = asn1js.fromBER(requestDer)
    if (asn.offset === -1 || asn.offset !== requestDer.byteLength) return rejection("badDataFormat", "malformed request")
    req = new pkijs.TimeStampReq({ schema: asn.result })
  } catch {
    return rejection("badDataFormat", "malformed request")
  }
  if (req.version !== 1) return rejection("badRequest", "unsupported request version")
  if (req.messageImprint.hashAlgorithm.algorithmId !== OID.sha256) return rejection("badAlg", "only SHA-256 is accepted")
  if (req.messageImprint.hashedMessage.valueBlock.valueHexView.byteLength !== 32) {
    return rejection("badDataFormat", "hashedMessage must be 32 bytes")
  }
  if (req.reqPolicy !== undefined && req.reqPolicy !== signer.policy) return rejection("unacceptedPolicy", "unknown policy")
  if (req.extensions !== undefined && req.extensions.length > 0) return rejection("unacceptedExtension", "no extensions supported")
  try {
    const token = await issueTimeStampToken(signer, {
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: req.messageImprint.hashedMessage.valueBlock.valueHexView.slice() })
      }),
      ...(req.nonce !== undefined ? { nonce: new asn1js.Integer({ valueHex: req.nonce.valueBlock.valueHexView.slice() }) } : {}),
      includeCertificate: req.certReq === true
    })
    const resp = new pkijs.TimeStampResp({
      status: new pkijs.PKIStatusInfo({ status: pkijs.PKIStatus.granted }),
      timeStampToken: pkijs.ContentInfo.fromBER(token)
    })
    return new Uint8Array(resp.toSchema().toBER())
  } catch {
    return rejection("systemFailure", "signing failed")
  }
}

// ---------------------------------------------------------------------------
// Key material on disk
// ---------------------------------------------------------------------------

export interface DemoTsa {
  readonly provider: string
  readonly dir: string
  readonly rootFile: string
  readonly tsaCertFile: string
  /** PEM of the trust anchor (root.pem). */
  readonly rootPem: string
  /** PEM of the TSA leaf certificate (tsa.pem). */
  readonly tsaCertPem: string
  readonly signer: TsaSigner
  /** Answer a DER TimeStampReq with a DER TimeStampResp. */
  readonly reply: (requestDer: Uint8Array) => Promise<Uint8Array>
  /** Issue a TimeStampToken (ContentInfo DER, TSA certificate embedded) for a 32-byte digest. */
  readonly stamp: (digest: Uint8Array, nonce?: Uint8Array) => Promise<Uint8Array>
}

const name = (cn: string): pkijs.RelativeDistinguishedNames =>
  new pkijs.RelativeDistinguishedNames({
    typesAndValues: [
      new pkijs.AttributeTypeAndValue({ type: "2.5.4.10", value: new asn1js.Utf8String({ value: ORG }) }),
      new pkijs.AttributeTypeAndValue({ type: "2.5.4.3", value: new asn1js.Utf8String({ value: cn }) })
    ]
  })

const ext = (extnID: string, critical: boolean, value: asn1js.AsnType): pkijs.Extension =>
  new pkijs.Extension({ extnID, critical, extnValue: value.toBER(false) })

const keyUsageBits = (byte: number, unusedBits: number): asn1js.BitString =>
  new asn1js.BitString({ valueHex: new Uint8Array([byte]), unusedBits })

const keyId = (cert: pkijs.Certificate): Uint8Array =>
  new Uint8Array(createHash("sha1").update(cert.subjectPublicKeyInfo.subjectPublicKey.valueBlock.valueHexView).digest())

const EC_ALG: webcrypto.EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" }

const makeCertificate = async (p: {
  subject: pkijs.RelativeDistinguishedNames
  issuer: pkijs.RelativeDistinguishedNames
  publicKey: CryptoKey
  signingKey: CryptoKey
  issuerKeyId?: Uint8Array
  extensions: (self: pkijs.Certificate) => Array<pkijs.Extension>
}): Promise<Uint8Array> => {
  const cert = new pkijs.Certificate()
  cert.version = 2
  cert.serialNumber = new asn1js.Integer({ valueHex: randomSerial() })
  cert.subject = p.subject
  cert.issuer = p.issuer
  const now = Date.now()
  cert.notBefore.value = new Date(now - 5 * 60 * 1000)
  cert.notAfter.value = new Date(now + VALIDITY_MS)
  await cert.subjectPublicKeyInfo.importKey(p.publicKey)
  const ski = keyId(cert)
  cert.extensions = [
    ...p.extensions(cert),
    ext(OID.subjectKeyIdentifier, false, new asn1js.OctetString({ valueHex: ski })),
    ext(
      OID.authorityKeyIdentifier,
      false,
      new pkijs.AuthorityKeyIdentifier({ keyIdentifier: new asn1js.OctetString({ valueHex: p.issuerKeyId ?? ski }) }).toSchema()
    )
  ]
  await cert.sign(p.signingKey, "SHA-256")
  return new Uint8Array(cert.toSchema(true).toBER())
}

const exportPkcs8Pem = async (key: CryptoKey): Promise<string> =>
  derToPem(new Uint8Array(await webcrypto.subtle.exportKey("pkcs8", key)), "PRIVATE KEY")

const FILES = { root: "root.pem", rootKey: "root-key.pem", tsa: "tsa.pem", tsaKey: "tsa-key.pem" } as const

const exists = (p: string): Promise<boolean> =>
  stat(p).then(
    () => true,
    () => false
  )

const generateInto = async (dir: string): Promise<void> => {
  const rootKeys = (await webcrypto.subtle.generateKey(EC_ALG, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair
  const tsaKeys = (await webcrypto.subtle.generateKey(EC_ALG, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair
  const rootName = name(ROOT_CN)
  let rootKeyId: Uint8Array | undefined
  const rootDer = await makeCertificate({
    subject: rootName,
    issuer: rootName,
    publicKey: rootKeys.publicKey,
    signingKey: rootKeys.privateKey,
    extensions: (self) => {
      rootKeyId = keyId(self)
      return [
        ext(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: true, pathLenConstraint: 0 }).toSchema()),
        ext(OID.keyUsage, true, keyUsageBits(0x06, 1)) // keyCertSign | cRLSign
      ]
    }
  })
  const tsaDer = await makeCertificate({
    subject: name(TSA_CN),
    issuer: name(ROOT_CN),
    publicKey: tsaKeys.publicKey,
    signingKey: rootKeys.privateKey,
    ...(rootKeyId !== undefined ? { issuerKeyId: rootKeyId } : {}),
    extensions: () => [
      ext(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: false }).toSchema()),
      ext(OID.keyUsage, true, keyUsageBits(0x80, 7)), // digitalSignature
      ext(OID.extKeyUsage, true, new pkijs.ExtKeyUsage({ keyPurposes: [OID.kpTimeStamping] }).toSchema())
    ]
  })
  const writeKey = async (file: string, pem: string) => {
    await writeFile(join(dir, file), pem, { mode: 0o600 })
    await chmod(join(dir, file), 0o600)
  }
  await writeKey(FILES.rootKey, await exportPkcs8Pem(rootKeys.privateKey))
  await writeKey(FILES.tsaKey, await exportPkcs8Pem(tsaKeys.privateKey))
  await writeFile(join(dir, FILES.root), derToPem(rootDer), { mode: 0o644 })
  await writeFile(join(dir, FILES.tsa), derToPem(tsaDer), { mode: 0o644 })
}

const checkKeyMatchesCertificate = async (signer: TsaSigner): Promise<void> => {
  const priv = await webcrypto.subtle.exportKey("jwk", signer.privateKey)
  const spki = signer.certificate.subjectPublicKeyInfo.toSchema().toBER()
  const pub = await webcrypto.subtle.importKey("spki", spki, keyAlgorithmFor(signer.certificate), true, ["verify"])
  const pubJwk = await webcrypto.subtle.exportKey("jwk", pub)
  if (priv.x !== pubJwk.x || priv.y !== pubJwk.y || priv.n !== pubJwk.n) {
    throw new Error("demo TSA: tsa-key.pem does not match tsa.pem")
  }
}

/**
 * Load `<dataDir>/demo-tsa/*` or, if the directory does not exist yet,
 * generate it (atomically: written to a temp directory, then renamed).
 * A partially present directory is an error (never silently overwritten).
 */
export const loadOrCreateDemoTsa = async (dataDir: string): Promise<DemoTsa> => {
  ensureCryptoEngine()
  const dir = join(dataDir, "demo-tsa")
  // An empty pre-created directory counts as absent.
  if ((await exists(dir)) && (await readdir(dir)).length === 0) await rmdir(dir)
  if (!(await exists(dir))) {
    makePrivateDir(dataDir)
    const tmp = join(dataDir, `.demo-tsa.tmp-${process.pid}-${Buffer.from(randomBytes(6)).toString("hex")}`)
    await mkdir(tmp, { mode: 0o700 })
    try {
      await generateInto(tmp)
      await rename(tmp, dir).catch(async (e: NodeJS.ErrnoException) => {
        // Lost a race with a concurrent start: use the winner's files.
        if (e.code !== "ENOTEMPTY" && e.code !== "EEXIST") throw e
      })
    } finally {
      await rm(tmp, { recursive: true, force: true })
    }
  }
  const missing: Array<string> = []
  for (const f of Object.values(FILES)) if (!(await exists(join(dir, f)))) missing.push(f)
  if (missing.length > 0) throw new Error(`demo TSA directory ${dir} is incomplete (missing ${missing.join(", ")})`)

  const rootPem = await readFile(join(dir, FILES.root), "utf8")
  const tsaCertPem = await readFile(join(dir, FILES.tsa), "utf8")
  const signer = await loadSigner(tsaCertPem, await readFile(join(dir, FILES.tsaKey), "utf8"))
  await checkKeyMatchesCertificate(signer)

  const reply = (requestDer: Uint8Array) => replyWithSigner(signer, requestDer)
  const stamp = async (digest: Uint8Array, nonce?: Uint8Array): Promise<Uint8Array> => {
    if (digest.byteLength !== 32) throw new RangeError("digest must be 32 bytes")
    return issueTimeStampToken(signer, {
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(digest) })
      }),
      ...(nonce !== undefined ? { nonce: new asn1js.Integer({ valueHex: positiveIntegerBytes(nonce) }) } : {}),
      includeCertificate: true
    })
  }
  return {
    provider: DEMO_TSA_PROVIDER,
    dir,
    rootFile: join(dir, FILES.root),
    tsaCertFile: join(dir, FILES.tsa),
    rootPem,
    tsaCertPem,
    signer,
    reply,
    stamp
  }
}
