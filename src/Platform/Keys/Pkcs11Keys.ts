/**
 * Signing keys in a PKCS#11 token (`ATTESTD_SIGNER=pkcs11`), through pkcs11js. Keys are
 * generated in the token (EC P-256, CKA_TOKEN, CKA_SENSITIVE, not CKA_EXTRACTABLE),
 * labelled `attestd-<role>-<kid>` with CKA_ID = the kid's UTF-8 bytes, and never leave
 * it: a signature is C_Sign with CKM_ECDSA over the SHA-256 digest (node:crypto), its
 * raw r‖s made low-S DER by @noble/curves. A key found in the token that is extractable
 * or not sensitive is not used.
 *
 * The module is loaded once; a connection is C_Initialize, the token's slot found by
 * label, a session per batch the signing threads may hold (PIPELINE_DEPTH per thread) and
 * MAIN_SESSIONS more opened and logged in with the PIN of ATTESTD_PKCS11_PIN_FILE, and the
 * keys' handles. A semaphore with a permit per session hands out one session per operation.
 * Signatures run in worker threads (ATTESTD_PKCS11_WORKERS, Pkcs11Threads.ts), never on the
 * event loop, since C_Sign waits for the token: the signatures asked for in one turn of the
 * event loop are shared among the batches that may start (Batcher.ts), one message to a
 * thread with a session and the keys' handles; a thread signs its batch one after the other
 * and answers the raw r‖s, made low-S DER here. Finding and generating keys and the health
 * check run on the main thread.
 *
 * A token error (or a signing thread that stops or does not answer) marks the connection
 * broken, and the next operation takes every permit, finalizes the module and connects
 * again (at most once a second while the token stays away), since a token that went away
 * invalidates every session and handle, and some modules (SoftHSM among them) find it
 * again only after C_Initialize. While the token is away, operations fail with the reason
 * and the health check says so.
 */
import { Clock, Duration, Effect, Either, Layer, SynchronizedRef } from "effect"
import { createPublicKey, hash, randomUUID } from "node:crypto"
import type { Worker } from "node:worker_threads"
import * as asn1js from "asn1js"
import { ServiceUnavailable } from "../../Domain/Errors.js"
import { compactToLowSDer, jwkThumbprint, type PublicJwk } from "../../Domain/T0.js"
import { makeBatcher } from "../Batcher.js"
import { readSecretFile } from "../PrivateFiles.js"
import { type HeldKey, KeyCustody, KeyCustodyError, type KeyRole } from "./Custody.js"
import { makeSigningThreads, PIPELINE_DEPTH, type SigningThreadData } from "./Pkcs11Threads.js"

type Binding = typeof import("pkcs11js")
type Pkcs11 = InstanceType<Binding["PKCS11"]>
type Handle = Buffer

export interface Pkcs11Settings {
  /** The module's shared library. */
  readonly module: string
  /** The token's label. */
  readonly token: string
  /** A file holding the user PIN. */
  readonly pinFile: string
  /** Threads that sign (ATTESTD_PKCS11_WORKERS), each with a session of its own while it signs. */
  readonly workers: number
}

/** Sessions beside the signing threads' ones, for finding and generating keys and the health check. */
const MAIN_SESSIONS = 2
/** Signatures sent to a thread in one message at most: ~3 ms of SoftHSM's work. */
const MAX_BATCH = 64
/** A batch the token has not answered after this fails, and its thread is replaced. */
const BATCH_TIMEOUT = Duration.seconds(10)
/** Least time between two attempts to reach a token that is away. */
const RECONNECT_EVERY_MS = 1000
const P256_OID = "1.2.840.10045.3.1.7"
const EC_PUBLIC_KEY_OID = "1.2.840.10045.2.1"
const LABEL = /^attestd-(t0|tsa)-(.+)$/

/** The token label of a key: `attestd-t0-<kid>`, `attestd-tsa-<kid>`. */
export const keyLabel = (role: KeyRole, kid: string): string => `attestd-${role}-${kid}`

/** pkcs11js is CommonJS: its exports are the default export of a dynamic import (and of esbuild's bundle). */
const loadBinding = (): Promise<Binding> =>
  import("pkcs11js").then((m) => ((m as { default?: Binding }).default ?? m) as Binding)

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * The JWK of a public key read from CKA_EC_POINT: a DER OCTET STRING holding the
 * uncompressed point, unwrapped with asn1js and placed in a SubjectPublicKeyInfo that
 * node:crypto parses (and checks on the curve).
 */
