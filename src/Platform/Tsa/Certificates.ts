/**
 * X.509 for a local time-stamping authority, built with pkijs: a self-signed
 * root CA and a TSA certificate under it (critical extendedKeyUsage of
 * id-kp-timeStamping only, critical keyUsage digitalSignature and
 * nonRepudiation), ECDSA P-256 with SHA-256. Used by the embedded demo TSA
 * and by attestd's own authority in demo mode. Also the checks a TSA
 * certificate must pass before a key signs under it, and the extensions a TSA
 * key's certification request asks for (the same ones).
 */
import { createHash, createPublicKey, type KeyObject, randomBytes, webcrypto } from "node:crypto"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { jwkThumbprint } from "../../Domain/T0.js"
import { checkSignerCertificateUsage, ensureCryptoEngine, OID, positiveInteger } from "./Rfc3161.js"

type CryptoKey = webcrypto.CryptoKey

const EC_P256: webcrypto.EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" }

/**
 * A distinguished name of one attribute per RDN, in ASN.1 order (the most general first).
 * (pkijs would put a list of attributes into one multi-valued RDN, `O=…+CN=…`, which some
 * verifiers render oddly.)
 */
export const rdnSequence = (attributes: ReadonlyArray<{ readonly type: string; readonly value: pkijs.AttributeValueType }>): pkijs.RelativeDistinguishedNames => {
  const rdns = new asn1js.Sequence({
    value: attributes.map((a) => new asn1js.Set({ value: [new pkijs.AttributeTypeAndValue(a).toSchema()] }))
  })
  return new pkijs.RelativeDistinguishedNames({ schema: asn1js.fromBER(rdns.toBER()).result })
}

/** `O=organization, CN=commonName`, one attribute per RDN. */
export const distinguishedName = (organization: string, commonName: string): pkijs.RelativeDistinguishedNames =>
  rdnSequence([
    { type: "2.5.4.10", value: new asn1js.Utf8String({ value: organization }) },
    { type: "2.5.4.3", value: new asn1js.Utf8String({ value: commonName }) }
  ])

const extension = (extnID: string, critical: boolean, value: asn1js.AsnType): pkijs.Extension =>
  new pkijs.Extension({ extnID, critical, extnValue: value.toBER(false) })

const keyUsage = (byte: number, unusedBits: number): asn1js.BitString =>
  new asn1js.BitString({ valueHex: new Uint8Array([byte]), unusedBits })

/** What a TSA certificate says of its key: critical keyUsage digitalSignature and nonRepudiation, critical extendedKeyUsage timeStamping only. */
export const tsaKeyExtensions = (): Array<pkijs.Extension> => [
  extension(OID.keyUsage, true, keyUsage(0xc0, 6)), // digitalSignature | nonRepudiation
  extension(OID.extKeyUsage, true, new pkijs.ExtKeyUsage({ keyPurposes: [OID.kpTimeStamping] }).toSchema())
]

/** The key identifier of RFC 5280 §4.2.1.2 (1): SHA-1 of the subjectPublicKey bits. */
const keyIdOf = (cert: pkijs.Certificate): Uint8Array =>
  new Uint8Array(createHash("sha1").update(cert.subjectPublicKeyInfo.subjectPublicKey.valueBlock.valueHexView).digest())

const makeCertificate = async (p: {
  readonly subject: pkijs.RelativeDistinguishedNames
  readonly issuer: pkijs.RelativeDistinguishedNames
  readonly publicKey: CryptoKey
  readonly signingKey: CryptoKey
  readonly issuerKeyId: Uint8Array | undefined
  readonly validityMs: number
  readonly extensions: ReadonlyArray<pkijs.Extension>
}): Promise<{ readonly der: Uint8Array; readonly keyId: Uint8Array }> => {
  const cert = new pkijs.Certificate()
  cert.version = 2
  cert.serialNumber = positiveInteger(new Uint8Array(randomBytes(16)))
  cert.subject = p.subject
  cert.issuer = p.issuer
  const now = Date.now()
  cert.notBefore.value = new Date(now - 5 * 60 * 1000)
  cert.notAfter.value = new Date(now + p.validityMs)
  await cert.subjectPublicKeyInfo.importKey(p.publicKey)
  const keyId = keyIdOf(cert)
  cert.extensions = [
    ...p.extensions,
    extension(OID.subjectKeyIdentifier, false, new asn1js.OctetString({ valueHex: keyId })),
    extension(
      OID.authorityKeyIdentifier,
      false,
      new pkijs.AuthorityKeyIdentifier({ keyIdentifier: new asn1js.OctetString({ valueHex: p.issuerKeyId ?? keyId }) }).toSchema()
    )
  ]
  await cert.sign(p.signingKey, "SHA-256")
  return { der: new Uint8Array(cert.toSchema(true).toBER()), keyId }
}

