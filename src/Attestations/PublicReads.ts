/**
 * The public reads (verify, lookup, status, evidence, keys) and the rule they follow with a read
 * replica (ATTESTD_PG_READ_URL): a read runs first on the replica, through repositories bound to
 * the replica's client; the keys it did not find are read again by the same program on the
 * primary, so an attestation acknowledged to anyone is never reported absent, however far the
 * replica lags. A replica that fails or takes longer than REPLICA_TIMEOUT answers nothing: the
 * whole read goes to the primary, and the replica is left alone for REPLICA_PAUSE. A read's
 * program runs on one database from start to end, so an attestation and its evidence (batch,
 * proof, daily root, signing key) come from the same one. Without a replica every read runs on
 * the primary once.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Cause, Clock, Context, Duration, Effect, Exit, Layer, Option, Ref } from "effect"
import * as Metrics from "../Platform/Metrics.js"
import { ReadSql } from "../Platform/ReadSql.js"
import type { SigningKeys } from "../Platform/SigningKeys.js"
import type { Evidence } from "./Evidence.js"
import type { AttestationRepo } from "./Repo.js"

/** The services a public read's program reads through, each bound to one database. */
export type PublicReadServices = AttestationRepo | Evidence | SigningKeys

/** A read of some keys: what it found, by key; a key it did not find is absent from the map. */
export type KeyedRead<K, V, E> = (keys: ReadonlyArray<K>) => Effect.Effect<ReadonlyMap<K, V>, E, PublicReadServices>

/** Longer than a replica takes to answer a keyed read, short enough that the primary still answers within the 10 s a client waits. */
export const REPLICA_TIMEOUT = Duration.seconds(2)
/** After a replica failure, reads go straight to the primary this long: a replica that is down costs each request nothing. */
export const REPLICA_PAUSE = Duration.seconds(5)

export class PublicReads extends Context.Tag("Attestations/PublicReads")<PublicReads, {
  /** `read` of `keys` on the replica, then of the keys it did not find on the primary (every key, when the replica fails). */
  readonly lookup: <K, V, E>(keys: ReadonlyArray<K>, read: KeyedRead<K, V, E>) => Effect.Effect<ReadonlyMap<K, V>, E>
  /** `lookup` of one key, whose read answers undefined when it does not find it. */
  readonly find: <K, V, E>(key: K, read: (key: K) => Effect.Effect<V | undefined, E, PublicReadServices>) => Effect.Effect<V | undefined, E>
}>() {
  /**
   * The public reads over `readSide`, the layer of PublicReadServices: the primary's are the
   * server's own; with a replica, `readSide` is built once more over the replica's client.
   */
  static readonly layer = <RIn>(readSide: Layer.Layer<PublicReadServices, never, RIn>) => Layer.scoped(PublicReads, make(readSide))
}

const make = <RIn>(readSide: Layer.Layer<PublicReadServices, never, RIn>) =>
  Effect.gen(function*() {
    const readSql = yield* ReadSql
    const primary = yield* Effect.context<PublicReadServices>()
    const onPrimary = <K, V, E>(keys: ReadonlyArray<K>, read: KeyedRead<K, V, E>) => Effect.provide(read(keys), primary)

    const replica = readSql.replica
      ? yield* Layer.build(Layer.provide(readSide, Layer.succeedContext(Context.add(yield* Effect.context<RIn>(), SqlClient.SqlClient, readSql.client))))
      : undefined
    const pausedUntil = yield* Ref.make(0)

    /** What the replica found, or undefined when it failed, was too slow or is paused after a failure. */
    const onReplica = <K, V, E>(keys: ReadonlyArray<K>, read: KeyedRead<K, V, E>, context: Context.Context<PublicReadServices>) =>
      Effect.gen(function*() {
        if ((yield* Clock.currentTimeMillis) < (yield* Ref.get(pausedUntil))) return undefined
        const exit = yield* Effect.exit(Effect.timeoutOption(Effect.provide(read(keys), context), REPLICA_TIMEOUT))
        if (Exit.isSuccess(exit) && Option.isSome(exit.value)) return exit.value.value
        if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) return yield* Effect.interrupt
        const now = yield* Clock.currentTimeMillis
        // one warning per pause, not one per request
        if (now >= (yield* Ref.getAndSet(pausedUntil, now + Duration.toMillis(REPLICA_PAUSE)))) {
          const reason = Exit.isFailure(exit) ? Cause.pretty(exit.cause) : `no answer within ${Duration.format(REPLICA_TIMEOUT)}`
          yield* Effect.logWarning(`the read replica failed; public reads go to the primary for ${Duration.format(REPLICA_PAUSE)}: ${reason}`)
        }
        return undefined
      })

    const lookup = <K, V, E>(keys: ReadonlyArray<K>, read: KeyedRead<K, V, E>): Effect.Effect<ReadonlyMap<K, V>, E> =>
      replica === undefined ? onPrimary(keys, read) : Effect.gen(function*() {
        const found = yield* onReplica(keys, read, replica)
        if (found === undefined) {
          Metrics.inc(Metrics.replicaReads, { outcome: "primary_error" })
          return yield* onPrimary(keys, read)
        }
        const missed = keys.filter((k) => !found.has(k))
        if (missed.length === 0) {
          Metrics.inc(Metrics.replicaReads, { outcome: "replica" })
          return found
        }
        Metrics.inc(Metrics.replicaReads, { outcome: "primary_miss" })
        return new Map([...found, ...(yield* onPrimary(missed, read))])
      })

    const find = <K, V, E>(key: K, read: (key: K) => Effect.Effect<V | undefined, E, PublicReadServices>) =>
      Effect.map(
        lookup([key], (keys) => Effect.map(read(keys[0]!), (v): ReadonlyMap<K, V> => (v === undefined ? new Map() : new Map([[keys[0]!, v]])))),
        (found) => found.get(key)
      )

    return { lookup, find }
  })
