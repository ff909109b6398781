/**
 * The certificate chain the time-stamping authority signs under (CONTRACT §6).
 * Production: ATTESTD_TSA_CERT_CHAIN (PEM, the TSA certificate first), which
 * must certify a TSA key with a critical extendedKeyUsage of timeStamping
 * only, else the instance refuses to start; the authority reads it again when
 * it changes. Demo: `<dataDir>/tsa/root.pem` (a self-signed CA) and `tsa.pem`,
 * made on the first start and whenever the TSA key is no longer the one
 * tsa.pem certifies; the CA's key is never written anywhere (a new key gets a
 * new CA).
 */
import { Effect, Either } from "effect"
import { createPublicKey, type KeyObject } from "node:crypto"
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as pkijs from "pkijs"
import { makePrivateDir } from "../Platform/PrivateFiles.js"
import type { KeySigner } from "../Platform/Signer.js"
import { certifiedKid, issueTsaChain, tsaCertificateProblem, tsaUsageProblem, webCryptoPublicKey } from "../Platform/Tsa/Certificates.js"
import { derToPem, ensureCryptoEngine, pemToDers } from "../Platform/Tsa/Rfc3161.js"
import { type TokenSigner, type TsaCertificate, tsaCertificateOf, tokenSignerOf } from "../Platform/Tsa/TokenIssuer.js"

export interface TsaChain {
  /** The certificate whose key signs tokens. */
  readonly signer: TsaCertificate
  /** What a token embeds when the request asks for certificates: the chain without self-signed roots. */
  readonly embedded: ReadonlyArray<TsaCertificate>
  /** The parts of every token that depend only on the chain, encoded once. */
  readonly tokens: TokenSigner
  /** The whole chain, TSA certificate first (GET /v1/timestamp/certchain). */
  readonly pem: string
}

const DEMO_NAMES = {
  organization: "attestd demo (not a qualified trust service)",
  rootName: "attestd demo time-stamping root (local, unqualified)",
  tsaName: "attestd time-stamping authority (demo, unqualified)",
  validityMs: 10 * 365 * 24 * 3600 * 1000
}

const isSelfSigned = (c: pkijs.Certificate): boolean => c.issuer.isEqual(c.subject)

const chainOf = (ders: ReadonlyArray<Uint8Array>): TsaChain => {
  const certs = ders.map(tsaCertificateOf)
  const embedded = certs.filter((c, i) => i === 0 || !isSelfSigned(c.certificate))
  return {
    signer: certs[0]!,
    embedded,
    tokens: tokenSignerOf(certs[0]!, embedded),
    pem: ders.map((der) => derToPem(der)).join("")
  }
}

const publicKeyOf = (key: KeySigner): KeyObject =>
  createPublicKey({ key: Buffer.from(key.publicKeySpki), format: "der", type: "spki" })

/** How to get a TSA key certified, for messages. */
export const certifyAdvice = (kid: string): string =>
  `certify the TSA key ${kid}: \`attestd signing-keys csr --tsa --kid ${kid}\` prints a certification request for your CA`

/** The operator's chain file as read: its text, and its chain with the kid of the key it certifies, or why it cannot sign tokens. */
export interface ChainFile {
  readonly text: string
  readonly read: Either.Either<{ readonly chain: TsaChain; readonly kid: string }, string>
}

/**
 * Reads ATTESTD_TSA_CERT_CHAIN (`file`): any key's chain as long as its TSA certificate may
 * sign tokens. A file whose text is `previous`'s is not parsed again: `previous` is the answer.
 */
export const readChainFile = (file: string, previous?: ChainFile): ChainFile => {
  const named = (problem: string) => `ATTESTD_TSA_CERT_CHAIN ${file}: ${problem}`
  let text: string
  try {
    text = readFileSync(file, "utf8")
  } catch (e) {
    return { text: "", read: Either.left(named(`cannot read it: ${e instanceof Error ? e.message : String(e)}`)) }
  }
  if (previous !== undefined && previous.text === text) return previous
  try {
    const ders = pemToDers(text)
    if (ders.length === 0) return { text, read: Either.left(named("it holds no CERTIFICATE")) }
    const chain = chainOf(ders)
    const problem = tsaUsageProblem(chain.signer.certificate)
    if (problem !== undefined) return { text, read: Either.left(named(`its first certificate cannot sign time-stamp tokens: ${problem}`)) }
    const kid = certifiedKid(chain.signer.certificate)
    if (kid === undefined) return { text, read: Either.left(named("its first certificate certifies no EC P-256 key, and TSA keys are P-256")) }
    return { text, read: Either.right({ chain, kid }) }
  } catch (e) {
    return { text, read: Either.left(named(`it is not a PEM chain of X.509 certificates: ${e instanceof Error ? e.message : String(e)}`)) }
  }
}

/** The demo chain under <dataDir>/tsa/: reused while tsa.pem certifies the key, else made anew. */
export const demoChain = (key: KeySigner, dataDir: string): Effect.Effect<TsaChain, Error> =>
  Effect.tryPromise({
    try: async () => {
      ensureCryptoEngine()
      const dir = join(dataDir, "tsa")
      const rootFile = join(dir, "root.pem")
      const tsaFile = join(dir, "tsa.pem")
      const publicKey = publicKeyOf(key)
      if (existsSync(rootFile) && existsSync(tsaFile)) {
        const ders = [...pemToDers(readFileSync(tsaFile, "utf8")), ...pemToDers(readFileSync(rootFile, "utf8"))]
        const chain = ders.length === 2 ? chainOf(ders) : undefined
        if (chain !== undefined && tsaCertificateProblem(chain.signer.certificate, publicKey) === undefined) return chain
      }
      makePrivateDir(dir)
      const issued = await issueTsaChain(DEMO_NAMES, await webCryptoPublicKey(publicKey))
      // root.pem first: a tsa.pem is only ever beside the root that issued it.
      for (const [file, der] of [[rootFile, issued.rootDer], [tsaFile, issued.tsaDer]] as const) {
        const tmp = `${file}.tmp-${process.pid}`
        writeFileSync(tmp, derToPem(der), { mode: 0o644 })
        renameSync(tmp, file)
      }
      return chainOf([issued.tsaDer, issued.rootDer])
    },
    catch: (e) => new Error(`the demo TSA certificates in ${join(dataDir, "tsa")}: ${e instanceof Error ? e.message : String(e)}`)
  })
