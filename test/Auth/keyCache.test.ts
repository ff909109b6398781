/**
 * The API-key caches (src/Auth/KeyCache.ts).
 *
 * Postgres: two instances on one database, each with its own cache and LISTEN
 * connection. A key an instance has cached is served without a lookup, yet a
 * revocation through either instance (or the CLI's repository, which has no
 * cache) reaches both; and while an instance's LISTEN connection is down its
 * cache answers nothing.
 *
 * SQLite: a server's cache and the CLI's repository on their own connections to
 * one database file. A cached key is served without a lookup, yet a revocation
 * by the CLI is seen by the next lookup in a later turn of the event loop (the
 * marker file beside the database, checked once per turn), which is where a
 * request sent after the revocation is read (test/Cli/cli.test.ts: the revoked
 * key gets 401 from the running server).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { type ApiKey, hashSecret } from "../../src/Auth/Domain.js"
import { announceKeysChanged, type KeyCacheOptions, KeyCacheLive, KeyCacheRef, keysMarkerOf, makeSqliteKeyCache } from "../../src/Auth/KeyCache.js"
import { DatabaseLive } from "../../src/main.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"

const available = await postgresAvailable()

const instance = (url: string, withCache: boolean, options: KeyCacheOptions = {}) =>
  ManagedRuntime.make(
    ApiKeyRepo.Default.pipe(
      Layer.provideMerge(
        withCache ? KeyCacheLive(url, url.startsWith("postgres"), { heartbeatMs: 200, heartbeatTimeoutMs: 1_000, ...options }) : KeyCacheRef.none
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
  let cli: Instance

  const live = (i: Instance) => i.runPromise(Effect.map(KeyCacheRef, (c) => c.live()))
  const find = (i: Instance, secret: string) => i.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.findByHash(hashSecret(secret))))
  const create = (i: Instance, label: string) =>
    i.runPromise(Effect.flatMap(ApiKeyRepo, (r) =>
      r.create({ label, scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })))
  /** Changes a key behind attestd's back (no NOTIFY): what a cached lookup cannot see. */
  const relabel = (id: string, label: string) =>
    cli.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE api_keys SET label = ${label} WHERE id = ${id}`))

  beforeAll(async () => {
    db = await createPgDatabase()
    cli = instance(db.url, false)
    await cli.runPromise(Effect.void)
    a = instance(db.url, true)
    b = instance(db.url, true)
    await until("both caches are live", async () => (await live(a)) && (await live(b)))
  })
  afterAll(async () => {
    await a?.dispose()
    await b?.dispose()
    await cli?.dispose()
    await db?.drop()
  })

  it("serves a cached key without a lookup, and a revocation on another instance reaches it", async () => {
    const key = await create(b, "original")
    expect((await find(a, key.secret))?.label).toBe("original")
    // Positive control: the cache answers — a change without NOTIFY is not seen.
    await relabel(key.id, "changed behind attestd's back")
    expect((await find(a, key.secret))?.label).toBe("original")
    // Without a cache the store answers.
    expect((await find(cli, key.secret))?.label).toBe("changed behind attestd's back")

    const revoked = await b.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))
    expect(revoked).toBe(true)
    await until("instance A sees the revocation", async () => (await find(a, key.secret))?.revokedAt != null, 5_000)
  })

  it("a revocation by the CLI (no cache of its own) reaches every instance", async () => {
    const key = await create(cli, "cli")
    expect((await find(a, key.secret))?.revokedAt).toBeNull()
    expect((await find(b, key.secret))?.revokedAt).toBeNull()
    await cli.runPromise(Effect.flatMap(ApiKeyRepo, (r) => r.revoke(key.id)))
    await until("A sees it", async () => (await find(a, key.secret))?.revokedAt != null, 5_000)
    await until("B sees it", async () => (await find(b, key.secret))?.revokedAt != null, 5_000)
  })

  it("answers nothing from memory while its LISTEN connection is down, and comes back", async () => {
    const key = await create(a, "listener")
    expect((await find(a, key.secret))?.label).toBe("listener")
    await relabel(key.id, "relabelled")
    expect((await find(a, key.secret))?.label).toBe("listener") // cached

    const admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    try {
      const killed = await admin.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'attestd-keys' AND datname = current_database()"
      )
      expect(killed.rowCount).toBe(2) // A's and B's listeners
    } finally {
      await admin.end()
    }
    await until("A notices its listener is gone", async () => !(await live(a)), 5_000)
    // Down: the store answers, so even a change that sent no NOTIFY is seen.
    expect((await find(a, key.secret))?.label).toBe("relabelled")
    await until("A's listener is back", () => live(a), 10_000)
    await until("B's listener is back", () => live(b), 10_000)
    // Back up: a revocation is heard again.
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
    cli = instance(url, false)
    await cli.runPromise(Effect.void)
    server = instance(url, true)
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
    const short = instance(url, true, { ttlMs: 1_000 })
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
