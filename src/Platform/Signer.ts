/**
 * The signer port: signs T0 payloads (and derived lists) with the current T0 key, through
 * the configured key custody (ATTESTD_SIGNER: key files or a PKCS#11 token, Keys/). It
 * never sees key material.
 *
 * Which key is current comes from the signing_keys table, polled every `signingKeyPoll` (2 s):
 * the newest-activated key this instance holds whose window contains the time being
 * signed. `attestd signing-keys rotate` adds a key activated now and ends the previous
 * keys' windows ROTATION_OVERLAP later, so every instance switches (with a shared token
 * or data dir) within its window and no signature falls outside its key's window. A key
 * this instance does not hold (another instance's own key file) is never chosen. An
 * instance left without an unretired key (the first start; a rotation by an instance that
 * does not share its custody) generates one of its own.
 *
 * The time-stamping authority's key (CONTRACT §6) is a key of its own (role `tsa`), in the
 * same custody and under the same windows and poll. Which of the TSA keys valid now signs
 * is the authority's choice (Timestamping/TsaSigning.ts): in production the one the
 * operator's chain certifies. So a TSA key certified by that chain is not retired by a
 * rotation or a start: the authority retires it once the chain certifies its successor.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Clock, Duration, Effect, Layer, Option, Ref, Schedule } from "effect"
import { createPublicKey } from "node:crypto"
import { ServiceUnavailable } from "../Domain/Errors.js"
import { jwkThumbprint } from "../Domain/T0.js"
import { formatMillis } from "../Domain/Time.js"
import { AppConfig, type AppConfigShape } from "./Config.js"
import { type HeldKey, KeyCustody, type KeyCustodyError, type KeyRole } from "./Keys/Custody.js"
import { layerFileKeys } from "./Keys/FileKeys.js"
import { layerPkcs11Keys } from "./Keys/Pkcs11Keys.js"
import { type KeyWindow, keyWindows, registerKey, retireKeys } from "./SigningKeys.js"

export { jwkThumbprint }

/** How long a rotated-out key stays valid after its successor's activation: the instances' time to switch. */
export const ROTATION_OVERLAP = Duration.seconds(10)

/** The custody ATTESTD_SIGNER names: key files in the data dir, or a PKCS#11 token. */
export const KeyCustodyLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    config.signer._tag === "pkcs11" ? layerPkcs11Keys(config.signer) : layerFileKeys(config.dataDir, config.signer.passphraseFile))
)

interface KeyState {
  /** The role's windows, newest activation first. */
  readonly windows: ReadonlyArray<KeyWindow>
  readonly held: ReadonlyMap<string, HeldKey>
  /** The kids the table named at the last look into custody (held or not: another instance's own key). */
  readonly looked: ReadonlySet<string>
}

const validAt = (state: KeyState, w: KeyWindow, at: string): boolean =>
  state.held.has(w.kid) && w.activatedAt <= at && (w.retiredAt === null || at <= w.retiredAt)

/** The key that signs what is registered at `at` (wire time): the newest held key whose window contains it. */
const keyFor = (state: KeyState, at: string): HeldKey | undefined => {
  const w = state.windows.find((w) => validAt(state, w, at))
  return w === undefined ? undefined : state.held.get(w.kid)
}

/** Every held key whose window contains `at`, newest activation first. */
const keysAt = (state: KeyState, at: string): ReadonlyArray<HeldKey> =>
  state.windows.flatMap((w) => (validAt(state, w, at) ? [state.held.get(w.kid)!] : []))

const byKid = (keys: ReadonlyArray<HeldKey>): ReadonlyMap<string, HeldKey> => new Map(keys.map((k) => [k.kid, k]))

/**
 * A key of its own for an instance none of whose held keys of `role` is left unretired: the
 * first start, or a rotation by an instance that does not share this one's custody (its own
 * data dir holding a copy of the rotated key). Generated in custody, active now.
 */
const ensureUnretired = (role: KeyRole, state: KeyState) =>
  Effect.gen(function*() {
    if (state.windows.some((w) => state.held.has(w.kid) && w.retiredAt === null)) return state
    const custody = yield* KeyCustody
    const millis = yield* Clock.currentTimeMillis
    const made = yield* custody.generate(role, millis)
    yield* registerKey(role, made.jwk, formatMillis(millis), formatMillis(millis))
    yield* state.held.size === 0
      ? Effect.logInfo(`generated ${role} signing key ${made.kid} in ${custody.where}`)
      : Effect.logWarning(`every ${role} signing key this instance holds was rotated out elsewhere; generated ${made.kid} in ${custody.where}`)
    const windows = yield* keyWindows(role)
    return { windows, held: new Map([...state.held, [made.kid, made]]), looked: new Set(windows.map((w) => w.kid)) } satisfies KeyState
  })

