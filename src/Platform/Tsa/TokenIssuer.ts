/**
 * The issuing side of RFC 3161 (with RFC 5816's signingCertificateV2): reading
 * a TimeStampReq, the checks that refuse it, the TSTInfo in its CMS SignedData,
 * and the TimeStampResp. Pure pkijs/asn1js. The signature is made by whoever
 * holds the key: `prepareToken` hands out the DER of the signed attributes to
 * sign, and `finish` takes the DER signature over them. A key file, the Signer
 * port or an HSM can therefore sit behind the same builder. Used by attestd's
 * own time-stamping authority and by the embedded demo TSA that seals T1.
 */
import { createHash, randomBytes } from "node:crypto"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { bytesToHex } from "../../Domain/Bytes.js"
import { FAIL_INFO_BITS, type FailInfo, OID, oidToString, positiveInteger } from "./Rfc3161.js"

/** Signature algorithms of SignerInfo, by the signing key's type. */
export const SIGNATURE_OID = {
  ecdsaWithSha256: "1.2.840.10045.4.3.2",
  sha256WithRsa: "1.2.840.113549.1.1.11"
} as const

/** The imprint algorithms an authority accepts, each with its digest length in bytes. */
export const IMPRINT_LENGTHS: Readonly<Record<string, number>> = {
  [OID.sha256]: 32,
  [OID.sha384]: 48,
  [OID.sha512]: 64
}

export interface Refusal {
  readonly failInfo: FailInfo
  readonly text: string
}

/** The fields of a TimeStampReq that issuing reads. */
export interface TimeStampRequestFields {
  readonly version: number
  /** messageImprint.hashAlgorithm, dotted OID. */
  readonly hashAlgorithm: string
  readonly hashedMessage: Uint8Array
  /** reqPolicy, dotted OID (arcs of any size). */
  readonly reqPolicy: string | undefined
  /** The nonce INTEGER's content octets, as sent (echoed unchanged). */
  readonly nonce: Uint8Array | undefined
  readonly certReq: boolean
  readonly extensionCount: number
}

const refusal = (failInfo: FailInfo, text: string): Refusal => ({ failInfo, text })

/**
 * `b` is exactly a `type` (not a subclass: an ENUMERATED is an asn1js Integer, a SEQUENCE
 * a Constructed) in the form DER gives it, constructed for SEQUENCE and `[0]`, primitive
 * otherwise (asn1js builds a Sequence from a primitive tag 16 too).
 */
const isA = <T extends asn1js.BaseBlock>(
  b: asn1js.AsnType | undefined,
  type: abstract new(...args: Array<never>) => T,
  constructed = false
): b is T => b instanceof type && b.constructor === type && b.idBlock.isConstructed === constructed

const isSequence = (b: asn1js.AsnType | undefined): b is asn1js.Sequence => isA(b, asn1js.Sequence, true)

/** AlgorithmIdentifier: the algorithm's OID and at most one parameters element. */
const algorithmOid = (b: asn1js.AsnType | undefined): asn1js.ObjectIdentifier | undefined => {
  if (!isSequence(b)) return undefined
  const [oid, ...params] = b.valueBlock.value
  return isA(oid, asn1js.ObjectIdentifier) && params.length <= 1 ? oid : undefined
}

/** Extension ::= SEQUENCE { extnID OBJECT IDENTIFIER, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING } */
const isExtension = (b: asn1js.AsnType): boolean => {
  if (!isSequence(b)) return false
  const [extnId, ...rest] = b.valueBlock.value
  return isA(extnId, asn1js.ObjectIdentifier) &&
    (rest.length === 1 || (rest.length === 2 && isA(rest[0], asn1js.Boolean))) &&
    isA(rest[rest.length - 1], asn1js.OctetString)
}

