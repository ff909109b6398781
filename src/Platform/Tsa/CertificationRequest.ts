/**
 * PKCS#10 certification requests (RFC 2986) for the time-stamping authority's key, built
 * with pkijs: a subject, the key's SubjectPublicKeyInfo, and an extensionRequest (PKCS#9)
 * for what a TSA certificate must carry (critical extendedKeyUsage timeStamping only,
 * critical keyUsage digitalSignature and nonRepudiation). The key signs the request itself
 * (ecdsa-with-SHA256) through its KeySigner, so a key in an encrypted file or a PKCS#11
 * token never leaves custody. The subject is read from an RFC 4514 string
 * (`CN=…,O=…,C=…`) limited to the attributes a TSA certificate's subject uses.
 */
import * as asn1js from "asn1js"
import { Effect, Either } from "effect"
import * as pkijs from "pkijs"
import type { ServiceUnavailable } from "../../Domain/Errors.js"
import type { KeySigner } from "../Signer.js"
import { rdnSequence, tsaKeyExtensions } from "./Certificates.js"
import { derToPem } from "./Rfc3161.js"
import { SIGNATURE_OID } from "./TokenIssuer.js"

const EXTENSION_REQUEST = "1.2.840.113549.1.9.14"

interface SubjectAttribute {
  readonly name: string
  readonly oid: string
  /** X.520's string type for it: DirectoryString as UTF8String, or the type X.520 fixes. */
  readonly encoding: "utf8" | "printable" | "ia5"
  /** Its upper bound in characters (X.520, PKCS#9). */
  readonly max: number
}

/** The attributes a subject may name, by their lower-case RFC 4514 names. */
const SUBJECT_ATTRIBUTES: ReadonlyMap<string, SubjectAttribute> = new Map(
  ([
    ["CN", "2.5.4.3", "utf8", 64],
    ["O", "2.5.4.10", "utf8", 64],
    ["OU", "2.5.4.11", "utf8", 64],
    ["C", "2.5.4.6", "printable", 2],
    ["L", "2.5.4.7", "utf8", 128],
    ["ST", "2.5.4.8", "utf8", 128],
    ["serialNumber", "2.5.4.5", "printable", 64],
    ["organizationIdentifier", "2.5.4.97", "utf8", 256],
    ["emailAddress", "1.2.840.113549.1.9.1", "ia5", 255]
  ] as const).map(([name, oid, encoding, max]) => [name.toLowerCase(), { name, oid, encoding, max }])
)

/** The attribute names a subject may use, for messages. */
export const SUBJECT_ATTRIBUTE_NAMES: ReadonlyArray<string> = [...SUBJECT_ATTRIBUTES.values()].map((a) => a.name)

const PRINTABLE = /^[A-Za-z0-9 '()+,\-./:=?]*$/

/** One character of an RFC 4514 string, and whether a backslash escaped it. */
interface Char {
  readonly c: string
  readonly escaped: boolean
}

/** The characters of `text` with RFC 4514 escapes (`\,`, `\\`, `\2C`) resolved; a hex pair is a UTF-8 byte. */
const unescape = (text: string): Either.Either<Array<Char>, string> => {
  const out: Array<Char> = []
  const bytes: Array<number> = []
  const flush = (): string | undefined => {
    if (bytes.length === 0) return undefined
    try {
      const decoded = new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(bytes))
      for (const c of decoded) out.push({ c, escaped: true })
      bytes.length = 0
      return undefined
    } catch {
      return "its escaped bytes (\\XX) are not UTF-8"
    }
  }
  const chars = [...text]
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i]!
    if (c !== "\\") {
      const bad = flush()
      if (bad !== undefined) return Either.left(bad)
      out.push({ c, escaped: false })
      continue
    }
    const pair = `${chars[i + 1] ?? ""}${chars[i + 2] ?? ""}`
    if (/^[0-9A-Fa-f]{2}$/.test(pair)) {
      bytes.push(parseInt(pair, 16))
      i += 2
      continue
    }
    const bad = flush()
    if (bad !== undefined) return Either.left(bad)
    const next = chars[i + 1]
    if (next === undefined) return Either.left("it ends in a lone backslash")
    out.push({ c: next, escaped: true })
    i++
  }
  const bad = flush()
  return bad === undefined ? Either.right(out) : Either.left(bad)
}

/** `chars` cut at each unescaped `separator`. */
const splitAt = (chars: ReadonlyArray<Char>, separator: string): Array<Array<Char>> =>
  chars.reduce<Array<Array<Char>>>((parts, ch) => {
    if (!ch.escaped && ch.c === separator) parts.push([])
    else parts[parts.length - 1]!.push(ch)
    return parts
  }, [[]])

/** `chars` without unescaped spaces at either end (people write `CN=x, O=y`). */
const trimmed = (chars: ReadonlyArray<Char>): Array<Char> => {
  let start = 0
  let end = chars.length
  while (start < end && !chars[start]!.escaped && chars[start]!.c === " ") start++
  while (end > start && !chars[end - 1]!.escaped && chars[end - 1]!.c === " ") end--
  return chars.slice(start, end)
}

