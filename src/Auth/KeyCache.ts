/**
 * API keys by hash, cached in memory on Postgres so an authenticated request
 * costs no key lookup round trip — without delaying a revocation on any
 * instance (issue 12 §3):
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
 * every time. SQLite needs none of this: its lookup is in-process (tens of µs),
 * and a revocation by `attestd keys revoke` in another process has no channel
 * to announce itself on.
 */
import { Context, Effect, Layer } from "effect"
import pg from "pg"
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

/** The key cache ApiKeyRepo consults: none unless a server provides one (the CLI does not). */
export class KeyCacheRef extends Context.Reference<KeyCacheRef>()("Auth/KeyCache", { defaultValue: (): KeyCache => noKeyCache }) {}

/** The cache for a server on this database: Postgres gets one, SQLite none. */
export const KeyCacheLive = (databaseUrl: string, isPg: boolean, options: KeyCacheOptions = {}) =>
  isPg ? Layer.scoped(KeyCacheRef, makePgKeyCache(databaseUrl, options)) : Layer.succeed(KeyCacheRef, noKeyCache)

/** The Postgres cache with its LISTEN connection, for the life of the scope. */
export const makePgKeyCache = (url: string, options: KeyCacheOptions = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const ttlMs = options.ttlMs ?? 30_000
      const maxEntries = options.maxEntries ?? 10_000
      const entries = new Map<string, { readonly key: ApiKey; readonly at: number }>()
      let generation = 0
      let live = false
      let stopped = false
      let client: pg.Client | undefined
      let retryMs = 250
      let retry: ReturnType<typeof setTimeout> | undefined

      const invalidate = () => {
        generation++
        entries.clear()
      }

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

      const cache: KeyCache = {
        generation: () => generation,
        get: (keyHash) => {
          if (!live) return undefined
          const entry = entries.get(keyHash)
          if (entry === undefined) return undefined
          if (Date.now() - entry.at > ttlMs) {
            entries.delete(keyHash)
            return undefined
          }
          return entry.key
        },
        set: (keyHash, key, at) => {
          if (!live || at !== generation || key.revokedAt !== null) return
          if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!)
          entries.set(keyHash, { key, at: Date.now() })
        },
        invalidate,
        live: () => live
      }
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