/**
 * The keys of `role` at start: those the custody holds that the table lacks are registered
 * (from their file's time), a key superseded by a newer one it holds is retired at the newer
 * one's activation plus the overlap (unless `certified`: the TSA keys of an operator's
 * chain, which the authority retires), and without an unretired key one is generated.
 */
const prepareRole = (role: KeyRole, certified: boolean) =>
  Effect.gen(function*() {
    const custody = yield* KeyCustody
    const now = formatMillis(yield* Clock.currentTimeMillis)
    const held = yield* custody.held(role)
    const known = new Set((yield* keyWindows(role)).map((w) => w.kid))
    for (const k of held) {
      if (!known.has(k.kid)) yield* registerKey(role, k.jwk, k.createdAt ?? now, k.createdAt ?? now)
    }
    const mine = (yield* keyWindows(role)).filter((w) => held.some((k) => k.kid === w.kid))
    for (const [newer, older] of certified ? [] : mine.slice(0, -1).map((w, i) => [w, mine[i + 1]!] as const)) {
      if (older.retiredAt === null) yield* retireKeys([older.kid], overlapEnd(newer.activatedAt))
    }
    const windows = yield* keyWindows(role)
    return yield* ensureUnretired(role, { windows, held: byKid(held), looked: new Set(windows.map((w) => w.kid)) })
  })

const overlapEnd = (activatedAt: string): string => formatMillis(Date.parse(activatedAt.slice(0, 23) + "Z") + Duration.toMillis(ROTATION_OVERLAP))

/** Whether the keys of `role` are certified by the operator's chain (ATTESTD_TSA_CERT_CHAIN): the authority retires them. */
const certifiedByChain = (role: KeyRole, config: AppConfigShape): boolean =>
  role === "tsa" && Option.isSome(config.timestamping.certChainFile)

/**
 * `attestd signing-keys rotate`: a new key of `role` in custody, active now; the keys of
 * `role` the custody held before retire after the overlap. Except for a TSA key certified
 * by the operator's chain: that one signs on until the chain certifies the new key (which
 * the CA has yet to do), so the authority retires it then. Returns the new key and its
 * activation time.
 */
export const rotateKey = (role: KeyRole) =>
  Effect.gen(function*() {
    const custody = yield* KeyCustody
    const config = yield* AppConfig
    const before = yield* custody.held(role)
    const millis = yield* Clock.currentTimeMillis
    const made = yield* custody.generate(role, millis)
    const activatedAt = formatMillis(millis)
    yield* registerKey(role, made.jwk, activatedAt, activatedAt)
    if (!certifiedByChain(role, config)) {
      yield* retireKeys(before.map((k) => k.kid).filter((kid) => kid !== made.kid), overlapEnd(activatedAt))
    }
    return { kid: made.kid, activated_at: activatedAt, jwk: made.jwk }
  })

/**
 * `attestd signing-keys create`: the first key of `role` in custody, active now; refused
 * when the custody already holds one that is not retired (rotate replaces keys).
 */
export const createKey = (role: KeyRole) =>
  Effect.gen(function*() {
    const custody = yield* KeyCustody
    const held = new Set((yield* custody.held(role)).map((k) => k.kid))
    const current = (yield* keyWindows(role)).find((w) => held.has(w.kid) && w.retiredAt === null)
    if (current !== undefined) return { existing: current.kid } as const
    const millis = yield* Clock.currentTimeMillis
    const made = yield* custody.generate(role, millis)
    const activatedAt = formatMillis(millis)
    yield* registerKey(role, made.jwk, activatedAt, activatedAt)
    return { kid: made.kid, activated_at: activatedAt, jwk: made.jwk }
  })

/**
 * A key that signs bytes for a purpose other than T0 (the TSA's signed attributes):
 * ECDSA P-256 over SHA-256(data), DER, low-S.
 */
export interface KeySigner {
  readonly kid: string
  /** The public key as SubjectPublicKeyInfo DER: what its certificate must certify. */
  readonly publicKeySpki: Uint8Array
  /** The DER signature over `data`; a failure is a ServiceUnavailable. */
  readonly sign: (data: Uint8Array) => Effect.Effect<Uint8Array, ServiceUnavailable>
}

/** A held key as a KeySigner. */
export const keySignerOf = (key: HeldKey): KeySigner => ({
  kid: key.kid,
  publicKeySpki: new Uint8Array(createPublicKey({ key: { kty: "EC", crv: "P-256", x: key.jwk.x, y: key.jwk.y }, format: "jwk" })
    .export({ type: "spki", format: "der" })),
  sign: key.sign
})

/** Reads `role`'s windows again into `state`; a key the table names for the first time is looked for in custody. */
const refreshRole = (role: KeyRole, state: Ref.Ref<KeyState>) =>
  Effect.gen(function*() {
    const custody = yield* KeyCustody
    const windows = yield* keyWindows(role)
    const current = yield* Ref.get(state)
    const fresh = windows.some((w) => !current.looked.has(w.kid))
    const held = fresh ? byKid(yield* custody.held(role)) : current.held
    yield* Ref.set(state, yield* ensureUnretired(role, { windows, held, looked: fresh ? new Set(windows.map((w) => w.kid)) : current.looked }))
  })

