/**
 * Signing keys as PKCS#8 PEM files in the data dir (`ATTESTD_SIGNER=file`): T0 keys in
 * `signing-keys/`, the TSA's in `signing-keys/tsa/`, each named `<UTC stamp>-<kid>.pem`,
 * mode 0600. With ATTESTD_KEY_PASSPHRASE_FILE they are encrypted PKCS#8
 * (`-----BEGIN ENCRYPTED PRIVATE KEY-----`: PBES2, PBKDF2-HMAC-SHA256 and AES-256-CBC,
 * node:crypto's own export) and a plain file is refused; `attestd signing-keys encrypt`
 * converts them. A key file open to group or others is refused either way. Keys are
 * parsed once into KeyObjects; signing is node:crypto's `crypto.sign`.
 */
import { Effect, Layer, Option } from "effect"
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign as nodeSign } from "node:crypto"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { ServiceUnavailable } from "../../Domain/Errors.js"
import { jwkThumbprint, normalizeLowS, type PublicJwk } from "../../Domain/T0.js"
import { formatMillis } from "../../Domain/Time.js"
import { makePrivateDir, readSecretFile, requireOwnerOnly, writePrivateFileAtomic } from "../PrivateFiles.js"
import { type HeldKey, KeyCustody, KeyCustodyError, type KeyRole } from "./Custody.js"

/**
 * A new P-256 private key, generated as PEM and read back. A KeyObject straight
 * from generateKeyPairSync shares its lock with the generation job, and Node 20
 * can deadlock when a garbage collection frees that job during a JWK export of
 * the key (seen once: a test process hung for good in ExportJWKEcKey → GC →
 * ~KeyGenJob → pthread_mutex_lock). A key read from PEM shares nothing with it.
 */
export const newP256Key = (): KeyObject =>
  createPrivateKey(
    generateKeyPairSync("ec", {
      namedCurve: "P-256",
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
      publicKeyEncoding: { type: "spki", format: "pem" }
    }).privateKey
  )

/** The public JWK of a P-256 key (private or public KeyObject); its kid is the RFC 7638 thumbprint. */
export const publicJwkOf = (key: KeyObject): PublicJwk => {
  const jwk = createPublicKey(key).export({ format: "jwk" }) as { x: string; y: string }
  return { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid: jwkThumbprint(jwk.x, jwk.y), x: jwk.x, y: jwk.y }
}

/** node:crypto's (OpenSSL's) signature of `message`: ECDSA over SHA-256(message), DER, low-S. */
export const signMessageDer = (key: KeyObject, message: Uint8Array): Uint8Array =>
  normalizeLowS(nodeSign("sha256", message, { key, dsaEncoding: "der" }))

/** The Base64 DER signature of a text payload (T0, a derived list). */
export const signPayload = (key: KeyObject, payload: string): string =>
  Buffer.from(signMessageDer(key, Buffer.from(payload, "utf8"))).toString("base64")

export interface LoadedKey {
  readonly kid: string
  readonly jwk: PublicJwk
  readonly privateKey: KeyObject
  readonly createdAt: string
}

/** A key that lives only in memory (tests, the published test vectors). */
export const ephemeralKey = (): LoadedKey => {
  const privateKey = newP256Key()
  const jwk = publicJwkOf(privateKey)
  return { kid: jwk.kid, jwk, privateKey, createdAt: formatMillis(Date.now()) }
}

export const keyDir = (dataDir: string, role: KeyRole): string =>
  role === "t0" ? join(dataDir, "signing-keys") : join(dataDir, "signing-keys", role)

/** Where the time-stamping authority's key files live: beside the T0 keys, in a folder of their own. */
export const tsaKeyDir = (dataDir: string): string => keyDir(dataDir, "tsa")

const ENCRYPTED = "-----BEGIN ENCRYPTED PRIVATE KEY-----"

/** Whether a key file's PEM is encrypted PKCS#8. */
export const isEncryptedPem = (pem: string): boolean => pem.includes(ENCRYPTED)

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * Reads one key file: owner-only, encrypted exactly when a passphrase is configured.
 * Throws an Error naming the file and what to do.
 */
export const readKeyFile = (path: string, passphrase: string | undefined): KeyObject => {
  requireOwnerOnly(path, "signing key file")
  const pem = readFileSync(path, "utf8")
  const encrypted = isEncryptedPem(pem)
  if (passphrase === undefined && encrypted) {
    throw new Error(`signing key file ${path} is encrypted: set ATTESTD_KEY_PASSPHRASE_FILE to the file holding its passphrase`)
  }
  if (passphrase !== undefined && !encrypted) {
    throw new Error(
      `signing key file ${path} is not encrypted but ATTESTD_KEY_PASSPHRASE_FILE is set: run attestd signing-keys encrypt to encrypt it in place`
    )
  }
  try {
    return passphrase === undefined ? createPrivateKey(pem) : createPrivateKey({ key: pem, format: "pem", passphrase })
  } catch (e) {
    throw new Error(
      encrypted
        ? `cannot decrypt signing key file ${path} with the passphrase of ATTESTD_KEY_PASSPHRASE_FILE (wrong passphrase?)`
        : `signing key file ${path} is not a PKCS#8 private key: ${messageOf(e)}`
    )
  }
}