export const jwkFromEcPoint = (ecPoint: Uint8Array): PublicJwk => {
  const parsed = asn1js.fromBER(ecPoint)
  if (parsed.offset !== ecPoint.byteLength || !(parsed.result instanceof asn1js.OctetString)) {
    throw new Error("CKA_EC_POINT is not a DER OCTET STRING")
  }
  const spki = new asn1js.Sequence({
    value: [
      new asn1js.Sequence({ value: [new asn1js.ObjectIdentifier({ value: EC_PUBLIC_KEY_OID }), new asn1js.ObjectIdentifier({ value: P256_OID })] }),
      new asn1js.BitString({ valueHex: parsed.result.valueBlock.valueHexView })
    ]
  }).toBER()
  const jwk = createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" }).export({ format: "jwk" }) as { crv?: string; x: string; y: string }
  if (jwk.crv !== "P-256") throw new Error(`the token's key is on ${String(jwk.crv)}, not P-256`)
  return { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid: jwkThumbprint(jwk.x, jwk.y), x: jwk.x, y: jwk.y }
}

interface TokenKey {
  readonly role: KeyRole
  readonly kid: string
  readonly jwk: PublicJwk
  readonly handle: Handle
}

interface Connection {
  readonly slot: Handle
  /** Sessions not in use; a permit of the semaphore guarantees one. */
  readonly free: Array<Handle>
  readonly keys: Map<string, TokenKey>
  /** Set by a failed operation: the next one reconnects. */
  broken: boolean
}

type State =
  | { readonly _tag: "up"; readonly conn: Connection }
  | { readonly _tag: "down"; readonly reason: string; readonly atMillis: number }

/** A signature asked of a signing thread. */
interface SignRequest {
  readonly key: TokenKey
  readonly digest: Buffer
}

/**
 * The custody of `settings`' token. `spawn` starts a signing thread (Pkcs11Threads.ts): tests
 * pass one that keeps the Worker, to stop it under a batch.
 */