/** The TSA's keys, for the authority that chooses among them (present when timestamping is on). */
export interface TsaKeys {
  /** The held TSA keys whose window contains now, newest activation first. */
  readonly validNow: Effect.Effect<ReadonlyArray<HeldKey>>
  /** Reads the table and (for a key it names for the first time) the custody again now, not at the next poll. */
  readonly refresh: Effect.Effect<void, SqlError.SqlError | KeyCustodyError>
  /**
   * `kid` now signs tokens in place of the older held TSA keys: their windows end now plus
   * ROTATION_OVERLAP (keys already retired keep their time, so every instance may say it).
   * Returns the windows of the keys it found unretired, as they are now.
   */
  readonly supersede: (kid: string) => Effect.Effect<ReadonlyArray<KeyWindow>, SqlError.SqlError | KeyCustodyError>
}

export interface Signed {
  readonly kid: string
  /** Base64 DER, low-S. */
  readonly signature: string
}

export class Signer extends Effect.Service<Signer>()("Platform/Signer", {
  scoped: Effect.gen(function*() {
    const custody = yield* KeyCustody
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const state = yield* Ref.make(yield* prepareRole("t0", false))
    const tsaState = config.timestamping.enabled
      ? Option.some(yield* Ref.make(yield* prepareRole("tsa", certifiedByChain("tsa", config))))
      : Option.none()

    const withStore = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient | KeyCustody>) =>
      effect.pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.provideService(KeyCustody, custody))
    const refresh = withStore(Effect.all([refreshRole("t0", state), ...Option.toArray(Option.map(tsaState, (s) => refreshRole("tsa", s)))])).pipe(
      Effect.catchAll((e) => Effect.logWarning(`signing keys: cannot refresh: ${"message" in e ? e.message : String(e)}`))
    )
    yield* Effect.forkScoped(Effect.repeat(refresh, Schedule.spaced(config.signingKeyPoll)).pipe(Effect.delay(config.signingKeyPoll)))

    const keyNow = (s: Ref.Ref<KeyState>) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.map(Ref.get(s), (st) => keyFor(st, formatMillis(now))))
    const current = keyNow(state)

    const tsa = Option.map(tsaState, (s): TsaKeys => ({
      validNow: Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.map(Ref.get(s), (st) => keysAt(st, formatMillis(now)))),
      refresh: withStore(refreshRole("tsa", s)),
      supersede: (kid) =>
        withStore(Effect.gen(function*() {
          const st = yield* Ref.get(s)
          const index = st.windows.findIndex((w) => w.kid === kid)
          const older = index < 0 ? [] : st.windows.slice(index + 1).filter((w) => st.held.has(w.kid) && w.retiredAt === null).map((w) => w.kid)
          if (older.length === 0) return []
          yield* retireKeys(older, formatMillis((yield* Clock.currentTimeMillis) + Duration.toMillis(ROTATION_OVERLAP)))
          yield* refreshRole("tsa", s)
          return (yield* Ref.get(s)).windows.filter((w) => older.includes(w.kid))
        }))
    }))

    return {
      custody: custody.kind,
      /** How many signatures to ask for at once (a token signs several in parallel). */
      parallelism: custody.parallelism,
      /** The kid T0 signs with now (the newest key held when none is valid now: /v1/info still names one). */
      currentKid: Effect.map(Effect.zip(current, Ref.get(state)), ([k, s]) =>
        k?.kid ?? s.windows.find((w) => s.held.has(w.kid))?.kid ?? ""),
      /**
       * Signs `payload` (T0, a derived list) with the key whose window contains `at` (wire
       * time, the registeredAt being signed): Base64 DER, low-S, and the key's kid.
       */
      sign: (payload: string, at: string): Effect.Effect<Signed, ServiceUnavailable> =>
        Effect.flatMap(Ref.get(state), (s) => {
          const key = keyFor(s, at)
          if (key === undefined) return Effect.fail(new ServiceUnavailable({ message: `no signing key is valid at ${at}` }))
          return Effect.map(key.sign(new TextEncoder().encode(payload)), (der) => ({ kid: key.kid, signature: Buffer.from(der).toString("base64") }))
        }),
      /** The time-stamping authority's keys (a rotation reaches them within one poll); present when timestamping is on. */
      tsa,
      /** `ok` when a key is valid now and its custody answers. */
      health: Effect.map(Effect.zip(current, custody.healthy), ([k, healthy]) => (k !== undefined && healthy ? "ok" as const : "unhealthy" as const))
    }
  }),
  dependencies: [KeyCustodyLive]
}) {}