const parsedSequence = (der: Uint8Array): asn1js.Sequence | undefined => {
  try {
    const asn = asn1js.fromBER(der)
    return asn.offset === der.byteLength && isSequence(asn.result) ? asn.result : undefined
  } catch {
    // asn1js throws, rather than reporting, on some malformed contents (a time string that is not one).
    return undefined
  }
}

/**
 * A DER TimeStampReq's fields, or the badDataFormat refusal when it is not one. The
 * fields are read from asn1js' parse in the order RFC 3161 §2.4.1 fixes (each optional
 * field present at most once, nothing after them): pkijs' TimeStampReq builds and
 * compares three schemas per request, which costs twice the parse.
 */
export const readTimeStampRequest = (der: Uint8Array): TimeStampRequestFields | Refusal => {
  const malformed = refusal("badDataFormat", "the request is not a DER TimeStampReq")
  const request = parsedSequence(der)
  if (request === undefined) return malformed
  const fields = request.valueBlock.value
  const [version, messageImprint] = fields
  if (!isA(version, asn1js.Integer) || !isSequence(messageImprint)) return malformed
  const [hashAlgorithm, hashedMessage, ...more] = messageImprint.valueBlock.value
  const algorithmId = algorithmOid(hashAlgorithm)
  if (algorithmId === undefined || !isA(hashedMessage, asn1js.OctetString) || more.length > 0) return malformed
  let next = 2
  const optional = <T extends asn1js.BaseBlock>(type: abstract new(...args: Array<never>) => T, constructed = false): T | undefined =>
    isA(fields[next], type, constructed) ? (fields[next++] as T) : undefined
  const reqPolicy = optional(asn1js.ObjectIdentifier)
  const nonce = optional(asn1js.Integer)
  const certReq = optional(asn1js.Boolean)
  const extensions = optional(asn1js.Constructed, true)
  if (next !== fields.length) return malformed
  if (extensions !== undefined) {
    const tag = extensions.idBlock
    if (tag.tagClass !== 3 || tag.tagNumber !== 0 || !extensions.valueBlock.value.every(isExtension)) return malformed
  }
  return {
    version: version.valueBlock.valueDec,
    hashAlgorithm: algorithmId.valueBlock.toString(),
    hashedMessage: hashedMessage.valueBlock.valueHexView.slice(),
    // oidToString, not pkijs' toString: arcs above 2^53 (a 2.25.<uuid> policy) come out whole.
    reqPolicy: reqPolicy === undefined ? undefined : oidToString(reqPolicy),
    nonce: nonce?.valueBlock.valueHexView.slice(),
    certReq: certReq?.valueBlock.value === true,
    extensionCount: extensions?.valueBlock.value.length ?? 0
  }
}

export const isRefusal = (r: unknown): r is Refusal =>
  typeof r === "object" && r !== null && "failInfo" in r && "text" in r

const WEAK_ALGORITHMS: Readonly<Record<string, string>> = {
  [OID.sha1]: "SHA-1",
  "1.2.840.113549.2.5": "MD5"
}

export interface IssuingPolicy {
  /** Accepted imprint algorithms (OID → digest length). */
  readonly algorithms: Readonly<Record<string, number>>
  /** The policy written when the request names none. */
  readonly defaultPolicy: string
  /** Policies a request may name (the default is always one). */
  readonly acceptedPolicies: ReadonlyArray<string>
}

/**
 * The policy a request is granted under, or why it is refused, checked in the
 * order OpenSSL's TSA checks: version, algorithm, digest length, policy, extensions.
 */
