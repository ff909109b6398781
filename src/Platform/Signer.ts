/**
 * The signer port. T0 keys live in `<dataDir>/signing-keys/` as PKCS#8 PEM
 * (mode 0600), parsed once into KeyObjects; signing is node:crypto's (OpenSSL's)
 * `crypto.sign` with the parsed key, and nothing here touches key material. Public keys of every instance are
 * registered in the database so any instance can list and verify them.
 * The newest key file is the current one; `attestd signing-keys rotate` adds one.
 *
 * The time-stamping authority's key (CONTRACT §6) is a key of its own, never a
 * T0 key, held by the same port: `<dataDir>/signing-keys/tsa/`, the newest
 * file current, made on the first start with timestamping on. The port shows
 * it as a `KeySigner` (its public key and a `sign` over bytes), the shape a
 * PKCS#11 adapter provides for a key that never leaves its token.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Option } from "effect"
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign as nodeSign
} from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { jwkThumbprint, normalizeLowS, type PublicJwk } from "../Domain/T0.js"

export { jwkThumbprint }
import { formatMillis } from "../Domain/Time.js"
import { ServiceUnavailable } from "../Domain/Errors.js"
import { AppConfig } from "./Config.js"

export interface LoadedKey {
  readonly kid: string
  readonly jwk: PublicJwk
  readonly privateKey: KeyObject
  readonly createdAt: string
}

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

export const publicJwkOf = (key: KeyObject): PublicJwk => {
  const jwk = createPublicKey(key).export({ format: "jwk" }) as { x: string; y: string }
  return { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid: jwkThumbprint(jwk.x, jwk.y), x: jwk.x, y: jwk.y }
}

const keyDir = (dataDir: string) => join(dataDir, "signing-keys")

/** Where the time-stamping authority's key lives: beside the T0 keys, in a folder of its own. */
export const tsaKeyDir = (dataDir: string) => join(keyDir(dataDir), "tsa")

const loadKeyFile = (path: string, createdAt: string): LoadedKey => {
  const privateKey = createPrivateKey(readFileSync(path))
  const jwk = publicJwkOf(privateKey)
  return { kid: jwk.kid, jwk, privateKey, createdAt }
}

/** Reads every key file, oldest first. File names start with a sortable UTC stamp. */
export const loadKeys = (dataDir: string): Array<LoadedKey> => loadKeysIn(keyDir(dataDir))

const loadKeysIn = (dir: string): Array<LoadedKey> => {
  if (!existsSync(dir)) return []
  return readdirSync(dir)
    .filter((f) => f.endsWith(".pem"))
    .sort()
    .map((f) => {
      const stamp = f.slice(0, 15) // YYYYMMDDTHHMMSS
      const createdAt = `${stamp.slice(0, 4)}-${stamp.slice(4, 6)}-${stamp.slice(6, 8)}T${stamp.slice(9, 11)}:${
        stamp.slice(11, 13)
      }:${stamp.slice(13, 15)}.000000+00:00`
      return loadKeyFile(join(dir, f), createdAt)
    })
}

/** Generates a new P-256 key into the data dir (mode 0600) and returns it. */
export const generateKey = (dataDir: string, nowMillis: number): LoadedKey => generateKeyIn(keyDir(dataDir), nowMillis)

const generateKeyIn = (dir: string, nowMillis: number): LoadedKey => {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const privateKey = newP256Key()
  const jwk = publicJwkOf(privateKey)
  const stamp = new Date(nowMillis).toISOString().replace(/[-:]/g, "").slice(0, 15)
  const path = join(dir, `${stamp}-${jwk.kid}.pem`)
  writeFileSync(path, privateKey.export({ format: "pem", type: "pkcs8" }), { mode: 0o600 })
  chmodSync(path, 0o600)
  return { kid: jwk.kid, jwk, privateKey, createdAt: formatMillis(nowMillis) }
}

/** node:crypto's (OpenSSL's) signature of `payload`: ECDSA over SHA-256(payload), DER, low-S. */
export const signPayloadDer = (key: KeyObject, payload: string): Uint8Array =>
  normalizeLowS(nodeSign("sha256", Buffer.from(payload, "utf8"), { key, dsaEncoding: "der" }))

export const signPayload = (key: KeyObject, payload: string): string =>
  Buffer.from(signPayloadDer(key, payload)).toString("base64")

