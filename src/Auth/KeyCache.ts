/**
 * API keys by hash, cached in memory so an authenticated request costs no key
 * lookup — without delaying a revocation on any instance past a bound (CONTRACT §7).
 *
 * Every entry lives at most ATTESTD_KEY_CACHE_TTL (default 2 s): that bounds what any
 * change can take to reach every instance, a revocation or an UPDATE by hand, through
 * a connection pooler or not. Only found, unrevoked keys are cached: an unknown or
 * revoked key is looked up every time.
 *
 * On Postgres with ATTESTD_PG_DIRECT_URL (a URL past any pooler: PgBouncer in
 * transaction mode accepts LISTEN and delivers nothing), revocations arrive at once:
 *
 * - every revocation goes through ApiKeyRepo.revoke, which sends
 *   `NOTIFY attestd_api_keys` in the same statement (delivered at commit);
 * - each instance LISTENs on a client of its own to the direct URL
 *   (@effect/sql-pg's `listen`); a notification empties its cache;
 * - that session is probed: every 10 s the instance notifies a probe channel
 *   and must hear itself within 5 s, else the session is dropped and opened
 *   again (backoff up to 30 s), so a LISTEN lost to a restart or failover comes
 *   back by itself; meanwhile the TTL still holds;
 * - a lookup that raced a notification is not stored (a generation counter).
 *
 * On SQLite the lookup is in-process, but it is still a statement and a decoded
 * row: ~14% of the instructions of an authenticated attest (measured with callgrind).
 * A revocation comes from another process (`attestd keys revoke`), so its channel
 * is a file beside the database, `<database>-keys`:
 *
 * - ApiKeyRepo.revoke, once its UPDATE has committed, replaces that file
 *   (a new file renamed over it: a new inode every time, whatever the
 *   file system's timestamp resolution);
 * - the server's cache stats the file at the first lookup or store of each turn
 *   of the event loop, and the others of that turn share the answer; when its
 *   inode or modification time differ from the last ones seen, the cache
 *   empties, and a lookup that raced the change is not stored. A request that
 *   arrives after `keys revoke` has finished is read in a later turn than any
 *   check before it (short of one poll phase draining over 1,024 ready sockets),
 *   so it sees the revocation. A stat per lookup was ~4% of a keyed attest's CPU
 *   profile under load (2026-11-24): one system call, ~1 µs warm, ~9 µs there.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Context, Deferred, Duration, Effect, Fiber, Layer, Option, Queue, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { renameSync, statSync, writeFileSync } from "node:fs"
import type { AppConfigShape } from "../Platform/Config.js"
import { sleepRealTime, timeoutRealTime } from "../Platform/RealTime.js"
import { currentSqliteFile, dialectOf, makePgPool } from "../Platform/Sql.js"
import type { ApiKey } from "./Domain.js"

export const KEYS_CHANNEL = "attestd_api_keys"

/** The channel an instance notifies itself on to know its LISTEN session still hears. */
export const PROBE_CHANNEL = "attestd_listen_probe"

export interface KeyCache {
  /** The generation a lookup starts in; `set` stores only if nothing was invalidated since. */
  readonly generation: () => number
  readonly get: (keyHash: string) => ApiKey | undefined
  readonly set: (keyHash: string, key: ApiKey, generation: number) => void
  readonly invalidate: () => void
}

export interface KeyCacheOptions {
  readonly ttlMs?: number
  readonly maxEntries?: number
  /** How often the LISTEN session is probed (default 10 s), and how long a probe may take (5 s). */
  readonly probeMs?: number
  readonly probeTimeoutMs?: number
}

/** No cache: every lookup goes to the store (SQLite). */
export const noKeyCache: KeyCache = {
  generation: () => 0,
  get: () => undefined,
  set: () => {},
  invalidate: () => {}
}

/** The key cache ApiKeyRepo consults: a server's (KeyCacheLive), or none (`KeyCacheRef.none`: the CLI). */
export class KeyCacheRef extends Context.Tag("Auth/KeyCache")<KeyCacheRef, KeyCache>() {
  static readonly none = Layer.succeed(KeyCacheRef, noKeyCache)
}

