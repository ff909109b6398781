/**
 * The plan of the seal's T1 update on SQLite: the window's JSON array of (seq, leaf index) pairs
 * drives the join and each leaf is one rowid lookup. Driven by the pending index instead, SQLite
 * scanned the whole array once per pending row (quadratic: 100,000 leaves never finished; the
 * scale bench found it). The statement is the one the sealer ran, noted from its span.
 */
import { Duration, Effect, Layer, ManagedRuntime } from "effect"
import { createRequire } from "node:module"
import { afterAll, describe, expect, it } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { Sealer } from "../../src/Sealing/Sealer.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { randomHex32 } from "../helpers/process.js"
import { queryTextTracer } from "../helpers/statementNotes.js"

interface SqliteDatabase {
  prepare(source: string): { all(...params: Array<unknown>): Array<{ detail: string }> }
  close(): void
}
const Database = createRequire(import.meta.url)("better-sqlite3") as new (filename: string, options?: { readonly readonly?: boolean }) => SqliteDatabase

describe("the seal's T1 update (SQLite)", () => {
  let db: TestDatabase | undefined
  afterAll(async () => {
    await db?.drop()
  })

  it("looks each leaf up by rowid from the window's array, never scans the pending rows", async () => {
    db = await createSqliteDatabase()
    const texts: Array<string> = []
    const runtime = ManagedRuntime.make(
      AppLive(AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24) }), { workers: false }).pipe(
        Layer.provide(Layer.setTracer(queryTextTracer((text) => void texts.push(text))))
      )
    )
    try {
      await runtime.runPromise(Effect.gen(function*() {
        const keys = yield* ApiKeyRepo
        const created = yield* keys.create({ label: "plan", scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
        const key = (yield* keys.findByHash(hashSecret(created.secret)))!
        yield* (yield* Attestor).attest({ key, hashes: [randomHex32(), randomHex32(), randomHex32()], source: null, extraData: null, clientEncrypted: false })
        const outcome = yield* (yield* Sealer).sealWindow(Date.now() + 1000)
        expect(outcome).toMatchObject({ _tag: "Sealed", leaves: 3 })
      }))
    } finally {
      await runtime.dispose()
    }
    const update = texts.find((t) => /^\s*UPDATE attestations SET level = 'T1'/.test(t))
    expect(update).toBeDefined()
    const file = new Database(db.url.slice("sqlite:".length), { readonly: true })
    try {
      const params = Array.from(update!.match(/\?/g) ?? [], () => "[[1, 0]]")
      const plan = file.prepare(`EXPLAIN QUERY PLAN ${update}`).all(...params).map((r) => r.detail)
      expect(plan.some((d) => d.startsWith("SEARCH attestations USING INTEGER PRIMARY KEY"))).toBe(true)
      expect(plan.filter((d) => d.startsWith("SCAN attestations"))).toEqual([])
    } finally {
      file.close()
    }
  }, 60_000)
})
