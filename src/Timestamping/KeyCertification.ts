/**
 * Getting a TSA key certified by the operator's CA: the PKCS#10 request that `attestd
 * signing-keys csr --tsa` prints for a TSA key in custody, and `rotate --tsa` for the new
 * key in production. The key signs its request where it lives (a file, encrypted or not, or
 * a PKCS#11 token). The subject is the one given, else the subject of the TSA certificate
 * ATTESTD_TSA_CERT_CHAIN holds (a new key keeps the TSA's name).
 */
import { Data, Effect, Either, Option } from "effect"
import type * as pkijs from "pkijs"
import type { AppConfigShape } from "../Platform/Config.js"
import { KeyCustody } from "../Platform/Keys/Custody.js"
import { keySignerOf } from "../Platform/Signer.js"
import { keyWindows } from "../Platform/SigningKeys.js"
import { certificationRequestPem, parseSubject, tsaCertificationRequest } from "../Platform/Tsa/CertificationRequest.js"
import { readChainFile } from "./Certificates.js"

/** No request can be made as asked: no such key in custody, a retired one. */
export class CsrRefused extends Data.TaggedError("CsrRefused")<{ readonly message: string }> {}

/** The subject of a request: `text` (RFC 4514), else the subject of the chain's TSA certificate; Left says why neither. */
export const csrSubject = (text: Option.Option<string>, config: AppConfigShape): Either.Either<pkijs.RelativeDistinguishedNames, string> => {
  if (Option.isSome(text)) return Either.mapLeft(parseSubject(text.value), (reason) => `--subject: ${reason}`)
  const file = config.timestamping.certChainFile
  if (Option.isNone(file)) {
    return Either.left("--subject is needed (e.g. --subject \"CN=Example TSA,O=Example,C=DE\"): there is no ATTESTD_TSA_CERT_CHAIN to take the TSA's name from")
  }
  return Either.match(readChainFile(file.value).read, {
    onLeft: (reason) => Either.left(`--subject is needed: the TSA's name cannot be taken from its chain (${reason})`),
    onRight: ({ chain }) => Either.right(chain.signer.certificate.subject)
  })
}

/**
 * A certification request (PEM) for the TSA key `kid` in custody, else for the newest TSA
 * key held that is not retired, with `subject`.
 */
export const tsaCsr = (kid: Option.Option<string>, subject: pkijs.RelativeDistinguishedNames) =>
  Effect.gen(function*() {
    const custody = yield* KeyCustody
    const held = yield* custody.held("tsa")
    const windows = yield* keyWindows("tsa")
    const wanted = Option.getOrUndefined(kid)
    const key = wanted === undefined
      ? windows.flatMap((w) => (w.retiredAt === null ? held.filter((k) => k.kid === w.kid) : []))[0]
      : held.find((k) => k.kid === wanted)
    if (key === undefined) {
      return yield* new CsrRefused({
        message: wanted === undefined
          ? `no TSA key that is not retired in ${custody.where}; attestd signing-keys create --tsa makes one`
          : `no TSA key ${wanted} in ${custody.where}`
      })
    }
    if (windows.some((w) => w.kid === key.kid && w.retiredAt !== null)) {
      return yield* new CsrRefused({ message: `the TSA key ${key.kid} is retired: certify the key that signs (attestd signing-keys rotate --tsa makes a new one)` })
    }
    const der = yield* tsaCertificationRequest(subject, keySignerOf(key))
    return { kid: key.kid, pem: certificationRequestPem(der) }
  })