/**
 * The cache for a server on this database: Postgres's (listening on the direct URL when
 * there is one) and SQLite's own, none for an in-memory SQLite database. The SQLite file
 * is the one the SqlClient below opened, as for ApiKeyRepo's announcement (one derivation
 * for both sides).
 */
export const KeyCacheLive = (
  config: Pick<AppConfigShape, "databaseUrl" | "pgDirectUrl" | "keyCacheTtl">,
  options: KeyCacheOptions = {}
) => {
  const withTtl: KeyCacheOptions = { ttlMs: Duration.toMillis(config.keyCacheTtl), ...options }
  return dialectOf(config.databaseUrl) === "pg"
    ? Layer.scoped(KeyCacheRef, makePgKeyCache(config.pgDirectUrl, withTtl))
    : Layer.effect(
      KeyCacheRef,
      Effect.map(currentSqliteFile, (file) => file === undefined ? noKeyCache : makeSqliteKeyCache(keysMarkerOf(file), withTtl))
    )
}

/**
 * The entries both caches keep: found, unrevoked keys for at most `ttlMs`, at most
 * `maxEntries` (oldest out first), stored only when nothing was invalidated since
 * the lookup began.
 */
const makeEntries = (options: KeyCacheOptions) => {
  const ttlMs = options.ttlMs ?? 2_000
  const maxEntries = options.maxEntries ?? 10_000
  const entries = new Map<string, { readonly key: ApiKey; readonly at: number }>()
  let generation = 0
  const invalidate = () => {
    generation++
    entries.clear()
  }
  const cache: KeyCache = {
    generation: () => generation,
    get: (keyHash) => {
      const entry = entries.get(keyHash)
      if (entry === undefined) return undefined
      if (Date.now() - entry.at > ttlMs) {
        entries.delete(keyHash)
        return undefined
      }
      return entry.key
    },
    set: (keyHash, key, at) => {
      if (at !== generation || key.revokedAt !== null) return
      if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!)
      entries.set(keyHash, { key, at: Date.now() })
    },
    invalidate
  }
  return cache
}

/** The file whose replacement announces a key change on a SQLite database. */
export const keysMarkerOf = (sqliteFile: string): string => `${sqliteFile}-keys`

/**
 * Announces a key change to every server on this SQLite database: a new file
 * renamed over the marker, so its inode changes every time. Called after the
 * change has committed (never inside a transaction).
 */
export const announceKeysChanged = (marker: string): void => {
  const next = `${marker}.${randomBytes(6).toString("hex")}`
  writeFileSync(next, `${new Date().toISOString()}\n`, { mode: 0o600 })
  renameSync(next, marker)
}

/** The marker as last seen: inode and times (0 when there is none). */
interface MarkerState {
  readonly ino: number
  readonly mtimeMs: number
  readonly ctimeMs: number
}

const markerState = (marker: string): MarkerState => {
  const st = statSync(marker, { throwIfNoEntry: false })
  return st === undefined ? { ino: 0, mtimeMs: 0, ctimeMs: 0 } : { ino: st.ino, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs }
}

/** The SQLite cache: emptied whenever the marker beside the database changed since it last looked. */
export const makeSqliteKeyCache = (marker: string, options: KeyCacheOptions = {}): KeyCache => {
  const entries = makeEntries(options)
  let seen = markerState(marker)
  let checkedThisTurn = false
  const nextTurn = () => {
    checkedThisTurn = false
  }
  /** Empties the cache if the marker changed since the last check (once per turn); true when it did. */
  const changed = (): boolean => {
    if (checkedThisTurn) return false
    checkedThisTurn = true
    setImmediate(nextTurn)
    const now = markerState(marker)
    if (now.ino === seen.ino && now.mtimeMs === seen.mtimeMs && now.ctimeMs === seen.ctimeMs) return false
    seen = now
    entries.invalidate()
    return true
  }
  return {
    ...entries,
    get: (keyHash) => (changed() ? undefined : entries.get(keyHash)),
    // a lookup that read the store before a revocation committed must not be stored after it
    set: (keyHash, key, at) => {
      if (!changed()) entries.set(keyHash, key, at)
    }
  }
}

