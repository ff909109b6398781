/**
 * The API-key caches (src/Auth/KeyCache.ts).
 *
 * Postgres: instances on one database, each with its own cache. Without a
 * direct URL, a change reaches every instance within the TTL (no LISTEN: what
 * a transaction pooler leaves); with one, a revocation through another instance
 * (or the CLI's repository, which has no cache) reaches them at once although
 * the TTL is a minute, and a LISTEN session lost to a terminated backend comes
 * back by itself.
 *
 * SQLite: a server's cache and the CLI's repository on their own connections to
 * one database file. A cached key is served without a lookup, yet a revocation
 * by the CLI is seen by the next lookup in a later turn of the event loop (the
 * marker file beside the database, checked once per turn), which is where a
 * request sent after the revocation is read (test/Cli/cli.test.ts: the revoked
 * key gets 401 from the running server).
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, ManagedRuntime, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { type ApiKey, hashSecret } from "../../src/Auth/Domain.js"
import { announceKeysChanged, KEYS_CHANNEL, KeyCacheLive, KeyCacheRef, keysMarkerOf, makeSqliteKeyCache } from "../../src/Auth/KeyCache.js"
import { DatabaseLive } from "../../src/main.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"

const available = await postgresAvailable()

const instance = (url: string, cache?: { readonly ttlMs: number; readonly directUrl?: string }) =>
  ManagedRuntime.make(
    ApiKeyRepo.Default.pipe(
      Layer.provideMerge(
        cache
          ? KeyCacheLive(
            { databaseUrl: url, pgDirectUrl: Option.fromNullable(cache.directUrl), keyCacheTtl: Duration.millis(cache.ttlMs) },
            { probeMs: 200, probeTimeoutMs: 1_000 }
          )
          : KeyCacheRef.none
      ),
      Layer.provideMerge(DatabaseLive({ databaseUrl: url }))
    )
  )

type Instance = ReturnType<typeof instance>

/** The next turn of the event loop: the SQLite cache checks its marker once per turn. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 10_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe.skipIf(!available)("API-key cache on Postgres", () => {
  let db: TestDatabase
  let a: Instance
  let b: Instance
  let polling: Instance
  let cli: Instance

  const find = (i: Instance, secret: string) => i.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.findByHash(hashSecret(secret))))
  const create = (i: Instance, label: string) =>
    i.runPromise(Effect.flatMap(ApiKeyRepo, (r) =>
      r.create({ label, scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })))
  /** Changes a key behind attestd's back (no NOTIFY): what a cached lookup cannot see. */
  const relabel = (id: string, label: string) =>
    cli.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE api_keys SET label = ${label} WHERE id = ${id}`))
  const notify = () => cli.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT pg_notify(${KEYS_CHANNEL}, 'test')`))
  /** Until `i` hears notifications: a key it caches, changed by hand, is seen once a NOTIFY is sent. */
  const listening = async (i: Instance, label: string) => {
    const key = await create(cli, label)
    expect((await find(i, key.secret))?.label).toBe(label)
    await relabel(key.id, `${label} heard`)
    await until(`${label}: the instance hears notifications`, async () => {
      await notify()
      await new Promise((r) => setTimeout(r, 50))
      return (await find(i, key.secret))?.label === `${label} heard`
    })
  }

  beforeAll(async () => {
    db = await createPgDatabase()
    cli = instance(db.url)
    await cli.runPromise(Effect.void)
    // a minute: within these tests only a notification can empty A's and B's caches
    a = instance(db.url, { ttlMs: 60_000, directUrl: db.url })
    b = instance(db.url, { ttlMs: 60_000, directUrl: db.url })
    polling = instance(db.url, { ttlMs: 1_000 })
    await listening(a, "a ready")
    await listening(b, "b ready")
  })
  afterAll(async () => {
    await a?.dispose()
    await b?.dispose()
    await polling?.dispose()
    await cli?.dispose()
    await db?.drop()
  })

  it("without a direct URL a cached key is served without a lookup, and any change reaches it within the TTL", async () => {
    const key = await create(cli, "original")
    expect((await find(polling, key.secret))?.label).toBe("original")
    await relabel(key.id, "changed behind attestd's back")
    // without a cache the store answers
    expect((await find(cli, key.secret))?.label).toBe("changed behind attestd's back")
    await cli.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))
    await until("the polling instance sees the revocation", async () => (await find(polling, key.secret))?.revokedAt != null, 1_000 + 2_000)
  })

  it("with a direct URL a revocation on another instance, or by the CLI, reaches every instance at once", async () => {
    const key = await create(b, "original")
    expect((await find(a, key.secret))?.label).toBe("original")
    // Positive control: the cache answers — a change without NOTIFY is not seen.
    await relabel(key.id, "changed behind attestd's back")
    expect((await find(a, key.secret))?.label).toBe("original")

    expect(await b.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))).toBe(true)
    await until("instance A sees the revocation", async () => (await find(a, key.secret))?.revokedAt != null, 5_000)

    const other = await create(cli, "cli")
    expect((await find(a, other.secret))?.revokedAt).toBeNull()
    expect((await find(b, other.secret))?.revokedAt).toBeNull()
    await cli.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(other.id)))
    await until("A sees it", async () => (await find(a, other.secret))?.revokedAt != null, 5_000)
    await until("B sees it", async () => (await find(b, other.secret))?.revokedAt != null, 5_000)
  })

  it("a LISTEN session whose backend is terminated comes back by itself", async () => {
    const admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    try {
      const killed = await admin.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'attestd-keys' AND datname = current_database() AND query ILIKE 'LISTEN%'"
      )
      expect(killed.rowCount).toBeGreaterThanOrEqual(2) // A's and B's listeners
    } finally {
      await admin.end()
    }
    await listening(a, "a back")
    await listening(b, "b back")
    const key = await create(a, "after")
    expect((await find(a, key.secret))?.revokedAt).toBeNull()
    await b.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))
    await until("A sees the revocation after reconnecting", async () => (await find(a, key.secret))?.revokedAt != null, 5_000)
  })
})

