/**
 * The plans of the seal on SQLite: the pending read scans the pending set alone, which carries
 * each row's time and digest (a scan of the registry took 27 s at 10M rows); taking the window's leaves off
 * the pending set is one rowid lookup per leaf from the window's JSON array, never a scan of
 * the set (scanning the array once per pending row was quadratic: 100,000 leaves never
 * finished; the scale bench found it). The statements are the ones the sealer ran, noted from
 * their spans.
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

describe("the seal's statements (SQLite)", () => {
  let db: TestDatabase | undefined
  afterAll(async () => {
    await db?.drop()
  })

  it("read the pending set alone, and take each leaf off it by rowid from the window's array", async () => {
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
    const file = new Database(db.url.slice("sqlite:".length), { readonly: true })
    const planOf = (text: string | undefined, param: string) => {
      expect(text).toBeDefined()
      return file.prepare(`EXPLAIN QUERY PLAN ${text}`).all(...Array.from(text!.match(/\?/g) ?? [], () => param)).map((r) => r.detail)
    }
    try {
      // the pending read is the pending set alone, in rowid order: no registry row is read
      const pendingPlan = planOf(texts.find((t) => /^\s*SELECT seq, hash_hex FROM pending_seals/.test(t)), "9999")
      expect(pendingPlan).toEqual(["SCAN pending_seals"])
      for (const text of texts.filter((t) => /pending_seals WHERE seq IN/.test(t))) {
        const plan = planOf(text, "[1, 2]")
        expect(plan).toContainEqual(expect.stringMatching(/^SEARCH pending_seals USING INTEGER PRIMARY KEY \(rowid=\?\)/))
        expect(plan.filter((d) => d.startsWith("SCAN pending_seals"))).toEqual([])
      }
      expect(texts.filter((t) => /^\s*DELETE FROM pending_seals/.test(t))).toHaveLength(1)
    } finally {
      file.close()
    }
  }, 60_000)
})