const keyFiles = (dir: string): Array<string> =>
  existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).filter((f) => f.isFile() && f.name.endsWith(".pem")).map((f) => f.name).sort() : []

/** `YYYYMMDDTHHMMSS-…pem` → the wire time of its stamp. */
const stampTime = (file: string): string => {
  const s = file.slice(0, 15)
  return `${s.slice(0, 4)}-${s.slice(4, 6)}-${s.slice(6, 8)}T${s.slice(9, 11)}:${s.slice(11, 13)}:${s.slice(13, 15)}.000000+00:00`
}

/** Every key file of `role`, oldest first (file names start with a sortable UTC stamp). */
export const loadKeyFiles = (dataDir: string, role: KeyRole, passphrase: string | undefined): Array<LoadedKey> => {
  const dir = keyDir(dataDir, role)
  return keyFiles(dir).map((f) => {
    const privateKey = readKeyFile(join(dir, f), passphrase)
    const jwk = publicJwkOf(privateKey)
    return { kid: jwk.kid, jwk, privateKey, createdAt: stampTime(f) }
  })
}

const pemOf = (key: KeyObject, passphrase: string | undefined): string =>
  (passphrase === undefined
    ? key.export({ format: "pem", type: "pkcs8" })
    : key.export({ format: "pem", type: "pkcs8", cipher: "aes-256-cbc", passphrase })) as string

/** Generates a P-256 key into the role's directory (0700; the file 0600, encrypted with a passphrase). */
export const generateKeyFile = (dataDir: string, role: KeyRole, nowMillis: number, passphrase: string | undefined): LoadedKey => {
  const dir = keyDir(dataDir, role)
  makePrivateDir(dir)
  const privateKey = newP256Key()
  const jwk = publicJwkOf(privateKey)
  const stamp = new Date(nowMillis).toISOString().replace(/[-:]/g, "").slice(0, 15)
  writePrivateFileAtomic(join(dir, `${stamp}-${jwk.kid}.pem`), pemOf(privateKey, passphrase))
  return { kid: jwk.kid, jwk, privateKey, createdAt: formatMillis(nowMillis) }
}

/**
 * `attestd signing-keys encrypt`: every plain key file (all roles) rewritten encrypted in
 * place, atomically and 0600; a file already encrypted is left as it is. Each new file is
 * read back with the passphrase before it replaces the plain one.
 */
export const encryptKeyFiles = (dataDir: string, passphrase: string): { readonly encrypted: Array<string>; readonly already: Array<string> } => {
  const encrypted: Array<string> = []
  const already: Array<string> = []
  for (const role of ["t0", "tsa"] as const) {
    const dir = keyDir(dataDir, role)
    for (const f of keyFiles(dir)) {
      const path = join(dir, f)
      requireOwnerOnly(path, "signing key file")
      const pem = readFileSync(path, "utf8")
      if (isEncryptedPem(pem)) {
        already.push(path)
        continue
      }
      const key = readKeyFile(path, undefined)
      const out = pemOf(key, passphrase)
      if (publicJwkOf(createPrivateKey({ key: out, format: "pem", passphrase })).kid !== publicJwkOf(key).kid) {
        throw new Error(`encrypting ${path} did not round-trip; the file is unchanged`)
      }
      writePrivateFileAtomic(path, out)
      encrypted.push(path)
    }
  }
  return { encrypted, already }
}

/** The passphrase of ATTESTD_KEY_PASSPHRASE_FILE, read once (owner-only file). */
export const readPassphrase = (file: Option.Option<string>): string | undefined =>
  Option.match(file, { onNone: () => undefined, onSome: (f) => readSecretFile(f, "passphrase file (ATTESTD_KEY_PASSPHRASE_FILE)") })

/** A loaded key as custody holds it: it signs with node:crypto. */
export const heldFileKey = (role: KeyRole, key: LoadedKey): HeldKey => ({
  role,
  kid: key.kid,
  jwk: key.jwk,
  createdAt: key.createdAt,
  sign: (message) =>
    Effect.try({
      try: () => signMessageDer(key.privateKey, message),
      catch: (cause) => new ServiceUnavailable({ message: `the signing key ${key.kid} could not sign: ${messageOf(cause)}` })
    })
})

const custodyError = (e: unknown) => new KeyCustodyError({ message: messageOf(e) })

/** The file custody over `dataDir`; the passphrase (if any) is read once, when the layer is built. */
export const layerFileKeys = (dataDir: string, passphraseFile: Option.Option<string>) =>
  Layer.effect(
    KeyCustody,
    Effect.gen(function*() {
      const passphrase = yield* Effect.try({ try: () => readPassphrase(passphraseFile), catch: custodyError })
      return KeyCustody.of({
        kind: "file",
        where: keyDir(dataDir, "t0"),
        held: (role) =>
          Effect.try({ try: () => loadKeyFiles(dataDir, role, passphrase).map((k) => heldFileKey(role, k)), catch: custodyError }),
        generate: (role, nowMillis) =>
          Effect.try({ try: () => heldFileKey(role, generateKeyFile(dataDir, role, nowMillis, passphrase)), catch: custodyError }),
        healthy: Effect.succeed(true),
        parallelism: 1
      })
    })
  )

