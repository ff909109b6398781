/**
 * RFC 3161 (Time-Stamp Protocol) encoding, parsing and validation.
 *
 * Pure pkijs / asn1js logic: no Effect runtime. Everything async is a plain
 * Promise so that both the Effect port (TsaClient) and the offline verifier
 * CLI can use it.
 *
 * Conventions of the parsed "details" shape (the `tsa/details` endpoint):
 * - `serial_number` (token and certificates) and `nonce` are DECIMAL strings
 *   of the (signed) ASN.1 INTEGER value, e.g. "18446744073709551615". Decimal
 *   is unambiguous (a hex string of digits only could be misread) and safe in
 *   JSON for 128-bit and larger values.
 * - `gen_time`, `not_before`, `not_after` are ISO 8601 UTC strings with
 *   millisecond precision (`Date.prototype.toISOString`).
 * - `hash_algorithm` is "SHA-256" / "SHA-384" / "SHA-512" / "SHA-1" for the
 *   known digests, otherwise the dotted OID.
 * - `hashed_message` is lower-case hex.
 * - `tsa_name` and certificate `subject` / `issuer` are distinguished names
 *   rendered RFC 4514 style (most specific RDN first, e.g.
 *   "CN=Example TSA,O=Example"); other GeneralName forms are rendered as
 *   "DNS:…", "URI:…", "email:…".
 */
import { sha1 } from "@noble/hashes/legacy.js"
import { sha256, sha384, sha512 } from "@noble/hashes/sha2.js"
import { base64ToBytes, bytesToBase64, bytesToHex } from "../../Domain/Bytes.js"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"

// ---------------------------------------------------------------------------
// OIDs
// ---------------------------------------------------------------------------

export const OID = {
  sha1: "1.3.14.3.2.26",
  sha256: "2.16.840.1.101.3.4.2.1",
  sha384: "2.16.840.1.101.3.4.2.2",
  sha512: "2.16.840.1.101.3.4.2.3",
  data: "1.2.840.113549.1.7.1",
  signedData: "1.2.840.113549.1.7.2",
  tstInfo: "1.2.840.113549.1.9.16.1.4",
  contentType: "1.2.840.113549.1.9.3",
  messageDigest: "1.2.840.113549.1.9.4",
  signingTime: "1.2.840.113549.1.9.5",
  signingCertificate: "1.2.840.113549.1.9.16.2.12",
  signingCertificateV2: "1.2.840.113549.1.9.16.2.47",
  keyUsage: "2.5.29.15",
  basicConstraints: "2.5.29.19",
  extKeyUsage: "2.5.29.37",
  subjectKeyIdentifier: "2.5.29.14",
  authorityKeyIdentifier: "2.5.29.35",
  kpTimeStamping: "1.3.6.1.5.5.7.3.8"
} as const

/** The imprint algorithms a token may carry when the caller compares the imprint, with their lengths. */
const IMPRINT_LENGTHS: Readonly<Record<string, number>> = { [OID.sha256]: 32, [OID.sha384]: 48, [OID.sha512]: 64 }

const HASH_NAMES: Record<string, { readonly display: string; readonly node: string }> = {
  [OID.sha1]: { display: "SHA-1", node: "sha1" },
  [OID.sha256]: { display: "SHA-256", node: "sha256" },
  [OID.sha384]: { display: "SHA-384", node: "sha384" },
  [OID.sha512]: { display: "SHA-512", node: "sha512" }
}

/** PKIFailureInfo bit positions (RFC 3161 §2.4.2). */
export const FAIL_INFO_BITS = {
  badAlg: 0,
  badRequest: 2,
  badDataFormat: 5,
  timeNotAvailable: 14,
  unacceptedPolicy: 15,
  unacceptedExtension: 16,
  addInfoNotAvailable: 17,
  systemFailure: 25
} as const
export type FailInfo = keyof typeof FAIL_INFO_BITS

// ---------------------------------------------------------------------------
// Errors & crypto engine
// ---------------------------------------------------------------------------

/** Any reason a time-stamp response / token is rejected. */
export class TsaValidationError extends Error {
  readonly reason: string
  constructor(reason: string, options?: { cause?: unknown }) {
    super(`invalid time-stamp token: ${reason}`, options)
    this.name = "TsaValidationError"
    this.reason = reason
  }
}

/**
 * Points pkijs at Node's WebCrypto. The engine is pkijs' own global; setting it
 * is idempotent and costs an object, so each validation sets it rather than
 * remembering that it did.
 */