const textOf = (chars: ReadonlyArray<Char>): string => chars.map((ch) => ch.c).join("")

const valueOf = (attribute: SubjectAttribute, value: string): Either.Either<pkijs.AttributeValueType, string> => {
  if (value.length === 0) return Either.left(`${attribute.name} is empty`)
  if (attribute.name === "C" && !/^[A-Z]{2}$/.test(value)) return Either.left(`C must be a two-letter country code in capitals (ISO 3166), not "${value}"`)
  if ([...value].length > attribute.max) return Either.left(`${attribute.name} is longer than ${attribute.max} characters`)
  switch (attribute.encoding) {
    case "utf8":
      return Either.right(new asn1js.Utf8String({ value }))
    case "printable":
      if (!PRINTABLE.test(value)) return Either.left(`${attribute.name} may hold only letters, digits, spaces and '()+,-./:=?`)
      return Either.right(new asn1js.PrintableString({ value }))
    case "ia5":
      if (!/^[\x00-\x7f]*$/.test(value)) return Either.left(`${attribute.name} may hold only ASCII`)
      return Either.right(new asn1js.IA5String({ value }))
  }
}

/**
 * A subject from an RFC 4514 string (`CN=Example TSA,O=Example,C=DE`: the most specific
 * RDN first, so the name's ASN.1 order is the reverse), one attribute per RDN; Left with
 * the reason for anything else: an unknown attribute, a multi-valued RDN (`+`), a
 * hex-encoded value (`#…`), a value a type cannot hold.
 */
export const parseSubject = (text: string): Either.Either<pkijs.RelativeDistinguishedNames, string> =>
  Either.flatMap(unescape(text), (chars): Either.Either<pkijs.RelativeDistinguishedNames, string> => {
    const attributes: Array<{ readonly type: string; readonly value: pkijs.AttributeValueType }> = []
    for (const rdn of splitAt(chars, ",").map(trimmed)) {
      if (rdn.length === 0) return Either.left("an RDN is empty (two commas in a row, or one at an end)")
      if (rdn.some((ch) => !ch.escaped && ch.c === "+")) return Either.left(`multi-valued RDNs are not supported: "${textOf(rdn)}" (escape a literal + as \\+)`)
      const equals = rdn.findIndex((ch) => !ch.escaped && ch.c === "=")
      if (equals < 0) return Either.left(`"${textOf(rdn)}" is not NAME=value`)
      const name = textOf(trimmed(rdn.slice(0, equals)))
      const attribute = SUBJECT_ATTRIBUTES.get(name.toLowerCase())
      if (attribute === undefined) return Either.left(`unknown attribute "${name}"; known: ${SUBJECT_ATTRIBUTE_NAMES.join(", ")}`)
      const raw = trimmed(rdn.slice(equals + 1))
      if (raw[0]?.c === "#" && !raw[0].escaped) return Either.left(`${attribute.name}: hex-encoded values (#…) are not supported`)
      const value = valueOf(attribute, textOf(raw))
      if (Either.isLeft(value)) return Either.left(value.left)
      attributes.push({ type: attribute.oid, value: value.right })
    }
    if (!attributes.some((a) => a.type === "2.5.4.3")) return Either.left("the subject names no CN (the TSA's name in its tokens)")
    return Either.right(rdnSequence(attributes.reverse()))
  })

/**
 * A PKCS#10 CertificationRequest for `key` (a TSA key) with `subject`, asking for the
 * TSA certificate's extensions, signed by `key`: DER. A key that cannot sign now (a token
 * away) is a ServiceUnavailable.
 */
export const tsaCertificationRequest = (
  subject: pkijs.RelativeDistinguishedNames,
  key: KeySigner
): Effect.Effect<Uint8Array, ServiceUnavailable> =>
  Effect.gen(function*() {
    const request = new pkijs.CertificationRequest({
      version: 0,
      subject,
      subjectPublicKeyInfo: pkijs.PublicKeyInfo.fromBER(key.publicKeySpki),
      attributes: [
        new pkijs.Attribute({ type: EXTENSION_REQUEST, values: [new pkijs.Extensions({ extensions: tsaKeyExtensions() }).toSchema()] })
      ],
      signatureAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: SIGNATURE_OID.ecdsaWithSha256 })
    })
    // toSchema(true) encodes the CertificationRequestInfo from the fields: the bytes the key signs.
    const info = new Uint8Array(request.toSchema(true).valueBlock.value[0]!.toBER())
    request.tbsView = info
    request.signatureValue = new asn1js.BitString({ valueHex: yield* key.sign(info) })
    return new Uint8Array(request.toSchema().toBER())
  })

/** A request as PEM (`-----BEGIN CERTIFICATE REQUEST-----`), what CAs take. */
export const certificationRequestPem = (der: Uint8Array): string => derToPem(der, "CERTIFICATE REQUEST")