export const checkTimeStampRequest = (req: TimeStampRequestFields, policy: IssuingPolicy): { readonly policy: string } | Refusal => {
  if (req.version !== 1) return refusal("badRequest", `request version ${req.version} is not supported (only 1)`)
  const length = policy.algorithms[req.hashAlgorithm]
  if (length === undefined) {
    const weak = WEAK_ALGORITHMS[req.hashAlgorithm]
    return refusal(
      "badAlg",
      weak !== undefined
        ? `${weak} is not accepted as the message imprint algorithm`
        : `the message imprint algorithm ${req.hashAlgorithm} is not accepted`
    )
  }
  if (req.hashedMessage.byteLength !== length) {
    return refusal("badDataFormat", `the message imprint is ${req.hashedMessage.byteLength} bytes; its algorithm gives ${length}`)
  }
  const granted = req.reqPolicy ?? policy.defaultPolicy
  if (granted !== policy.defaultPolicy && !policy.acceptedPolicies.includes(granted)) {
    return refusal("unacceptedPolicy", `the policy ${granted} is not accepted by this TSA`)
  }
  if (req.extensionCount > 0) return refusal("unacceptedExtension", "this TSA understands no request extensions")
  return { policy: granted }
}

/** 20 random bytes read as a positive integer (at most 160 bits): the token's serial, with its lowercase hex. */
export const randomSerial = (): { readonly integer: Uint8Array; readonly hex: string } => {
  const bytes = new Uint8Array(randomBytes(20))
  return { integer: positiveInteger(bytes).valueBlock.valueHexView.slice(), hex: serialHex(bytes) }
}

/** The lowercase hex of an unsigned big-endian integer, without leading zeros ("0" for zero). */
export const serialHex = (unsigned: Uint8Array): string => bytesToHex(unsigned).replace(/^0+(?=.)/, "")

const sha256 = (data: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(data).digest())

/** The TSA's certificate, parsed and as DER (ESSCertIDv2 hashes the DER). */
export interface TsaCertificate {
  readonly certificate: pkijs.Certificate
  readonly der: Uint8Array
}

export const tsaCertificateOf = (der: Uint8Array): TsaCertificate => ({ certificate: pkijs.Certificate.fromBER(der), der })

/**
 * A block that encodes exactly as `block` does, its contents encoded now: splicing it
 * into a token copies bytes instead of walking the structure again (pkijs re-parses a
 * certificate's TBS and every name each time it encodes them, and each asn1js node
 * costs microseconds to build and encode).
 */
const encodedOnce = (block: asn1js.BaseBlock): asn1js.Primitive => {
  const carrier = new asn1js.Primitive({
    idBlock: { tagClass: block.idBlock.tagClass, tagNumber: block.idBlock.tagNumber },
    valueHex: block.valueBlock.toBER()
  })
  // Primitive clears the constructed bit; the block it stands for may set it.
  carrier.idBlock.isConstructed = block.idBlock.isConstructed
  return carrier
}

const bytesEqual = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i])

/** encodedOnce for a part every token repeats, checked once against the block's own encoding. */
const encodedPart = (block: asn1js.BaseBlock): asn1js.Primitive => {
  const carrier = encodedOnce(block)
  if (!bytesEqual(new Uint8Array(carrier.toBER()), new Uint8Array(block.toBER()))) {
    throw new Error(`a pre-encoded ${block.constructor.name} does not encode as its source`)
  }
  return carrier
}

const algorithm = (algorithmId: string, withNullParams: boolean): asn1js.Sequence =>
  new pkijs.AlgorithmIdentifier({ algorithmId, ...(withNullParams ? { algorithmParams: new asn1js.Null() } : {}) }).toSchema() as asn1js.Sequence

const explicit0 = (value: ReadonlyArray<asn1js.BaseBlock>): asn1js.Constructed =>
  new asn1js.Constructed({ idBlock: { tagClass: 3, tagNumber: 0 }, value: [...value] })

const attribute = (type: string, value: asn1js.BaseBlock): asn1js.Sequence =>
  new pkijs.Attribute({ type, values: [value] }).toSchema() as asn1js.Sequence