export const ensureCryptoEngine = (): void => {
  const webcrypto = (globalThis as unknown as { crypto?: { subtle?: unknown } }).crypto
  if (webcrypto?.subtle === undefined) throw new TsaValidationError("WebCrypto (crypto.subtle) is not available: RFC 3161 tokens cannot be checked here")
  pkijs.setEngine(
    "webcrypto",
    new pkijs.CryptoEngine({ name: "webcrypto", crypto: webcrypto as unknown as pkijs.CryptoEngineParameters["crypto"] })
  )
}

// ---------------------------------------------------------------------------
// Small byte / ASN.1 helpers
// ---------------------------------------------------------------------------

export const toHex = (bytes: Uint8Array): string => bytesToHex(bytes)

const bytesEqual = (a: Uint8Array, b: Uint8Array): boolean => {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}

/** Copy any BufferSource view into a fresh, exactly-sized Uint8Array. */
const copyBytes = (src: ArrayBuffer | ArrayBufferView): Uint8Array<ArrayBuffer> =>
  src instanceof ArrayBuffer
    ? new Uint8Array(src.slice(0))
    : Uint8Array.from(new Uint8Array(src.buffer, src.byteOffset, src.byteLength))

/**
 * The INTEGER whose unsigned big-endian value is `bytes` (a serial, a nonce), in DER's
 * minimal two's-complement form as asn1js encodes it: a leading 0x00 where the high bit
 * is set, none redundant.
 */
export const positiveInteger = (bytes: Uint8Array): asn1js.Integer =>
  asn1js.Integer.fromBigInt(BigInt(`0x${bytesToHex(bytes) || "0"}`))

const HASHERS: Record<string, (data: Uint8Array) => Uint8Array> = { sha1, sha256, sha384, sha512 }

const hashBytes = (nodeAlg: string, data: Uint8Array): Uint8Array => {
  const h = HASHERS[nodeAlg]
  if (h === undefined) throw new TsaValidationError(`unsupported hash algorithm ${nodeAlg}`)
  return h(data)
}

const parseDer = (der: Uint8Array, what: string): asn1js.AsnType => {
  const parsed = asn1js.fromBER(der)
  if (parsed.offset === -1) throw new TsaValidationError(`${what} is not valid ASN.1 (${parsed.result.error})`)
  if (parsed.offset !== der.byteLength) throw new TsaValidationError(`${what} has trailing data after the ASN.1 value`)
  return parsed.result
}

/**
 * parseDer, and the bytes must be exactly what their parse encodes to. asn1js reads a
 * length that overruns its parent or a non-minimal length without complaint, so a
 * token whose unsigned framing was altered would still verify; re-encoding the parse
 * and comparing refuses every such change (definite-length BER, as older tokens of the
 * demo TSA carry, encodes back to itself).
 */
const parseExact = (der: Uint8Array, what: string): asn1js.AsnType => {
  const asn = parseDer(der, what)
  if (!bytesEqual(new Uint8Array(asn.toBER(false)), der)) {
    throw new TsaValidationError(`${what} is not encoded as its own contents encode (a length or tag was altered)`)
  }
  return asn
}

/**
 * The dotted form of an OBJECT IDENTIFIER with every arc whole. asn1js parses the arcs but
 * renders one above 2^53 (the 2.25.<uuid> policy of the demo TSA) as "{hex}"; such an arc
 * is read here from the base-128 digits asn1js parsed (a first arc that large is 2.x).
 */
export const oidToString = (oid: asn1js.ObjectIdentifier): string =>
  oid.valueBlock.value.map((sid) => {
    if (!sid.isHexOnly) return sid.toString()
    const value = sid.valueHexView.reduce((acc, digit) => acc * 128n + BigInt(digit), 0n)
    return sid.isFirstSid ? `2.${value - 80n}` : value.toString()
  }).join(".")

const integerToDecimal = (int: asn1js.Integer): string => int.toBigInt().toString()

// ---------------------------------------------------------------------------
// Distinguished names & certificate summaries
// ---------------------------------------------------------------------------

const ATTR_SHORT_NAMES: Record<string, string> = {
  "2.5.4.3": "CN",
  "2.5.4.4": "SN",
  "2.5.4.5": "serialNumber",
  "2.5.4.6": "C",
  "2.5.4.7": "L",
  "2.5.4.8": "ST",
  "2.5.4.9": "STREET",
  "2.5.4.10": "O",
  "2.5.4.11": "OU",
  "2.5.4.12": "title",
  "2.5.4.42": "GN",
  "2.5.4.97": "organizationIdentifier",
  "0.9.2342.19200300.100.1.1": "UID",
  "0.9.2342.19200300.100.1.25": "DC",
  "1.2.840.113549.1.9.1": "emailAddress"
}