export interface TsaChainNames {
  readonly organization: string
  readonly rootName: string
  readonly tsaName: string
  readonly validityMs: number
}

export interface IssuedTsaChain {
  readonly rootDer: Uint8Array
  readonly tsaDer: Uint8Array
  /** The root's private key: a caller that issues no more certificates drops it. */
  readonly rootPrivateKey: CryptoKey
}

/** A new root CA (fresh P-256 key) and a TSA certificate under it for `tsaPublicKey`. */
export const issueTsaChain = async (names: TsaChainNames, tsaPublicKey: CryptoKey): Promise<IssuedTsaChain> => {
  ensureCryptoEngine()
  const root = (await webcrypto.subtle.generateKey(EC_P256, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair
  const rootName = distinguishedName(names.organization, names.rootName)
  const rootCert = await makeCertificate({
    subject: rootName,
    issuer: rootName,
    publicKey: root.publicKey,
    signingKey: root.privateKey,
    issuerKeyId: undefined,
    validityMs: names.validityMs,
    extensions: [
      extension(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: true, pathLenConstraint: 0 }).toSchema()),
      extension(OID.keyUsage, true, keyUsage(0x06, 1)) // keyCertSign | cRLSign
    ]
  })
  const tsaCert = await makeCertificate({
    subject: distinguishedName(names.organization, names.tsaName),
    issuer: rootName,
    publicKey: tsaPublicKey,
    signingKey: root.privateKey,
    issuerKeyId: rootCert.keyId,
    validityMs: names.validityMs,
    extensions: [
      extension(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: false }).toSchema()),
      ...tsaKeyExtensions()
    ]
  })
  return { rootDer: rootCert.der, tsaDer: tsaCert.der, rootPrivateKey: root.privateKey }
}

/** The public half of a key (createPublicKey takes only private KeyObjects). */
const publicOf = (key: KeyObject): KeyObject => (key.type === "public" ? key : createPublicKey(key))

/** The public key of a KeyObject (public or private) as a WebCrypto key, for certificate building. */
export const webCryptoPublicKey = (key: KeyObject): Promise<CryptoKey> =>
  webcrypto.subtle.importKey(
    "spki",
    publicOf(key).export({ type: "spki", format: "der" }),
    EC_P256,
    true,
    ["verify"]
  )

/** Whether `cert` certifies the public key of `key` (compared as JWK members, whatever the SPKI encoding). */
export const certifiesKey = (cert: pkijs.Certificate, key: KeyObject): boolean => {
  const ofCert = createPublicKey({ key: Buffer.from(cert.subjectPublicKeyInfo.toSchema().toBER()), format: "der", type: "spki" })
    .export({ format: "jwk" })
  const ofKey = publicOf(key).export({ format: "jwk" })
  return ofCert.kty === ofKey.kty && ofCert.crv === ofKey.crv && ofCert.x === ofKey.x && ofCert.y === ofKey.y &&
    ofCert.n === ofKey.n && ofCert.e === ofKey.e
}

/** The kid (RFC 7638 thumbprint) of the P-256 key `cert` certifies; undefined for any other key. */
export const certifiedKid = (cert: pkijs.Certificate): string | undefined => {
  try {
    const jwk = createPublicKey({ key: Buffer.from(cert.subjectPublicKeyInfo.toSchema().toBER()), format: "der", type: "spki" })
      .export({ format: "jwk" })
    return jwk.kty === "EC" && jwk.crv === "P-256" && jwk.x !== undefined && jwk.y !== undefined ? jwkThumbprint(jwk.x, jwk.y) : undefined
  } catch {
    return undefined
  }
}

/** Why `cert` may not sign time-stamp tokens whatever its key, or undefined: it must carry a critical extendedKeyUsage of id-kp-timeStamping only. */
export const tsaUsageProblem = (cert: pkijs.Certificate): string | undefined => {
  try {
    checkSignerCertificateUsage(cert)
    return undefined
  } catch (e) {
    return e instanceof Error ? e.message.replace(/^invalid time-stamp token: /, "") : String(e)
  }
}

/**
 * Why `cert` may not sign time-stamp tokens for `key`, or undefined when it may:
 * it must certify that key and carry a critical extendedKeyUsage of id-kp-timeStamping only.
 */
export const tsaCertificateProblem = (cert: pkijs.Certificate, key: KeyObject): string | undefined => {
  if (!certifiesKey(cert, key)) return "its public key is not the TSA key's"
  return tsaUsageProblem(cert)
}