describe("API-key cache on SQLite", () => {
  let dir: string
  let url: string
  let server: Instance
  let cli: Instance

  const find = (i: Instance, secret: string) => i.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.findByHash(hashSecret(secret))))
  const create = (label: string) =>
    cli.runPromise(Effect.flatMap(ApiKeyRepo, (r) =>
      r.create({ label, scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })))
  /** Changes a key behind attestd's back (the marker is not replaced): what a cached lookup cannot see. */
  const relabel = (id: string, label: string) =>
    cli.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE api_keys SET label = ${label} WHERE id = ${id}`))

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "attestd-keycache-"))
    url = `sqlite:${join(dir, "attestd.db")}`
    cli = instance(url)
    await cli.runPromise(Effect.void)
    server = instance(url, { ttlMs: 60_000 })
  })
  afterAll(async () => {
    await server?.dispose()
    await cli?.dispose()
    rmSync(dir, { recursive: true, force: true })
  })

  it("serves a cached key without a lookup, and a revocation by the CLI is seen by the next lookup in a later turn", async () => {
    const key = await create("original")
    expect((await find(server, key.secret))?.label).toBe("original")
    // Positive control: the cache answers — a change that replaces no marker is not seen.
    await relabel(key.id, "changed behind attestd's back")
    expect((await find(server, key.secret))?.label).toBe("original")
    expect((await find(cli, key.secret))?.label).toBe("changed behind attestd's back")

    expect(await cli.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))).toBe(true)
    // at once: no waiting, no retry; a request sent after the revocation is read in a later turn
    await nextTurn()
    expect((await find(server, key.secret))?.revokedAt).not.toBeNull()
  })

  it("a change by hand is seen once an entry is older than the TTL", async () => {
    const short = instance(url, { ttlMs: 1_000 })
    try {
      const key = await create("ttl")
      expect((await find(short, key.secret))?.label).toBe("ttl")
      await relabel(key.id, "relabelled")
      expect((await find(short, key.secret))?.label).toBe("ttl")
      await new Promise((r) => setTimeout(r, 1_100))
      expect((await find(short, key.secret))?.label).toBe("relabelled")
    } finally {
      await short.dispose()
    }
  })

  it("sees every replacement of the marker from the next turn, however quickly they follow each other, and stores no lookup that raced one", async () => {
    const marker = keysMarkerOf(join(dir, "unit.db"))
    const cache = makeSqliteKeyCache(marker)
    const key = { id: "k", revokedAt: null } as unknown as ApiKey
    for (let i = 0; i < 20; i++) {
      await nextTurn()
      cache.set("h", key, cache.generation())
      expect(cache.get("h"), `round ${i}: stored`).toBe(key)
      announceKeysChanged(marker)
      // the lookups of one turn share its check (the control: this turn's check came before the change)
      expect(cache.get("h"), `round ${i}: same turn`).toBe(key)
      await nextTurn()
      expect(cache.get("h"), `round ${i}: emptied`).toBeUndefined()
    }
    // a lookup that began before a change and ends after it, in a later turn
    await nextTurn()
    expect(cache.get("h")).toBeUndefined()
    const generation = cache.generation()
    announceKeysChanged(marker)
    await nextTurn()
    cache.set("h", key, generation)
    expect(cache.get("h")).toBeUndefined()
    // the same lookup ending in a turn whose check saw no change is stored (the control)
    cache.set("h", key, cache.generation())
    expect(cache.get("h")).toBe(key)
  })
})