const escapeDnValue = (v: string): string =>
  v
    .replace(/[\\,+"<>;=]/g, (c) => `\\${c}`)
    .replace(/^[ #]/, (c) => `\\${c}`)
    .replace(/ $/, "\\ ")

const attributeValueToString = (value: unknown): string => {
  const block = (value as { valueBlock?: { value?: unknown; valueHexView?: Uint8Array } }).valueBlock
  if (block !== undefined && typeof block.value === "string") return block.value
  if (value instanceof asn1js.BaseBlock) return `#${toHex(new Uint8Array(value.toBER()))}`
  return String(value)
}

/** RFC 4514 style rendering (most specific RDN first). */
export const formatName = (name: pkijs.RelativeDistinguishedNames): string =>
  name.typesAndValues
    .map((tv) => `${ATTR_SHORT_NAMES[tv.type] ?? tv.type}=${escapeDnValue(attributeValueToString(tv.value))}`)
    .reverse()
    .join(",")

const formatGeneralName = (gn: pkijs.GeneralName): string => {
  switch (gn.type) {
    case 1:
      return `email:${String(gn.value)}`
    case 2:
      return `DNS:${String(gn.value)}`
    case 4:
      return formatName(gn.value as pkijs.RelativeDistinguishedNames)
    case 6:
      return `URI:${String(gn.value)}`
    default:
      return `GeneralName[${gn.type}]`
  }
}

export interface TokenCertificateInfo {
  readonly subject: string
  readonly issuer: string
  readonly serial_number: string
  readonly not_before: string
  readonly not_after: string
}

const certificateInfo = (cert: pkijs.Certificate): TokenCertificateInfo => ({
  subject: formatName(cert.subject),
  issuer: formatName(cert.issuer),
  serial_number: integerToDecimal(cert.serialNumber),
  not_before: cert.notBefore.value.toISOString(),
  not_after: cert.notAfter.value.toISOString()
})

/** All CERTIFICATE blocks of a PEM bundle, as DER. */
export const pemToDers = (pem: string): Array<Uint8Array<ArrayBuffer>> => {
  const out: Array<Uint8Array<ArrayBuffer>> = []
  const re = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/g
  for (const m of pem.matchAll(re)) out.push(base64ToBytes((m[1] ?? "").replace(/\s+/g, "")))
  return out
}

export const derToPem = (der: Uint8Array, label = "CERTIFICATE"): string => {
  const b64 = bytesToBase64(der)
  const lines = b64.match(/.{1,64}/g) ?? []
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`
}

/** Parse a PEM bundle of trust anchors; throws when it holds no certificate. */
export const parseTrustAnchors = (pem: string): Array<pkijs.Certificate> => {
  const ders = pemToDers(pem)
  if (ders.length === 0) throw new TsaValidationError("trust anchor PEM contains no CERTIFICATE block")
  return ders.map((der, i) => {
    try {
      return pkijs.Certificate.fromBER(der)
    } catch (e) {
      throw new TsaValidationError(`trust anchor #${i + 1} is not a valid X.509 certificate`, { cause: e })
    }
  })
}

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

const sha256AlgorithmIdentifier = (): pkijs.AlgorithmIdentifier =>
  // NULL parameters, exactly as `openssl ts -query` encodes them.
  new pkijs.AlgorithmIdentifier({ algorithmId: OID.sha256, algorithmParams: new asn1js.Null() })

/**
 * DER TimeStampReq for a raw 32-byte SHA-256 value (the batch Merkle root is
 * put into hashedMessage as-is, it is NOT hashed again), with a random 64-bit
 * nonce (encoded as a positive INTEGER) and certReq = TRUE.
 */
export const buildTimeStampRequest = (
  digest: Uint8Array,
  nonce?: Uint8Array
): { der: Uint8Array; nonce: Uint8Array } => {
  if (digest.byteLength !== 32) throw new RangeError(`digest must be 32 bytes (SHA-256), got ${digest.byteLength}`)
  const n = nonce !== undefined ? new Uint8Array(nonce) : globalThis.crypto.getRandomValues(new Uint8Array(8))
  if (n.byteLength === 0) throw new RangeError("nonce must not be empty")
  const req = new pkijs.TimeStampReq({
    version: 1,
    messageImprint: new pkijs.MessageImprint({
      hashAlgorithm: sha256AlgorithmIdentifier(),
      hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(digest) })
    }),
    nonce: positiveInteger(n),
    certReq: true
  })
  return { der: new Uint8Array(req.toSchema().toBER()), nonce: n }
}

// ---------------------------------------------------------------------------
// Response
// ---------------------------------------------------------------------------