/** signingCertificateV2 (RFC 5816): one ESSCertIDv2 with the SHA-256 (the default, so omitted) of the TSA certificate. */
const signingCertificateV2 = (signer: TsaCertificate): asn1js.Sequence => {
  const cert = signer.certificate
  const essCertIdV2 = new asn1js.Sequence({
    value: [
      new asn1js.OctetString({ valueHex: sha256(signer.der) }),
      new asn1js.Sequence({
        value: [
          new asn1js.Sequence({ value: [new pkijs.GeneralName({ type: 4, value: cert.issuer }).toSchema()] }),
          new asn1js.Integer({ valueHex: cert.serialNumber.valueBlock.valueHexView })
        ]
      })
    ]
  })
  return attribute(OID.signingCertificateV2, new asn1js.Sequence({ value: [new asn1js.Sequence({ value: [essCertIdV2] })] }))
}

/**
 * What every token of one TSA certificate repeats, encoded once when the certificate
 * is loaded (tokenSignerOf): the certificate's own parts, and the constant fields of
 * RFC 3161 and CMS. A token builds only what varies and splices these in.
 */
export interface TokenSigner {
  readonly certificate: TsaCertificate
  readonly parts: {
    /** SignerInfo.sid: the certificate's IssuerAndSerialNumber. */
    readonly sid: asn1js.BaseBlock
    /** The signingCertificateV2 signed attribute. */
    readonly signingCertificateV2: asn1js.BaseBlock
    /** TSTInfo.tsa: `[0]` around the certificate's subject as a directoryName. */
    readonly tsaName: asn1js.BaseBlock
    /** SignedData.certificates (`[0]` IMPLICIT SET), written when a request sets certReq. */
    readonly certificates: asn1js.BaseBlock
    /** The contentType signed attribute (id-ct-TSTInfo). */
    readonly contentType: asn1js.BaseBlock
    /** SignerInfo.signatureAlgorithm by SIGNATURE_OID value (RSA's carries NULL parameters). */
    readonly signatureAlgorithms: Readonly<Record<string, asn1js.BaseBlock>>
    /** messageImprint.hashAlgorithm (NULL parameters, as OpenSSL writes them) by the IMPRINT_LENGTHS OIDs. */
    readonly imprintAlgorithms: Readonly<Record<string, asn1js.BaseBlock>>
    readonly sha256: asn1js.BaseBlock
    /** SignedData.digestAlgorithms: SHA-256 alone. */
    readonly digestAlgorithms: asn1js.BaseBlock
    readonly tstInfoType: asn1js.BaseBlock
    readonly signedDataType: asn1js.BaseBlock
    readonly messageDigestType: asn1js.BaseBlock
    readonly version1: asn1js.BaseBlock
    readonly version3: asn1js.BaseBlock
    /** The PKIStatusInfo of a granted TimeStampResp. */
    readonly granted: asn1js.BaseBlock
  }
}

const recordOf = <T>(keys: ReadonlyArray<string>, f: (key: string) => T): Readonly<Record<string, T>> =>
  Object.fromEntries(keys.map((k) => [k, f(k)]))