/** A signing function over `key` as the Signer port holds it: Base64 DER, low-S; a failure is a ServiceUnavailable. */
const keySigner = (key: KeyObject) => (payload: string): Effect.Effect<string, ServiceUnavailable> =>
  Effect.try({
    try: () => signPayload(key, payload),
    catch: (cause) => new ServiceUnavailable({ message: `the signing key could not sign: ${String(cause)}` })
  })

/**
 * A key that signs bytes for a purpose other than T0 (the TSA's signed
 * attributes): ECDSA P-256 over SHA-256(data), DER, low-S.
 */
export interface KeySigner {
  readonly kid: string
  /** The public key as SubjectPublicKeyInfo DER: what its certificate must certify. */
  readonly publicKeySpki: Uint8Array
  /** The DER signature over `data`; a failure is a ServiceUnavailable. */
  readonly sign: (data: Uint8Array) => Effect.Effect<Uint8Array, ServiceUnavailable>
}

/** A KeySigner over a parsed key file. */
export const fileKeySigner = (key: LoadedKey): KeySigner => ({
  kid: key.kid,
  publicKeySpki: new Uint8Array(createPublicKey(key.privateKey).export({ type: "spki", format: "der" })),
  sign: (data) =>
    Effect.try({
      try: () => normalizeLowS(nodeSign("sha256", data, { key: key.privateKey, dsaEncoding: "der" })),
      catch: (cause) => new ServiceUnavailable({ message: `the TSA key could not sign: ${String(cause)}` })
    })
})

/** The current TSA key (the newest in tsaKeyDir), made when there is none. */
export const loadOrCreateTsaKey = (dataDir: string) =>
  Effect.gen(function*() {
    const dir = tsaKeyDir(dataDir)
    const keys = loadKeysIn(dir)
    if (keys.length > 0) return keys[keys.length - 1]!
    const key = generateKeyIn(dir, yield* Clock.currentTimeMillis)
    yield* Effect.logInfo(`generated the time-stamping authority's key ${key.kid} in ${dir}`)
    return key
  })

/** Records public keys in the shared key table (idempotent). */
export const registerPublicKeys = (keys: ReadonlyArray<LoadedKey>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const k of keys) {
      yield* sql`INSERT INTO signing_keys (kid, jwk, created_at) VALUES (${k.kid}, ${JSON.stringify(k.jwk)}, ${k.createdAt})
        ON CONFLICT (kid) DO NOTHING`
    }
  })

export class Signer extends Effect.Service<Signer>()("Platform/Signer", {
  scoped: Effect.gen(function*() {
    const config = yield* AppConfig
    let keys = loadKeys(config.dataDir)
    if (keys.length === 0) {
      keys = [generateKey(config.dataDir, yield* Clock.currentTimeMillis)]
      yield* Effect.logInfo(`generated signing key ${keys[0]!.kid} in ${keyDir(config.dataDir)}`)
    }
    yield* registerPublicKeys(keys)
    const current = keys[keys.length - 1]!
    const sign = keySigner(current.privateKey)
    const tsa = config.timestamping.enabled
      ? Option.some(fileKeySigner(yield* loadOrCreateTsaKey(config.dataDir)))
      : Option.none<KeySigner>()
    return {
      currentKid: current.kid,
      localKeys: keys as ReadonlyArray<LoadedKey>,
      /** Signs a payload (T0, a derived list) with the current key: Base64 DER, low-S. */
      sign,
      /** The time-stamping authority's key; present when timestamping is on. */
      tsa
    }
  })
}) {}

/** A signer over a fixed in-memory key (and TSA key), for tests. */
export const layerSignerFromKey = (key: LoadedKey, tsaKey?: LoadedKey) =>
  Layer.effect(
    Signer,
    Effect.as(
      registerPublicKeys([key]),
      Signer.make({
        currentKid: key.kid,
        localKeys: [key],
        sign: keySigner(key.privateKey),
        tsa: tsaKey === undefined ? Option.none() : Option.some(fileKeySigner(tsaKey))
      })
    )
  )

export const ephemeralKey = (): LoadedKey => {
  const privateKey = newP256Key()
  const jwk = publicJwkOf(privateKey)
  return { kid: jwk.kid, jwk, privateKey, createdAt: formatMillis(Date.now()) }
}