export interface ParsedTimeStampResponse {
  /** PKIStatus: 0 granted, 1 grantedWithMods, 2 rejection, 3 waiting, 4/5 revocation. */
  readonly status: number
  readonly statusText?: string
  readonly failInfo?: ReadonlyArray<FailInfo | `bit${number}`>
  /** The TimeStampToken (CMS ContentInfo) exactly as the TSA encoded it. */
  readonly token?: Uint8Array
}

const decodeFailInfo = (bits: asn1js.BitString): Array<FailInfo | `bit${number}`> => {
  const view = bits.valueBlock.valueHexView
  const names = Object.entries(FAIL_INFO_BITS) as Array<[FailInfo, number]>
  const out: Array<FailInfo | `bit${number}`> = []
  for (let i = 0; i < view.length * 8; i++) {
    if (((view[i >> 3] ?? 0) & (0x80 >> (i & 7))) === 0) continue
    const name = names.find(([, bit]) => bit === i)
    out.push(name ? name[0] : `bit${i}`)
  }
  return out
}

/** Parse a DER TimeStampResp. Throws TsaValidationError when it is not one. */
export const parseTimeStampResponse = (der: Uint8Array): ParsedTimeStampResponse => {
  const asn = parseDer(der, "time-stamp response")
  let resp: pkijs.TimeStampResp
  try {
    resp = new pkijs.TimeStampResp({ schema: asn })
  } catch (e) {
    throw new TsaValidationError(`not a TimeStampResp: ${e instanceof Error ? e.message : String(e)}`, { cause: e })
  }
  const statusText = resp.status.statusStrings?.map((s) => s.valueBlock.value).join("; ")
  const failInfo = resp.status.failInfo ? decodeFailInfo(resp.status.failInfo) : undefined
  let token: Uint8Array | undefined
  if (resp.timeStampToken) {
    // Slice the original bytes rather than re-encoding the parsed object.
    const tokenBlock = (asn as asn1js.Sequence).valueBlock.value[1]
    token = tokenBlock ? copyBytes(tokenBlock.valueBeforeDecodeView) : new Uint8Array(resp.timeStampToken.toSchema().toBER())
  }
  return {
    status: resp.status.status as number,
    ...(statusText !== undefined && statusText !== "" ? { statusText } : {}),
    ...(failInfo !== undefined ? { failInfo } : {}),
    ...(token !== undefined ? { token } : {})
  }
}

// ---------------------------------------------------------------------------
// Token parsing
// ---------------------------------------------------------------------------

export interface TokenDetails {
  readonly gen_time: string
  /** Decimal string. */
  readonly serial_number: string
  readonly policy: string
  readonly tsa_name: string | null
  readonly hash_algorithm: string
  /** Lower-case hex. */
  readonly hashed_message: string
  /** Decimal string, or null when the token carries no nonce. */
  readonly nonce: string | null
  readonly accuracy: { readonly seconds: number; readonly millis: number; readonly micros: number } | null
  readonly certificates: ReadonlyArray<TokenCertificateInfo>
}

interface DecodedToken {
  readonly signedData: pkijs.SignedData
  readonly tstInfo: pkijs.TSTInfo
  readonly tstInfoDer: Uint8Array
  readonly policy: string
  /** Embedded X.509 certificates, parsed from their original DER. */
  readonly certificates: ReadonlyArray<{ readonly cert: pkijs.Certificate; readonly der: Uint8Array }>
}

