/**
 * Leases with fencing tokens (src/Platform/Leases.ts), on both stores, two
 * holders (two data directories) on one database: one holds a lease at a time;
 * a holder that stalled past its lease while the other took it over writes
 * nothing (its fenced write is refused and rolled back); an expired lease is
 * taken over; a holder restarted in place takes its own lease back at once.
 */
import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Layer, ManagedRuntime, Option } from "effect"
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { AppConfig } from "../../src/Platform/Config.js"
import { Leases } from "../../src/Platform/Leases.js"
import { DatabaseLive } from "../../src/Platform/Sql.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"

const holder = (db: TestDatabase, name: string) => {
  const dataDir = join(db.dataDir, name)
  mkdirSync(dataDir, { recursive: true })
  const config = AppConfig.make({ databaseUrl: db.url, dataDir })
  return ManagedRuntime.make(Leases.Default.pipe(Layer.provideMerge(DatabaseLive(config)), Layer.provideMerge(Layer.succeed(AppConfig, config))))
}
type Holder = ReturnType<typeof holder>

const LONG = 30_000
const write = (label: string) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql`INSERT INTO fenced_writes (label) VALUES (${label})`)
const writes = (h: Holder) =>
  h.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ label: string }>`SELECT label FROM fenced_writes ORDER BY label`))
    .then((rows) => rows.map((r) => r.label))

for (const dialect of await dialects()) {
  describe(`leases (${dialect})`, () => {
    const open: Array<Holder> = []
    const dbs: Array<TestDatabase> = []
    afterAll(async () => {
      for (const h of open) await h.dispose()
      for (const db of dbs) await db.drop()
    })
    const setup = async () => {
      const db = await createDatabase(dialect)
      dbs.push(db)
      const a = holder(db, "a")
      const b = holder(db, "b")
      open.push(a, b)
      await a.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE fenced_writes (label TEXT PRIMARY KEY)`))
      await b.runPromise(Effect.void)
      return { db, a, b }
    }

    it("one holder at a time; a holder whose lease was taken over writes nothing; an expired lease is taken over", async () => {
      const { a, b } = await setup()
      const stalled = Effect.runSync(Deferred.make<void>())
      const taken = Effect.runSync(Deferred.make<void>())
      // A takes the lease, then stalls before its write
      const aRun = a.runPromise(Effect.flatMap(Leases, (l) =>
        l.exclusively("job", LONG, (fence) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(taken, undefined)
            yield* Deferred.await(stalled)
            return yield* fence(write("a"))
          }))))
      await Effect.runPromise(Deferred.await(taken))
      // B cannot take it while A holds it
      expect(await b.runPromise(Effect.flatMap(Leases, (l) => l.exclusively("job", LONG, (fence) => fence(write("b-early")))))).toEqual(Option.none())
      // A's lease lapses (it stalled past its expiry): B takes it over and writes
      await b.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE leases SET expires_at = 0 WHERE name = 'job'`))
      expect(Option.isSome(await b.runPromise(Effect.flatMap(Leases, (l) => l.exclusively("job", LONG, (fence) => fence(write("b"))))))).toBe(true)
      // A wakes up: its write is refused, and it reports nothing done
      await Effect.runPromise(Deferred.succeed(stalled, undefined))
      expect(await aRun).toEqual(Option.none())
      expect(await writes(a)).toEqual(["b"])
    })

    it("a holder restarted in place (same host and data directory) takes its own lease back at once, fencing its old run", async () => {
      const { db, a } = await setup()
      const again = holder(db, "a")
      open.push(again)
      const taken = Effect.runSync(Deferred.make<void>())
      const stalled = Effect.runSync(Deferred.make<void>())
      const old = a.runPromise(Effect.flatMap(Leases, (l) =>
        l.exclusively("job", LONG, (fence) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(taken, undefined)
            yield* Deferred.await(stalled)
            return yield* fence(write("old"))
          }))))
      await Effect.runPromise(Deferred.await(taken))
      expect(Option.isSome(await again.runPromise(Effect.flatMap(Leases, (l) => l.exclusively("job", LONG, (fence) => fence(write("new"))))))).toBe(true)
      await Effect.runPromise(Deferred.succeed(stalled, undefined))
      expect(await old).toEqual(Option.none())
      expect(await writes(a)).toEqual(["new"])
    })
  })
}
