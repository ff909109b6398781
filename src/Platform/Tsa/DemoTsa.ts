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
 * Tokens are real RFC 3161 TimeStampTokens built by TokenIssuer.ts (the
 * builder of attestd's own time-stamping authority), verifiable with
 * `openssl ts -verify`.
 */
import { createPrivateKey, type KeyObject, randomBytes, sign as nodeSign, webcrypto } from "node:crypto"
import { chmod, mkdir, readdir, readFile, rename, rm, rmdir, stat, writeFile } from "node:fs/promises"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { makePrivateDir } from "../PrivateFiles.js"
import { newP256Key } from "../Keys/FileKeys.js"
import { issueTsaChain, tsaCertificateProblem, webCryptoPublicKey } from "./Certificates.js"
import { derToPem, ensureCryptoEngine, OID, pemToDers, positiveInteger } from "./Rfc3161.js"
import {
  checkTimeStampRequest,
  isRefusal,
  type PreparedToken,
  prepareToken,
  randomSerial,
  readTimeStampRequest,
  rejectionResponse,
  SIGNATURE_OID,
  type TokenSigner,
  tokenSignerOf
} from "./TokenIssuer.js"

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
  /** The token parts of the certificate, encoded once (it is the only certificate a token embeds). */
  readonly tokens: TokenSigner
  readonly privateKey: KeyObject
  readonly policy: string
}

/** Build a signer from a PEM certificate and a PEM PKCS#8 private key (EC or RSA). */
export const loadSigner = async (certPem: string, keyPem: string, policy = DEMO_TSA_POLICY_OID): Promise<TsaSigner> => {
  ensureCryptoEngine()
  const der = pemToDers(certPem)[0]
  if (!der) throw new Error("no CERTIFICATE in PEM")
  const certificate = pkijs.Certificate.fromBER(der)
  const tokens = tokenSignerOf({ certificate, der }, [{ certificate, der }])
  return { certificate, certificateDer: der, tokens, privateKey: createPrivateKey(keyPem), policy }
}

export interface IssueParams {
  readonly messageImprint: pkijs.MessageImprint
  readonly nonce?: asn1js.Integer
  readonly includeCertificate: boolean
  readonly genTime?: Date
}

const prepare = (signer: TsaSigner, params: IssueParams): PreparedToken =>
  prepareToken({
    signer: signer.tokens,
    includeCertificates: params.includeCertificate,
    signatureAlgorithm: signer.privateKey.asymmetricKeyType === "rsa" ? SIGNATURE_OID.sha256WithRsa : SIGNATURE_OID.ecdsaWithSha256,
    policy: signer.policy,
    hashAlgorithm: params.messageImprint.hashAlgorithm.algorithmId,
    hashedMessage: params.messageImprint.hashedMessage.valueBlock.valueHexView,
    serial: randomSerial().integer,
    genTime: params.genTime ?? new Date(),
    accuracyMs: undefined,
    nonce: params.nonce?.valueBlock.valueHexView
  })

const signatureOver = (signer: TsaSigner, prepared: PreparedToken): Uint8Array =>
  nodeSign("sha256", prepared.signedAttributes, { key: signer.privateKey, dsaEncoding: "der" })

/** Sign a TSTInfo and return the TimeStampToken (ContentInfo DER). */
export const issueTimeStampToken = async (signer: TsaSigner, params: IssueParams): Promise<Uint8Array> => {
  ensureCryptoEngine()
  const prepared = prepare(signer, params)
  return prepared.finish(signatureOver(signer, prepared))
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/** Answer a DER TimeStampReq with a DER TimeStampResp (granted or rejection): SHA-256 imprints under the demo policy. */
export const replyWithSigner = async (signer: TsaSigner, requestDer: Uint8Array): Promise<Uint8Array> => {
  ensureCryptoEngine()
  const req = readTimeStampRequest(requestDer)
  if (isRefusal(req)) return rejectionResponse(req)
  const checked = checkTimeStampRequest(req, {
    algorithms: { [OID.sha256]: 32 },
    defaultPolicy: signer.policy,
    acceptedPolicies: []
  })
  if (isRefusal(checked)) return rejectionResponse(checked)
  try {
    const prepared = prepare(signer, {
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: req.hashedMessage })
      }),
      ...(req.nonce !== undefined ? { nonce: new asn1js.Integer({ valueHex: req.nonce }) } : {}),
      includeCertificate: req.certReq
    })
    return prepared.finishGranted(signatureOver(signer, prepared)).response
  } catch {
    return rejectionResponse({ failInfo: "systemFailure", text: "signing failed" })
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

const FILES = { root: "root.pem", rootKey: "root-key.pem", tsa: "tsa.pem", tsaKey: "tsa-key.pem" } as const

const exists = (p: string): Promise<boolean> =>
  stat(p).then(
    () => true,
    () => false
  )

const writeKey = async (path: string, pem: string) => {
  await writeFile(path, pem, { mode: 0o600 })
  await chmod(path, 0o600)
}

const generateInto = async (dir: string): Promise<void> => {
  const tsaKey = newP256Key()
  const chain = await issueTsaChain(
    { organization: ORG, rootName: ROOT_CN, tsaName: TSA_CN, validityMs: VALIDITY_MS },
    await webCryptoPublicKey(tsaKey)
  )
  const rootKeyPem = derToPem(new Uint8Array(await webcrypto.subtle.exportKey("pkcs8", chain.rootPrivateKey)), "PRIVATE KEY")
  await writeKey(join(dir, FILES.rootKey), rootKeyPem)
  await writeKey(join(dir, FILES.tsaKey), tsaKey.export({ type: "pkcs8", format: "pem" }).toString())
  await writeFile(join(dir, FILES.root), derToPem(chain.rootDer), { mode: 0o644 })
  await writeFile(join(dir, FILES.tsa), derToPem(chain.tsaDer), { mode: 0o644 })
}

const checkKeyMatchesCertificate = (signer: TsaSigner): void => {
  const problem = tsaCertificateProblem(signer.certificate, signer.privateKey)
  if (problem !== undefined) throw new Error(`demo TSA: tsa.pem cannot sign with tsa-key.pem: ${problem}`)
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
  checkKeyMatchesCertificate(signer)

  const reply = (requestDer: Uint8Array) => replyWithSigner(signer, requestDer)
  const stamp = async (digest: Uint8Array, nonce?: Uint8Array): Promise<Uint8Array> => {
    if (digest.byteLength !== 32) throw new RangeError("digest must be 32 bytes")
    return issueTimeStampToken(signer, {
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(digest) })
      }),
      ...(nonce !== undefined ? { nonce: positiveInteger(nonce) } : {}),
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