const decodeToken = (token: Uint8Array): DecodedToken => {
  const asn = parseExact(token, "time-stamp token")
  let contentInfo: pkijs.ContentInfo
  try {
    contentInfo = new pkijs.ContentInfo({ schema: asn })
  } catch (e) {
    throw new TsaValidationError("token is not a CMS ContentInfo", { cause: e })
  }
  if (contentInfo.contentType !== OID.signedData) {
    throw new TsaValidationError(`token content type is ${contentInfo.contentType}, expected SignedData`)
  }
  let signedData: pkijs.SignedData
  try {
    signedData = new pkijs.SignedData({ schema: contentInfo.content })
  } catch (e) {
    throw new TsaValidationError("token content is not a valid SignedData", { cause: e })
  }
  if (signedData.encapContentInfo.eContentType !== OID.tstInfo) {
    throw new TsaValidationError(`eContentType is ${signedData.encapContentInfo.eContentType}, expected id-ct-TSTInfo`)
  }
  const eContent = signedData.encapContentInfo.eContent
  if (!eContent) throw new TsaValidationError("token has no encapsulated TSTInfo")
  // pkijs takes any element there; only an OCTET STRING has the content's bytes.
  if (!(eContent instanceof asn1js.OctetString)) throw new TsaValidationError("encapsulated TSTInfo is not an OCTET STRING")
  const tstInfoDer = copyBytes(eContent.getValue())
  const tstAsn = parseExact(tstInfoDer, "TSTInfo")
  let tstInfo: pkijs.TSTInfo
  try {
    tstInfo = new pkijs.TSTInfo({ schema: tstAsn })
  } catch (e) {
    throw new TsaValidationError("encapsulated content is not a valid TSTInfo", { cause: e })
  }
  const policyBlock = (tstAsn as asn1js.Sequence).valueBlock.value[1]
  const policy = policyBlock instanceof asn1js.ObjectIdentifier ? oidToString(policyBlock) : tstInfo.policy

  // certificates [0] IMPLICIT CertificateSet: each X.509 one with its original DER. SignedData's
  // parse above made one entry per element, in order, a Certificate for each X.509 one: they are
  // used as they are, not parsed a second time from their DER.
  const certificates: Array<{ cert: pkijs.Certificate; der: Uint8Array }> = []
  const sdItems = (contentInfo.content as asn1js.Sequence).valueBlock.value
  const certSet = sdItems.find((b) => b.idBlock.tagClass === 3 && b.idBlock.tagNumber === 0)
  if (certSet instanceof asn1js.Constructed) {
    certSet.valueBlock.value.forEach((item, i) => {
      if (item.idBlock.tagClass !== 1 || item.idBlock.tagNumber !== 16) return // skip non-X.509 choices
      const cert = signedData.certificates?.[i]
      if (!(cert instanceof pkijs.Certificate)) throw new TsaValidationError("token embeds a malformed certificate")
      certificates.push({ cert, der: copyBytes(item.valueBeforeDecodeView) })
    })
  }
  return { signedData, tstInfo, tstInfoDer, policy, certificates }
}

const detailsOf = (d: DecodedToken): TokenDetails => {
  const { tstInfo } = d
  const mi = tstInfo.messageImprint
  const algOid = mi.hashAlgorithm.algorithmId
  return {
    gen_time: tstInfo.genTime.toISOString(),
    serial_number: integerToDecimal(tstInfo.serialNumber),
    policy: d.policy,
    tsa_name: tstInfo.tsa ? formatGeneralName(tstInfo.tsa) : null,
    hash_algorithm: HASH_NAMES[algOid]?.display ?? algOid,
    hashed_message: toHex(copyBytes(mi.hashedMessage.valueBlock.valueHexView)),
    nonce: tstInfo.nonce ? integerToDecimal(tstInfo.nonce) : null,
    accuracy: tstInfo.accuracy
      ? {
          seconds: tstInfo.accuracy.seconds ?? 0,
          millis: tstInfo.accuracy.millis ?? 0,
          micros: tstInfo.accuracy.micros ?? 0
        }
      : null,
    certificates: d.certificates.map((c) => certificateInfo(c.cert))
  }
}

/** Parse (without verifying anything) a TimeStampToken for display. */
export const parseTimeStampToken = (token: Uint8Array): TokenDetails => detailsOf(decodeToken(token))

// ---------------------------------------------------------------------------
// Token validation
// ---------------------------------------------------------------------------

export interface ValidatedToken {
  readonly genTime: Date
  /** Decimal string. */
  readonly serialNumber: string
  readonly policy: string
  /** Decimal string or null. */
  readonly nonce: string | null
  readonly hashAlgorithm: string
  readonly hashedMessage: string
  readonly tsaName: string | null
  readonly accuracy: TokenDetails["accuracy"]
  /** The certificate whose key signed the token. */
  readonly signer: TokenCertificateInfo
  /** True when the signer certificate was chained to the given trust anchors. */
  readonly chainVerified: boolean
  /** Same data in the snake_case `tsa/details` shape. */
  readonly details: TokenDetails
}

export interface ValidateOptions {
  /**
   * The 32-byte value that was time-stamped (the batch Merkle root): the imprint must be
   * SHA-256 and exactly it. null: the imprint is not compared here (a SHA-256, SHA-384 or
   * SHA-512 imprint of its length is accepted); the caller compares it.
   */
  readonly digest: Uint8Array | null
  /** The request nonce (unsigned big-endian bytes); checked when given. */
  readonly nonce?: Uint8Array
  /** PEM bundle of trust anchors; required when requireChain is true. */
  readonly trustAnchorsPem?: string
  /** Chain the signer certificate to trustAnchorsPem (at genTime). */
  readonly requireChain: boolean
  /**
   * Certificates beside those the token embeds (PEM): the TSA's published chain, so a token
   * requested without certReq can be checked too. The signer is found among both.
   */
  readonly certificatesPem?: string
}

