/**
 * Which TSA key signs tokens now, and the chain it signs under. Demo: the newest TSA key
 * valid now, under a demo chain made for it. Production: the newest TSA key valid now that
 * the operator's chain (ATTESTD_TSA_CERT_CHAIN) certifies. A rotation in production retires
 * nothing (the CA has yet to certify the new key), so the certified key signs on; the chain
 * file is read again every signing-key poll, and once it certifies the new key the instance
 * signs with that one and retires the older TSA keys it holds (at that moment plus the
 * rotation overlap). No restart, and the CA's turnaround is no outage.
 */
import { Effect, Either, Option, Ref, Schedule, type Scope, SynchronizedRef } from "effect"
import type { AppConfigShape } from "../Platform/Config.js"
import type { HeldKey } from "../Platform/Keys/Custody.js"
import { type KeySigner, keySignerOf, type TsaKeys } from "../Platform/Signer.js"
import { certifyAdvice, type ChainFile, demoChain, readChainFile, type TsaChain } from "./Certificates.js"

export interface Signing {
  readonly key: KeySigner
  readonly chain: TsaChain
}

/** A key to sign with, and the operator's chain that certifies it (undefined in demo: a chain is made for it). */
export interface Choice {
  readonly held: HeldKey
  readonly chain: TsaChain | undefined
}

const newestOf = (held: ReadonlyArray<HeldKey>): Either.Either<Choice, string> =>
  held[0] === undefined ? Either.left("no time-stamping key is valid now") : Either.right({ held: held[0], chain: undefined })

/** The key the operator's chain certifies among those held valid now; Left says why none, and which key to certify. */
export const certifiedOf = (file: string, chainFile: ChainFile, held: ReadonlyArray<HeldKey>): Either.Either<Choice, string> => {
  const advice = held[0] === undefined ? "" : `; ${certifyAdvice(held[0].kid)}`
  return Either.flatMap(Either.mapLeft(chainFile.read, (reason) => `${reason}${advice}`), ({ chain, kid }) => {
    const key = held.find((k) => k.kid === kid)
    if (key !== undefined) return Either.right({ held: key, chain })
    const holds = held.length === 0 ? "it holds none" : `it holds ${held.map((k) => k.kid).join(", ")}`
    return Either.left(`ATTESTD_TSA_CERT_CHAIN ${file}: its TSA certificate certifies the key ${kid}, which is no TSA key this instance holds valid now (${holds})${advice}`)
  })
}

const isCurrent = (s: Signing, c: Choice): boolean => s.key.kid === c.held.kid && (c.chain === undefined || s.chain === c.chain)

/**
 * The signing state of the authority: `now` (the key and chain to sign with, or why
 * there is none: a token is then refused) and `published` (the same, else the last that
 * was: GET /v1/timestamp/certchain). In production a fiber of the scope reads the chain
 * file again every `signingKeyPoll`. Dies (the instance does not start) when there is
 * nothing to sign with at start.
 */
export const tsaSigning = (config: AppConfigShape, keys: TsaKeys): Effect.Effect<{
  readonly now: Effect.Effect<Signing, Error>
  readonly published: Effect.Effect<Signing>
}, never, Scope.Scope> =>
  Effect.gen(function*() {
    const file = Option.getOrUndefined(config.timestamping.certChainFile)
    const chainFile = yield* Ref.make(file === undefined ? undefined : readChainFile(file))
    const choose = (held: ReadonlyArray<HeldKey>) =>
      Effect.map(Ref.get(chainFile), (f) => (file === undefined || f === undefined ? newestOf(held) : certifiedOf(file, f, held)))

    /** Signs with `c` from now on; a key the operator's chain certifies takes over from the older TSA keys. */
    const take = (c: Choice, previous: Signing | undefined): Effect.Effect<Signing, Error> =>
      Effect.gen(function*() {
        const key = keySignerOf(c.held)
        if (c.chain === undefined) return { key, chain: yield* demoChain(key, config.dataDir) }
        if (previous?.key.kid !== c.held.kid) {
          const retired = yield* keys.supersede(c.held.kid)
          yield* Effect.logInfo(
            `time-stamp tokens are signed by the TSA key ${c.held.kid}, which ATTESTD_TSA_CERT_CHAIN certifies${
              retired.length === 0 ? "" : `; older TSA keys retire: ${retired.map((w) => `${w.kid} at ${w.retiredAt}`).join(", ")}`
            }`
          )
        }
        return { key, chain: c.chain }
      })

    const first = yield* choose(yield* keys.validNow)
    if (Either.isLeft(first)) return yield* Effect.dieMessage(first.left)
    const state = yield* SynchronizedRef.make(yield* Effect.orDie(take(first.right, undefined)))

    const now = Effect.gen(function*() {
      const choice = yield* choose(yield* keys.validNow)
      if (Either.isLeft(choice)) return yield* Effect.fail(new Error(choice.left))
      const c = choice.right
      const current = yield* SynchronizedRef.get(state)
      if (isCurrent(current, c)) return current
      return yield* SynchronizedRef.modifyEffect(state, (again) =>
        isCurrent(again, c) ? Effect.succeed([again, again] as const) : Effect.map(take(c, again), (next) => [next, next] as const))
    })

    if (file !== undefined) {
      // A changed file that cannot sign tokens counts only when the next poll reads it alike: a file caught mid-write is not a chain.
      const unusable = yield* Ref.make<string | undefined>(undefined)
      const poll = Effect.gen(function*() {
        const current = yield* Ref.get(chainFile)
        // the file's text is read every poll, its certificates parsed only when it changed
        const read = yield* Effect.sync(() => readChainFile(file, current))
        if (read.text === current?.text) return yield* Ref.set(unusable, undefined)
        if (Either.isLeft(read.read) && (yield* Ref.getAndSet(unusable, read.text)) !== read.text) return
        yield* Ref.set(unusable, undefined)
        yield* Ref.set(chainFile, read)
        if (Either.isLeft(read.read)) {
          return yield* Effect.logError(`${read.read.left}; time-stamp requests are refused (systemFailure) until it can sign them`)
        }
        const { kid } = read.read.right
        yield* Effect.logInfo(`ATTESTD_TSA_CERT_CHAIN ${file} changed: its TSA certificate certifies the key ${kid}`)
        // a key rotated moments ago may not have reached this instance's poll of the keys yet
        if (!(yield* keys.validNow).some((k) => k.kid === kid)) yield* keys.refresh
        yield* Effect.catchAll(now, (e) => Effect.logError(`${e.message}; time-stamp requests are refused (systemFailure) until it certifies one`))
      })
      yield* Effect.forkScoped(
        Effect.repeat(
          Effect.catchAllCause(poll, (cause) => Effect.logWarning(`ATTESTD_TSA_CERT_CHAIN ${file}: cannot take it up again now`, cause)),
          Schedule.spaced(config.signingKeyPoll)
        ).pipe(Effect.delay(config.signingKeyPoll))
      )
    }

    return { now, published: Effect.orElse(now, () => SynchronizedRef.get(state)) }
  })
