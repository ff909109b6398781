/**
 * API keys by hash, cached in memory so an authenticated request costs no key
 * lookup — without delaying a revocation on any instance (issue 12 §3).
 *
 * On Postgres (no round trip):
 *
 * - every revocation goes through ApiKeyRepo.revoke, which sends
 *   `NOTIFY attestd_api_keys` in the same statement (delivered at commit);
 * - each instance holds one LISTEN connection; a notification empties its cache;
 * - the cache answers only while that connection is known to be up: it starts
 *   empty and off, turns on once LISTEN succeeded, and turns off and empties the
 *   moment the connection errors, ends, or misses a heartbeat (a `SELECT 1`
 *   every 10 s answered within 5 s); it reconnects with backoff;
 * - a lookup that raced a notification is not stored (a generation counter),
 *   and an entry lives at most 30 s, which bounds what a change made outside
 *   attestd (a hand-written UPDATE, which sends no NOTIFY) can miss.
 *
 * Only found, unrevoked keys are cached: an unknown or revoked key is looked up
 * every time.
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
 *   profile under load (2026-11-24): one system call, ~1 µs warm, ~9 µs there;
 * - as on Postgres, an entry lives at most 30 s, which bounds what a hand-written
 *   UPDATE (which replaces no file) can miss.
 */
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { renameSync, statSync, writeFileSync } from "node:fs"
import pg from "pg"
import { currentSqliteFile } from "../Platform/Sql.js"
import type { ApiKey } from "./Domain.js"

export const KEYS_CHANNEL = "attestd_api_keys"

export interface KeyCache {
  /** The generation a lookup starts in; `set` stores only if nothing was invalidated since. */
  readonly generation: () => number
  readonly get: (keyHash: string) => ApiKey | undefined
  readonly set: (keyHash: string, key: ApiKey, generation: number) => void
  readonly invalidate: () => void
  /** Whether the cache answers (its LISTEN connection is up); for tests and metrics. */
  readonly live: () => boolean
}

export interface KeyCacheOptions {
  readonly ttlMs?: number
  readonly heartbeatMs?: number
  readonly heartbeatTimeoutMs?: number
  readonly maxEntries?: number
}

/** No cache: every lookup goes to the store (SQLite). */
export const noKeyCache: KeyCache = {
  generation: () => 0,
  get: () => undefined,
  set: () => {},
  invalidate: () => {},
  live: () => false
}

/** The key cache ApiKeyRepo consults: a server's (KeyCacheLive), or none (`KeyCacheRef.none`: the CLI). */
export class KeyCacheRef extends Context.Tag("Auth/KeyCache")<KeyCacheRef, KeyCache>() {
  static readonly none = Layer.succeed(KeyCacheRef, noKeyCache)
}

/**
 * The cache for a server on this database: Postgres's and SQLite's own, none for
 * an in-memory SQLite database. The SQLite file is the one the SqlClient below
 * opened, as for ApiKeyRepo's announcement (one derivation for both sides).
 */
export const KeyCacheLive = (databaseUrl: string, isPg: boolean, options: KeyCacheOptions = {}) =>
  isPg
    ? Layer.scoped(KeyCacheRef, makePgKeyCache(databaseUrl, options))
    : Layer.effect(
      KeyCacheRef,
      Effect.map(currentSqliteFile, (file) => file === undefined ? noKeyCache : makeSqliteKeyCache(keysMarkerOf(file), options))
    )

/**
 * The entries both caches keep: found, unrevoked keys for at most `ttlMs`, at most
 * `maxEntries` (oldest out first), stored only when nothing was invalidated since
 * the lookup began, answered only while `live()`.
 */
const makeEntries = (options: KeyCacheOptions, live: () => boolean) => {
  const ttlMs = options.ttlMs ?? 30_000
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
      if (!live()) return undefined
      const entry = entries.get(keyHash)
      if (entry === undefined) return undefined
      if (Date.now() - entry.at > ttlMs) {
        entries.delete(keyHash)
        return undefined
      }
      return entry.key
    },
    set: (keyHash, key, at) => {
      if (!live() || at !== generation || key.revokedAt !== null) return
      if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!)
      entries.set(keyHash, { key, at: Date.now() })
    },
    invalidate,
    live
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
  const entries = makeEntries(options, () => true)
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

/** The Postgres cache with its LISTEN connection, for the life of the scope. */
export const makePgKeyCache = (url: string, options: KeyCacheOptions = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      let live = false
      let stopped = false
      let client: pg.Client | undefined
      let retryMs = 250
      let retry: ReturnType<typeof setTimeout> | undefined
      const cache = makeEntries(options, () => live)
      const invalidate = cache.invalidate

      const down = (c: pg.Client) => {
        if (client !== c) return
        client = undefined
        live = false
        invalidate()
        c.removeAllListeners()
        c.on("error", () => {})
        c.end().catch(() => {})
        if (!stopped) {
          retry = setTimeout(connect, retryMs)
          retryMs = Math.min(retryMs * 2, 30_000)
        }
      }

      const connect = () => {
        const c = new pg.Client({ connectionString: url, keepAlive: true, application_name: "attestd-keys" })
        client = c
        c.on("error", () => down(c))
        c.on("end", () => down(c))
        c.on("notification", (message) => {
          if (message.channel === KEYS_CHANNEL) invalidate()
        })
        c.connect()
          .then(() => c.query(`LISTEN ${KEYS_CHANNEL}`))
          .then(() => {
            if (client !== c || stopped) return
            invalidate()
            live = true
            retryMs = 250
          })
          .catch(() => down(c))
      }

      const heartbeat = setInterval(() => {
        const c = client
        if (!live || c === undefined) return
        const late = setTimeout(() => down(c), options.heartbeatTimeoutMs ?? 5_000)
        c.query("SELECT 1").then(() => clearTimeout(late), () => {
          clearTimeout(late)
          down(c)
        })
      }, options.heartbeatMs ?? 10_000)
      heartbeat.unref()

      connect()

      const stop = () => {
        stopped = true
        clearInterval(heartbeat)
        if (retry) clearTimeout(retry)
        const c = client
        client = undefined
        live = false
        invalidate()
        if (c) {
          c.removeAllListeners()
          c.on("error", () => {})
          return c.end().catch(() => {})
        }
        return Promise.resolve()
      }
      return { cache, stop }
    }),
    ({ stop }) => Effect.promise(stop)
  ).pipe(Effect.map(({ cache }) => cache))