/** pkijs' own texts for its code 15 ("Error during verification"); any other code 15 wraps an engine's message. */
const PKIJS_CODE_15: ReadonlySet<string> = new Set([
  "Error during verification: TSTInfo eContent is empty",
  "Error during verification: TSTInfo wrong ASN.1 schema ",
  "Error during verification: TSTInfo verification is failed",
  "Error during verification: Message digest doesn't match"
])

/**
 * Why the CMS signature check failed, in words that are the same in every
 * runtime. pkijs passes WebCrypto's own error text through (code 15, e.g. Node
 * "Invalid keyData" where Chromium has an empty message), so that text never
 * reaches the reason: a verifier in the browser and in Node must report the
 * same input the same way.
 */
const cmsFailure = (e: unknown): string => {
  if (!(e instanceof pkijs.SignedDataVerifyError)) return "CMS signature verification failed"
  if (e.code === 15 && !PKIJS_CODE_15.has(e.message)) {
    return "CMS signature verification failed: the signer certificate's public key or the signature is malformed"
  }
  return e.message === "" ? "CMS signature verification failed" : e.message
}

/** The signer certificate must carry a CRITICAL EKU whose only purpose is id-kp-timeStamping. */
export const checkSignerCertificateUsage = (cert: pkijs.Certificate): void => {
  const exts = cert.extensions ?? []
  const eku = exts.find((e) => e.extnID === OID.extKeyUsage)
  if (!eku) throw new TsaValidationError("signer certificate has no extendedKeyUsage extension")
  if (!eku.critical) throw new TsaValidationError("signer certificate extendedKeyUsage is not critical")
  const purposes = eku.parsedValue instanceof pkijs.ExtKeyUsage ? eku.parsedValue.keyPurposes : undefined
  if (!purposes) throw new TsaValidationError("signer certificate extendedKeyUsage cannot be parsed")
  if (purposes.length !== 1 || purposes[0] !== OID.kpTimeStamping) {
    throw new TsaValidationError(
      `signer certificate extendedKeyUsage must be exactly id-kp-timeStamping, got [${purposes.join(", ")}]`
    )
  }
  const ku = exts.find((e) => e.extnID === OID.keyUsage)
  if (ku && ku.parsedValue instanceof asn1js.BitString) {
    const first = ku.parsedValue.valueBlock.valueHexView[0] ?? 0
    // digitalSignature (bit 0) or nonRepudiation/contentCommitment (bit 1)
    if ((first & 0xc0) === 0) throw new TsaValidationError("signer certificate keyUsage allows no signatures")
  }
}

const findAttribute = (signerInfo: pkijs.SignerInfo, type: string): pkijs.Attribute | undefined =>
  signerInfo.signedAttrs?.attributes.find((a) => a.type === type)

/**
 * ESS signingCertificate (SHA-1) / signingCertificateV2 (default SHA-256):
 * the first ESSCertID must identify the signer certificate.
 */
const checkEssSigningCertificate = (
  signerInfo: pkijs.SignerInfo,
  signerDer: Uint8Array,
  signer: pkijs.Certificate
): void => {
  const v2 = findAttribute(signerInfo, OID.signingCertificateV2)
  const v1 = findAttribute(signerInfo, OID.signingCertificate)
  const attr = v2 ?? v1
  if (!attr) throw new TsaValidationError("no ESS signingCertificate / signingCertificateV2 signed attribute")
  const value = attr.values[0] as asn1js.AsnType | undefined
  const certs = value instanceof asn1js.Sequence ? value.valueBlock.value[0] : undefined
  const first = certs instanceof asn1js.Sequence ? certs.valueBlock.value[0] : undefined
  if (!(first instanceof asn1js.Sequence)) throw new TsaValidationError("malformed ESS signing certificate attribute")
  const parts = [...first.valueBlock.value]
  let nodeAlg = "sha1"
  if (attr === v2) {
    nodeAlg = "sha256"
    const head = parts[0]
    if (head instanceof asn1js.Sequence) {
      parts.shift()
      const oid = head.valueBlock.value[0]
      const alg = oid instanceof asn1js.ObjectIdentifier ? HASH_NAMES[oid.valueBlock.toString()] : undefined
      if (!alg) throw new TsaValidationError("unsupported hash algorithm in ESSCertIDv2")
      nodeAlg = alg.node
    }
  }
  const certHash = parts[0]
  if (!(certHash instanceof asn1js.OctetString)) throw new TsaValidationError("malformed ESSCertID certHash")
  const expected = hashBytes(nodeAlg, signerDer)
  if (!bytesEqual(copyBytes(certHash.valueBlock.valueHexView), expected)) {
    throw new TsaValidationError("ESS signing certificate hash does not match the signer certificate")
  }
  const issuerSerial = parts[1]
  if (issuerSerial instanceof asn1js.Sequence) {
    const serial = issuerSerial.valueBlock.value[1]
    if (serial instanceof asn1js.Integer && !serial.isEqual(signer.serialNumber)) {
      throw new TsaValidationError("ESS issuerSerial does not match the signer certificate serial number")
    }
  }
}