/** The token parts of `signer`, embedding `embedded` (the signer's certificate first) when asked for certificates. */
export const tokenSignerOf = (signer: TsaCertificate, embedded: ReadonlyArray<TsaCertificate>): TokenSigner => {
  const cert = signer.certificate
  return {
    certificate: signer,
    parts: {
      sid: encodedPart(new pkijs.IssuerAndSerialNumber({ issuer: cert.issuer, serialNumber: cert.serialNumber }).toSchema()),
      signingCertificateV2: encodedPart(signingCertificateV2(signer)),
      tsaName: encodedPart(explicit0([new pkijs.GeneralName({ type: 4, value: cert.subject }).toSchema() as asn1js.Constructed])),
      certificates: encodedPart(
        explicit0(new pkijs.CertificateSet({ certificates: embedded.map((c) => c.certificate) }).toSchema().valueBlock.value)
      ),
      contentType: encodedPart(attribute(OID.contentType, new asn1js.ObjectIdentifier({ value: OID.tstInfo }))),
      signatureAlgorithms: recordOf(
        Object.values(SIGNATURE_OID),
        (oid) => encodedPart(algorithm(oid, oid === SIGNATURE_OID.sha256WithRsa))
      ),
      imprintAlgorithms: recordOf(Object.keys(IMPRINT_LENGTHS), (oid) => encodedPart(algorithm(oid, true))),
      sha256: encodedPart(algorithm(OID.sha256, false)),
      digestAlgorithms: encodedPart(new asn1js.Set({ value: [algorithm(OID.sha256, false)] })),
      tstInfoType: encodedPart(new asn1js.ObjectIdentifier({ value: OID.tstInfo })),
      signedDataType: encodedPart(new asn1js.ObjectIdentifier({ value: OID.signedData })),
      messageDigestType: encodedPart(new asn1js.ObjectIdentifier({ value: OID.messageDigest })),
      version1: encodedPart(new asn1js.Integer({ value: 1 })),
      version3: encodedPart(new asn1js.Integer({ value: 3 })),
      granted: encodedPart(new pkijs.PKIStatusInfo({ status: pkijs.PKIStatus.granted }).toSchema() as asn1js.Sequence)
    }
  }
}

export interface TokenContent {
  readonly signer: TokenSigner
  /** Whether the token embeds the signer's certificates (the request's certReq). */
  readonly includeCertificates: boolean
  /** SignerInfo.signatureAlgorithm, from SIGNATURE_OID. */
  readonly signatureAlgorithm: string
  readonly policy: string
  readonly hashAlgorithm: string
  readonly hashedMessage: Uint8Array
  /** A positive INTEGER's content octets (randomSerial). */
  readonly serial: Uint8Array
  readonly genTime: Date
  /** The accuracy of genTime in milliseconds; none when undefined. */
  readonly accuracyMs: number | undefined
  /** The request nonce's INTEGER content octets, echoed. */
  readonly nonce: Uint8Array | undefined
}

export interface PreparedToken {
  /** The DER SET OF signed attributes: what the TSA key signs (ECDSA/RSA over its SHA-256). */
  readonly signedAttributes: Uint8Array
  /** The TimeStampToken (CMS ContentInfo DER) with `signature` (DER) over `signedAttributes`. */
  readonly finish: (signature: Uint8Array) => Uint8Array
  /** The token as `finish` makes it and the granted TimeStampResp that carries it, the token encoded once. */
  readonly finishGranted: (signature: Uint8Array) => { readonly token: Uint8Array; readonly response: Uint8Array }
}

const accuracyOf = (ms: number): pkijs.Accuracy => {
  const seconds = Math.floor(ms / 1000)
  const millis = Math.round(ms % 1000)
  return new pkijs.Accuracy({ ...(seconds > 0 ? { seconds } : {}), ...(millis > 0 ? { millis } : {}) })
}

/** DER order of a SET OF: its elements sorted by their encodings (OpenSSL re-encodes signed attributes to verify). */
const derOrder = (a: Uint8Array, b: Uint8Array): number => {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!
  return a.length - b.length
}

/** The TSTInfo (RFC 3161 §2.4.2) in pkijs' field order; `ordering` (false, the default) is omitted. */
const tstInfoOf = (c: TokenContent): asn1js.Sequence => {
  const parts = c.signer.parts
  return new asn1js.Sequence({
    value: [
      parts.version1,
      new asn1js.ObjectIdentifier({ value: c.policy }),
      new asn1js.Sequence({
        value: [
          parts.imprintAlgorithms[c.hashAlgorithm] ?? algorithm(c.hashAlgorithm, true),
          new asn1js.OctetString({ valueHex: c.hashedMessage.slice() })
        ]
      }),
      new asn1js.Integer({ valueHex: c.serial.slice() }),
      new asn1js.GeneralizedTime({ valueDate: c.genTime }),
      ...(c.accuracyMs !== undefined && c.accuracyMs > 0 ? [accuracyOf(c.accuracyMs).toSchema()] : []),
      ...(c.nonce !== undefined ? [new asn1js.Integer({ valueHex: c.nonce.slice() })] : []),
      parts.tsaName
    ]
  })
}