/** The Postgres cache, with its LISTEN session on `directUrl` (if any) for the life of the scope. */
export const makePgKeyCache = (directUrl: Option.Option<string>, options: KeyCacheOptions = {}) =>
  Effect.gen(function*() {
    const cache = makeEntries(options)
    if (Option.isSome(directUrl)) yield* Effect.forkScoped(listening(directUrl.value, cache.invalidate, options))
    return cache
  })

/**
 * LISTEN sessions on the direct URL, one after the other: each lasts while its probes are
 * heard; a session that fails to open or stops hearing is dropped (its connection closed,
 * waited for at most CLOSE_WAIT_MS) and another opened after a
 * backoff from 250 ms, doubling up to 30 s.
 */
const listening = (url: string, invalidate: () => void, options: KeyCacheOptions) =>
  Effect.gen(function*() {
    let backoffMs = 250
    while (true) {
      const heardAny = yield* session(url, invalidate, options).pipe(Effect.orElseSucceed(() => false))
      if (heardAny) backoffMs = 250
      yield* sleepRealTime(backoffMs)
      backoffMs = Math.min(backoffMs * 2, 30_000)
    }
  })

/** One LISTEN session; succeeds (true once a probe was heard) when a probe goes unheard. */
const session = (url: string, invalidate: () => void, options: KeyCacheOptions) =>
  Effect.gen(function*() {
    const probeMs = options.probeMs ?? 10_000
    const probeTimeoutMs = options.probeTimeoutMs ?? 5_000
    const ready = yield* Deferred.make<PgClient.PgClient, unknown>()
    const probes = yield* Queue.sliding<string>(64)
    const holder = yield* Effect.forkDaemon(
      Effect.scoped(Effect.gen(function*() {
        const pool = yield* makePgPool(url, { max: 1, applicationName: "attestd-keys" })
        const direct = yield* PgClient.fromPool({ acquire: Effect.succeed(pool), applicationName: "attestd-keys" })
        yield* Effect.forkScoped(Stream.runForEach(direct.listen(KEYS_CHANNEL), () => Effect.sync(invalidate)))
        yield* Effect.forkScoped(Stream.runForEach(direct.listen(PROBE_CHANNEL), (payload) => Queue.offer(probes, payload)))
        yield* Deferred.succeed(ready, direct)
        return yield* Effect.never
      })).pipe(Effect.provide(Reactivity.layer), Effect.catchAllCause((cause) => Deferred.failCause(ready, cause)))
    )
    return yield* Effect.gen(function*() {
      const direct = yield* Deferred.await(ready)
      let heardAny = false
      while (yield* probe(direct, probes, probeTimeoutMs)) {
        // changes made while no session was listening are seen within the TTL; from here on at once
        if (!heardAny) invalidate()
        heardAny = true
        yield* sleepRealTime(probeMs)
      }
      return heardAny
    }).pipe(Effect.ensuring(timeoutRealTime(Fiber.interrupt(holder), CLOSE_WAIT_MS, Effect.void)))
  })

/**
 * How long a session's end waits for its connection to close: long enough for a reachable
 * server (a shutdown then leaves no LISTEN connection behind to be terminated after
 * @effect/sql-pg has removed its error handler, which would crash the process), short enough
 * that a vanished server does not hold up the next session.
 */
const CLOSE_WAIT_MS = 2_500

/**
 * Whether this session hears its own notification within `timeoutMs`. The notification is
 * sent again every 250 ms until heard: the first ones may go out before LISTEN is in place.
 */
const probe = (direct: PgClient.PgClient, probes: Queue.Queue<string>, timeoutMs: number) =>
  Effect.gen(function*() {
    const nonce = randomBytes(9).toString("base64url")
    const heard = Effect.iterate("", { while: (p) => p !== nonce, body: () => Queue.take(probes) })
    // pg_notify, not PgClient's notify: NOTIFY takes no bound parameter
    const notify = direct`SELECT pg_notify(${PROBE_CHANNEL}, ${nonce})`
    const sending = Effect.forever(Effect.zipRight(Effect.ignore(notify), sleepRealTime(250)))
    return yield* timeoutRealTime(Effect.as(Effect.raceFirst(heard, sending), true), timeoutMs, Effect.succeed(false))
  })