export const layerPkcs11Keys = (settings: Pkcs11Settings, spawn?: (data: SigningThreadData) => Worker) =>
  Layer.scoped(
    KeyCustody,
    Effect.gen(function*() {
      const custodyError = (e: unknown) => new KeyCustodyError({ message: messageOf(e) })
      const pin = yield* Effect.try({ try: () => readSecretFile(settings.pinFile, "PIN file (ATTESTD_PKCS11_PIN_FILE)"), catch: custodyError })
      const binding = yield* Effect.tryPromise({
        try: loadBinding,
        catch: (e) => custodyError(`cannot load the PKCS#11 binding (pkcs11js): ${messageOf(e)}`)
      })
      const pk: Pkcs11 = new binding.PKCS11()
      yield* Effect.try({
        try: () => pk.load(settings.module),
        catch: (e) => custodyError(`cannot load the PKCS#11 module ${settings.module}: ${messageOf(e)}`)
      })
      const where = `token "${settings.token}" of ${settings.module}`
      const addon = yield* Effect.tryPromise({
        try: () => import("../NativeAddon.js").then((m) => m.pkcs11AddonFile()),
        catch: (e) => custodyError(`cannot find the PKCS#11 binding's native addon (pkcs11js): ${messageOf(e)}`)
      })
      const sessions = settings.workers * PIPELINE_DEPTH + MAIN_SESSIONS

      const findAll = (session: Handle, template: Array<{ type: number; value: number | boolean | Buffer }>): Array<Handle> => {
        pk.C_FindObjectsInit(session, template)
        try {
          const out: Array<Handle> = []
          for (let batch = pk.C_FindObjects(session, 64); batch.length > 0; batch = pk.C_FindObjects(session, 64)) out.push(...batch)
          return out
        } finally {
          pk.C_FindObjectsFinal(session)
        }
      }

      const flag = (value: Buffer): boolean => value.length > 0 && value[0] !== 0

      /** The token's attestd keys (and why any other key labelled as ours is not used). */
      const findKeys = (session: Handle): { readonly keys: Map<string, TokenKey>; readonly notes: Array<string> } => {
        const keys = new Map<string, TokenKey>()
        const notes: Array<string> = []
        for (const handle of findAll(session, [{ type: binding.CKA_CLASS, value: binding.CKO_PRIVATE_KEY }, { type: binding.CKA_KEY_TYPE, value: binding.CKK_EC }])) {
          const [label, id, sensitive, extractable] = pk.C_GetAttributeValue(session, handle, [
            { type: binding.CKA_LABEL },
            { type: binding.CKA_ID },
            { type: binding.CKA_SENSITIVE },
            { type: binding.CKA_EXTRACTABLE }
          ]).map((a) => a.value)
          const m = LABEL.exec(label!.toString("utf8"))
          if (m === null) continue
          const [, role, kid] = m as unknown as [string, KeyRole, string]
          if (id!.toString("utf8") !== kid) {
            notes.push(`key ${m[0]} has CKA_ID ${id!.toString("hex")}, not the UTF-8 bytes of its kid: not used`)
            continue
          }
          if (!flag(sensitive!) || flag(extractable!)) {
            notes.push(`key ${m[0]} is extractable or not sensitive: not used (generate keys in the token with attestd signing-keys create or rotate)`)
            continue
          }
          const pub = findAll(session, [{ type: binding.CKA_CLASS, value: binding.CKO_PUBLIC_KEY }, { type: binding.CKA_ID, value: id! }])[0]
          if (pub === undefined) {
            notes.push(`key ${m[0]} has no public key object with its CKA_ID: not used`)
            continue
          }
          const jwk = jwkFromEcPoint(pk.C_GetAttributeValue(session, pub, [{ type: binding.CKA_EC_POINT }])[0]!.value)
          if (jwk.kid !== kid) {
            notes.push(`key ${m[0]}: its public key's thumbprint is ${jwk.kid}: not used`)
            continue
          }
          keys.set(kid, { role, kid, jwk, handle })
        }
        return { keys, notes }
      }

      const login = (session: Handle) => {
        try {
          pk.C_Login(session, binding.CKU_USER, pin)
        } catch (e) {
          if ((e as { code?: number }).code === binding.CKR_USER_ALREADY_LOGGED_IN) return
          throw new Error(`the token refused the login with the PIN of ${settings.pinFile}: ${messageOf(e)}`)
        }
      }

      /** C_Initialize, the token's slot, `sessions` logged-in sessions, the keys: a connection, or an Error saying why not. */
      const connect = (): { readonly conn: Connection; readonly notes: Array<string> } => {
        pk.C_Initialize({ flags: binding.CKF_OS_LOCKING_OK })
        try {
          const labels = pk.C_GetSlotList(true).map((slot) => ({ slot, label: pk.C_GetTokenInfo(slot).label.trim() }))
          const slot = labels.find((l) => l.label === settings.token)?.slot
          if (slot === undefined) {
            throw new Error(`no token labelled "${settings.token}" in ${settings.module} (tokens present: ${labels.map((l) => JSON.stringify(l.label)).join(", ") || "none"})`)
          }
          const free: Array<Handle> = []
          for (let i = 0; i < sessions; i++) free.push(pk.C_OpenSession(slot, binding.CKF_SERIAL_SESSION | binding.CKF_RW_SESSION))
          login(free[0]!)
          const { keys, notes } = findKeys(free[0]!)
          return { conn: { slot, free, keys, broken: false }, notes }
        } catch (e) {
          finalize()
          throw e
        }
      }

      const finalize = () => {
        try {
          pk.C_Finalize()
        } catch {
          // a module that lost its token may refuse even this; it is initialised afresh next
        }
      }

      const permits = yield* Effect.makeSemaphore(sessions)
      const state = yield* SynchronizedRef.make<State>({ _tag: "down", reason: "not connected yet", atMillis: Number.NEGATIVE_INFINITY })

      /** Connects when there is no working connection (every permit held: no operation is in flight). */
      const reconnect: Effect.Effect<void, string> = Effect.flatten(SynchronizedRef.modifyEffect(state, (s) =>
        Effect.gen(function*(): Effect.fn.Return<readonly [Effect.Effect<void, string>, State]> {
          if (s._tag === "up" && !s.conn.broken) return [Effect.void, s] as const
          const now = yield* Clock.currentTimeMillis
          if (s._tag === "down" && now - s.atMillis < RECONNECT_EVERY_MS) return [Effect.fail(s.reason), s] as const
          if (s._tag === "up") finalize()
          const result = Either.try({ try: connect, catch: messageOf })
          if (Either.isLeft(result)) {
            if (s._tag === "up" || s.atMillis === Number.NEGATIVE_INFINITY) yield* Effect.logWarning(`PKCS#11: ${where} is unavailable: ${result.left}`)
            return [Effect.fail(result.left), { _tag: "down", reason: result.left, atMillis: now }] as const
          }
          for (const note of result.right.notes) yield* Effect.logWarning(`PKCS#11: ${note}`)
          if (s._tag === "up" || s.atMillis !== Number.NEGATIVE_INFINITY) yield* Effect.logInfo(`PKCS#11: connected to ${where} again`)
          return [Effect.void, { _tag: "up", conn: result.right.conn }] as const
        })))

      const ensureUp: Effect.Effect<void, string> = Effect.flatMap(SynchronizedRef.get(state), (s) =>
        s._tag === "up" && !s.conn.broken ? Effect.void : permits.withPermits(sessions)(reconnect))

      /**
       * Runs `use` on a session of a working connection; a failure marks the connection broken.
       * The session is given back only when `use` is over (not when its caller is interrupted).
       */
      const withSession = <A>(use: (conn: Connection, session: Handle) => Effect.Effect<A, string>): Effect.Effect<A, string> =>
        Effect.zipRight(
          ensureUp,
          permits.withPermits(1)(Effect.flatMap(SynchronizedRef.get(state), (s) => {
            if (s._tag === "down") return Effect.fail(s.reason)
            if (s.conn.broken) return Effect.fail("the connection to the token was lost")
            const conn = s.conn
            const session = conn.free.pop()!
            return use(conn, session).pipe(
              Effect.tapError(() => Effect.sync(() => (conn.broken = true))),
              Effect.ensuring(Effect.sync(() => conn.free.push(session))),
              Effect.uninterruptible
            )
          }))
        )

      /** `withSession` for synchronous calls of the binding on the main thread. */
      const onSession = <A>(use: (conn: Connection, session: Handle) => A): Effect.Effect<A, string> =>
        withSession((conn, session) => Effect.try({ try: () => use(conn, session), catch: messageOf }))

      const unavailable = (reason: string) => new ServiceUnavailable({ message: `the PKCS#11 token cannot sign: ${reason}` })

      // Added before the threads and the batcher are made, so it runs after theirs: every thread has stopped when the module is finalized.
      yield* Effect.addFinalizer(() =>
        permits.withPermits(sessions)(Effect.sync(() => {
          finalize()
          try {
            pk.close()
          } catch {
            // unloading is best effort at exit
          }
        }))
      )
      // The first connection is made now: a token that is not there, or a wrong PIN, stops the start.
      yield* Effect.mapError(ensureUp, (reason) => custodyError(`PKCS#11: ${where}: ${reason}`))
      const threads = yield* makeSigningThreads({ data: { addon, module: settings.module }, size: settings.workers, timeout: BATCH_TIMEOUT, startTimeout: BATCH_TIMEOUT, spawn }).pipe(
        Effect.mapError(custodyError)
      )

      /**
       * One thread's share of a batch: each request's key handle from the connection now (a
       * reconnect may have changed it), an outcome per request. Never fails: requests that
       * cannot be signed are answered with the reason, since signing them again one by one
       * would meet the same token.
       */
      const signOnThread = (requests: ReadonlyArray<SignRequest>): Effect.Effect<ReadonlyArray<Either.Either<Uint8Array, string>>> =>
        withSession((conn, session) => {
          const handles = requests.map((r) => conn.keys.get(r.key.kid)?.handle)
          const items = requests.flatMap((r, i) => (handles[i] === undefined ? [] : [{ key: handles[i], digest: r.digest }]))
          return Effect.map(items.length === 0 ? Effect.succeed([]) : threads.sign(session, items), (outcomes) => {
            const answers = outcomes[Symbol.iterator]()
            return requests.map((r, i): Either.Either<Uint8Array, string> => {
              if (handles[i] === undefined) return Either.left(`key ${keyLabel(r.key.role, r.key.kid)} is no longer in the token`)
              const outcome = answers.next().value
              return outcome instanceof Uint8Array ? Either.right(outcome) : Either.left(outcome ?? "the signing thread gave no answer")
            })
          }).pipe(
            // an item's error is the token's, as an operation's: the connection is marked broken
            Effect.tap((out) =>
              Effect.sync(() => {
                if (out.some(Either.isLeft)) conn.broken = true
              })
            )
          )
        }).pipe(Effect.catchAll((reason) => Effect.succeed(requests.map(() => Either.left(reason)))))

      // PIPELINE_DEPTH batches per thread at once: while a thread signs one, its next one waits
      // in its queue, and the signatures answered are made DER and the next batches gather.
      const signInThread = yield* makeBatcher<SignRequest, Either.Either<Uint8Array, string>, never>({
        process: signOnThread,
        maxBatch: MAX_BATCH,
        workers: settings.workers * PIPELINE_DEPTH,
        evenShares: true
      })

      const heldKey = (key: TokenKey): HeldKey => ({
        role: key.role,
        kid: key.kid,
        jwk: key.jwk,
        createdAt: undefined,
        sign: (message) =>
          Effect.suspend(() => signInThread({ key, digest: hash("sha256", message, "buffer") })).pipe(
            Effect.flatMap(Either.match({
              onLeft: (reason) => Effect.fail(unavailable(reason)),
              onRight: (rs) => Effect.succeed(compactToLowSDer(rs))
            }))
          )
      })

      const held = (role: KeyRole) =>
        onSession((conn, session) => {
          const { keys } = findKeys(session)
          conn.keys.clear()
          for (const [kid, k] of keys) conn.keys.set(kid, k)
          return [...keys.values()].filter((k) => k.role === role).map(heldKey)
        }).pipe(Effect.mapError((reason) => custodyError(`${where}: ${reason}`)))

      const generate = (role: KeyRole) =>
        onSession((conn, session) => {
          const pending = Buffer.from(`attestd-pending-${randomUUID()}`, "utf8")
          const common = [{ type: binding.CKA_KEY_TYPE, value: binding.CKK_EC }, { type: binding.CKA_TOKEN, value: true }]
          const pair = pk.C_GenerateKeyPair(
            session,
            { mechanism: binding.CKM_EC_KEY_PAIR_GEN },
            [
              ...common,
              { type: binding.CKA_CLASS, value: binding.CKO_PUBLIC_KEY },
              { type: binding.CKA_PRIVATE, value: false },
              { type: binding.CKA_VERIFY, value: true },
              { type: binding.CKA_ENCRYPT, value: false },
              { type: binding.CKA_WRAP, value: false },
              { type: binding.CKA_EC_PARAMS, value: Buffer.from(new asn1js.ObjectIdentifier({ value: P256_OID }).toBER()) },
              { type: binding.CKA_LABEL, value: pending.toString("utf8") },
              { type: binding.CKA_ID, value: pending }
            ],
            [
              ...common,
              { type: binding.CKA_CLASS, value: binding.CKO_PRIVATE_KEY },
              { type: binding.CKA_PRIVATE, value: true },
              { type: binding.CKA_SENSITIVE, value: true },
              { type: binding.CKA_EXTRACTABLE, value: false },
              { type: binding.CKA_SIGN, value: true },
              { type: binding.CKA_DECRYPT, value: false },
              { type: binding.CKA_UNWRAP, value: false },
              { type: binding.CKA_DERIVE, value: false },
              { type: binding.CKA_LABEL, value: pending.toString("utf8") },
              { type: binding.CKA_ID, value: pending }
            ]
          )
          try {
            // The kid is the public key's thumbprint: known only now, so label and CKA_ID are set after generation.
            const jwk = jwkFromEcPoint(pk.C_GetAttributeValue(session, pair.publicKey, [{ type: binding.CKA_EC_POINT }])[0]!.value)
            const named = [{ type: binding.CKA_LABEL, value: keyLabel(role, jwk.kid) }, { type: binding.CKA_ID, value: Buffer.from(jwk.kid, "utf8") }]
            pk.C_SetAttributeValue(session, pair.privateKey, named)
            pk.C_SetAttributeValue(session, pair.publicKey, named)
            const key: TokenKey = { role, kid: jwk.kid, jwk, handle: pair.privateKey }
            conn.keys.set(key.kid, key)
            return heldKey(key)
          } catch (e) {
            for (const h of [pair.privateKey, pair.publicKey]) {
              try {
                pk.C_DestroyObject(session, h)
              } catch {
                // the error below says what failed
              }
            }
            throw e
          }
        }).pipe(Effect.mapError((reason) => custodyError(`cannot generate a key in ${where}: ${reason}`)))

      return KeyCustody.of({
        kind: "pkcs11",
        where,
        held,
        generate: (role) => generate(role),
        healthy: onSession((conn) => pk.C_GetTokenInfo(conn.slot)).pipe(
          Effect.timeout("2 seconds"),
          Effect.as(true),
          Effect.orElseSucceed(() => false)
        ),
        // enough signatures asked for at once to fill every batch the threads may hold
        parallelism: settings.workers * PIPELINE_DEPTH * MAX_BATCH
      })
    })
  )