/**
 * The TSTInfo and the signed attributes of its token; the signature comes from the key's
 * holder. The CMS layers (RFC 5652 §5) are asn1js structures around the signer's
 * pre-encoded parts; the TSTInfo is a primitive OCTET STRING, as DER has it.
 */
export const prepareToken = (c: TokenContent): PreparedToken => {
  const parts = c.signer.parts
  const tstInfoDer = new Uint8Array(tstInfoOf(c).toBER())
  const messageDigest = new asn1js.Sequence({
    value: [parts.messageDigestType, new asn1js.Set({ value: [new asn1js.OctetString({ valueHex: sha256(tstInfoDer) })] })]
  })
  const attributes = [parts.contentType, encodedOnce(messageDigest), parts.signingCertificateV2]
    .map((a) => ({ a, der: new Uint8Array(a.toBER()) }))
    .sort((x, y) => derOrder(x.der, y.der))
    .map((x) => x.a)
  const signedAttributes = new Uint8Array(new asn1js.Set({ value: attributes }).toBER())
  const signatureAlgorithm = parts.signatureAlgorithms[c.signatureAlgorithm]
  if (signatureAlgorithm === undefined) throw new Error(`no signature algorithm ${c.signatureAlgorithm}`)

  /** The ContentInfo of the token, its contents encoded once. */
  const contentInfoOf = (signature: Uint8Array): asn1js.Primitive => {
    const signerInfo = new asn1js.Sequence({
      value: [
        parts.version1,
        parts.sid,
        parts.sha256,
        new asn1js.Constructed({ idBlock: { tagClass: 3, tagNumber: 0 }, value: attributes }),
        signatureAlgorithm,
        new asn1js.OctetString({ valueHex: signature.slice() })
      ]
    })
    const signedData = new asn1js.Sequence({
      value: [
        parts.version3,
        parts.digestAlgorithms,
        new asn1js.Sequence({ value: [parts.tstInfoType, explicit0([new asn1js.OctetString({ valueHex: tstInfoDer })])] }),
        ...(c.includeCertificates ? [parts.certificates] : []),
        new asn1js.Set({ value: [signerInfo] })
      ]
    })
    return encodedOnce(new asn1js.Sequence({ value: [parts.signedDataType, explicit0([signedData])] }))
  }
  const finish = (signature: Uint8Array): Uint8Array => new Uint8Array(contentInfoOf(signature).toBER())
  const finishGranted = (signature: Uint8Array) => {
    const contentInfo = contentInfoOf(signature)
    return {
      token: new Uint8Array(contentInfo.toBER()),
      response: new Uint8Array(new asn1js.Sequence({ value: [parts.granted, contentInfo] }).toBER())
    }
  }
  return { signedAttributes, finish, finishGranted }
}

// ---------------------------------------------------------------------------
// Responses

const failInfoBits = (info: FailInfo): asn1js.BitString => {
  const bit = FAIL_INFO_BITS[info]
  const bytes = new Uint8Array((bit >> 3) + 1)
  bytes[bit >> 3] = 0x80 >> (bit & 7)
  return new asn1js.BitString({ valueHex: bytes, unusedBits: 7 - (bit & 7) })
}

/** A `rejection` TimeStampResp with its failInfo and statusString (how the reason reaches jarsigner or osslsigncode). */
export const rejectionResponse = (r: Refusal): Uint8Array =>
  new Uint8Array(
    new pkijs.TimeStampResp({
      status: new pkijs.PKIStatusInfo({
        status: pkijs.PKIStatus.rejection,
        statusStrings: [new asn1js.Utf8String({ value: r.text })],
        failInfo: failInfoBits(r.failInfo)
      })
    }).toSchema().toBER()
  )