/**
 * Validate a TimeStampToken for `digest`. Throws TsaValidationError on any
 * failure; returns the parsed details on success.
 */
export const validateTimeStampToken = async (token: Uint8Array, opts: ValidateOptions): Promise<ValidatedToken> => {
  try {
    return await validate(token, opts)
  } catch (e) {
    if (e instanceof TsaValidationError) throw e
    // A token shaped so that the parsers trip (a TypeError and the like): its text
    // names engine and bundle internals, different in Node and in a browser.
    throw new TsaValidationError("the token's structure is malformed", { cause: e })
  }
}

const validate = async (token: Uint8Array, opts: ValidateOptions): Promise<ValidatedToken> => {
  ensureCryptoEngine()
  const decoded = decodeToken(token)
  const { signedData, tstInfo, tstInfoDer } = decoded

  if (tstInfo.version !== 1) throw new TsaValidationError(`unsupported TSTInfo version ${tstInfo.version}`)

  // Message imprint: SHA-256 over exactly our digest (compared directly, not re-hashed).
  const mi = tstInfo.messageImprint
  const imprint = copyBytes(mi.hashedMessage.valueBlock.valueHexView)
  if (opts.digest === null) {
    const length = IMPRINT_LENGTHS[mi.hashAlgorithm.algorithmId]
    if (length === undefined) {
      const name = HASH_NAMES[mi.hashAlgorithm.algorithmId]?.display ?? mi.hashAlgorithm.algorithmId
      throw new TsaValidationError(`message imprint algorithm is ${name}, expected SHA-256, SHA-384 or SHA-512`)
    }
    if (imprint.byteLength !== length) throw new TsaValidationError(`message imprint is ${imprint.byteLength} bytes, its algorithm gives ${length}`)
  } else {
    if (mi.hashAlgorithm.algorithmId !== OID.sha256) {
      throw new TsaValidationError(`message imprint algorithm is ${mi.hashAlgorithm.algorithmId}, expected SHA-256`)
    }
    if (!bytesEqual(imprint, opts.digest)) throw new TsaValidationError("message imprint does not match the digest")
  }

  if (opts.nonce !== undefined) {
    if (!tstInfo.nonce) throw new TsaValidationError("token carries no nonce")
    if (tstInfo.nonce.toBigInt() !== positiveInteger(opts.nonce).toBigInt()) {
      throw new TsaValidationError("nonce does not match the request")
    }
  }

  if (signedData.signerInfos.length !== 1) {
    throw new TsaValidationError(`token must have exactly one signer, has ${signedData.signerInfos.length}`)
  }
  const signerInfo = signedData.signerInfos[0]!
  // RFC 5652 §5.1 and §5.3: the versions follow from the content type and the signer
  // identifier, and the signer's digest algorithm is among those SignedData lists.
  if (signedData.version !== 3) throw new TsaValidationError(`SignedData version is ${signedData.version}, expected 3`)
  const sidVersion = signerInfo.sid instanceof pkijs.IssuerAndSerialNumber ? 1 : 3
  if (signerInfo.version !== sidVersion) throw new TsaValidationError(`SignerInfo version is ${signerInfo.version}, expected ${sidVersion}`)
  if (!signedData.digestAlgorithms.some((a) => a.algorithmId === signerInfo.digestAlgorithm.algorithmId)) {
    throw new TsaValidationError("the signer's digest algorithm is not among the SignedData digestAlgorithms")
  }
  if (!signerInfo.signedAttrs) throw new TsaValidationError("token has no signed attributes")
  const ct = findAttribute(signerInfo, OID.contentType)?.values[0]
  if (!(ct instanceof asn1js.ObjectIdentifier) || ct.valueBlock.toString() !== OID.tstInfo) {
    throw new TsaValidationError("signed contentType attribute is not id-ct-TSTInfo")
  }
  const certificates = [...decoded.certificates]
  for (const der of opts.certificatesPem === undefined ? [] : pemToDers(opts.certificatesPem)) {
    if (certificates.some((c) => bytesEqual(c.der, der))) continue
    let cert: pkijs.Certificate
    try {
      cert = pkijs.Certificate.fromBER(der)
    } catch (e) {
      throw new TsaValidationError("a given TSA certificate is not a valid X.509 certificate", { cause: e })
    }
    certificates.push({ cert, der })
    signedData.certificates = [...(signedData.certificates ?? []), cert]
  }
  if (certificates.length === 0) {
    throw new TsaValidationError("token embeds no certificate (certReq was not honoured)")
  }

  let trustedCerts: Array<pkijs.Certificate> = []
  let anchorDers: Array<Uint8Array> = []
  if (opts.requireChain) {
    if (opts.trustAnchorsPem === undefined) throw new TsaValidationError("chain validation requested without trust anchors")
    trustedCerts = parseTrustAnchors(opts.trustAnchorsPem)
    anchorDers = pemToDers(opts.trustAnchorsPem)
  }

  // pkijs' SignedData.verify re-hashes "data" against the TSTInfo imprint when
  // eContentType is id-ct-TSTInfo; we only have the digest (checked above), so
  // verify the CMS signature as if the content were opaque: the messageDigest
  // attribute still has to match the TSTInfo bytes and the signature has to
  // cover the signed attributes.
  signedData.encapContentInfo.eContentType = OID.data
  const verify = (checkChain: boolean) =>
    signedData.verify({ signer: 0, checkChain, trustedCerts, checkDate: tstInfo.genTime, extendedMode: true })
  let result: pkijs.SignedDataVerifyResult
  try {
    try {
      result = await verify(opts.requireChain)
    } catch (e) {
      // A trust anchor may also be the TSA certificate itself (pinned leaf):
      // pkijs cannot build a path for that, so accept an exact DER match.
      const signer = e instanceof pkijs.SignedDataVerifyError && e.code === 5 ? e.signerCertificate : null
      const signerDer = signer
        ? certificates.find(
            (c) => c.cert.issuer.isEqual(signer.issuer) && c.cert.serialNumber.isEqual(signer.serialNumber)
          )?.der
        : undefined
      if (signerDer === undefined || !anchorDers.some((a) => bytesEqual(a, signerDer))) throw e
      result = await verify(false)
    }
  } catch (e) {
    throw new TsaValidationError(cmsFailure(e), { cause: e })
  } finally {
    signedData.encapContentInfo.eContentType = OID.tstInfo
  }
  if (result.signatureVerified !== true) throw new TsaValidationError("CMS signature does not verify")
  const signerCert = result.signerCertificate
  if (!signerCert) throw new TsaValidationError("signer certificate not found in token")
  const signerEntry = certificates.find(
    (c) => c.cert.issuer.isEqual(signerCert.issuer) && c.cert.serialNumber.isEqual(signerCert.serialNumber)
  )
  if (!signerEntry) throw new TsaValidationError("signer certificate not found in token")

  // Make sure the messageDigest attribute covers exactly the TSTInfo we parsed.
  const md = findAttribute(signerInfo, OID.messageDigest)?.values[0]
  const digestAlg = HASH_NAMES[signerInfo.digestAlgorithm.algorithmId]
  if (!digestAlg || !(md instanceof asn1js.OctetString)) throw new TsaValidationError("missing messageDigest attribute")
  if (!bytesEqual(copyBytes(md.valueBlock.valueHexView), hashBytes(digestAlg.node, tstInfoDer))) {
    throw new TsaValidationError("messageDigest attribute does not match the TSTInfo")
  }

  checkSignerCertificateUsage(signerEntry.cert)
  const genTime = tstInfo.genTime
  if (genTime < signerEntry.cert.notBefore.value || genTime > signerEntry.cert.notAfter.value) {
    throw new TsaValidationError("genTime is outside the signer certificate validity period")
  }
  checkEssSigningCertificate(signerInfo, signerEntry.der, signerEntry.cert)

  const details = detailsOf(decoded)
  return {
    genTime,
    serialNumber: details.serial_number,
    policy: details.policy,
    nonce: details.nonce,
    hashAlgorithm: details.hash_algorithm,
    hashedMessage: details.hashed_message,
    tsaName: details.tsa_name,
    accuracy: details.accuracy,
    signer: certificateInfo(signerEntry.cert),
    chainVerified: opts.requireChain,
    details
  }
}

/**
 * Offline verification (for the verifier CLI). With trust anchors the signer
 * chain is validated; without, only the CMS signature against the token's own
 * embedded certificate is checked and `chainVerified` is false.
 */
export const verifyTokenOffline = (
  token: Uint8Array,
  digest: Uint8Array | null,
  trustAnchorsPem?: string,
  certificatesPem?: string
): Promise<ValidatedToken> =>
  validateTimeStampToken(token, {
    digest,
    requireChain: trustAnchorsPem !== undefined,
    ...(trustAnchorsPem !== undefined ? { trustAnchorsPem } : {}),
    ...(certificatesPem !== undefined ? { certificatesPem } : {})
  })
