/**
 * Leases with fencing tokens (src/Platform/Leases.ts), on both stores, two
 * holders (two data directories) on one database: one holds a lease at a time;
 * a holder that stalled past its lease while the other took it over writes
 * nothing (its fenced write is refused and rolled back); an expired lease is
 * taken over; a holder restarted in place takes its own lease back at once, while a live
 * process sharing its data directory waits like any other holder.
 */
import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Layer, ManagedRuntime, Option } from "effect"
import { spawn, spawnSync } from "node:child_process"
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

    it("a live process sharing the data directory waits for the lease; a run that no longer runs, or predates pids, is taken over at once", async () => {
      const { a } = await setup()
      const { holder } = await a.runPromise(Leases)
      const place = holder.slice(0, holder.lastIndexOf(":"))
      expect(holder).toBe(`${place}:${process.pid}`)
      const sibling = spawn("sleep", ["30"], { stdio: "ignore" })
      const gone = spawnSync("true").pid!
      try {
        const heldBy = (name: string) =>
          a.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql`INSERT INTO leases (name, holder, token, expires_at) VALUES ('job', ${name}, 7, ${Date.now() + 600_000})
              ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token, expires_at = excluded.expires_at`))
        const tryWrite = (label: string) => a.runPromise(Effect.flatMap(Leases, (l) => l.exclusively("job", LONG, (fence) => fence(write(label)))))
        const token = () =>
          a.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ token: number | string }>`SELECT token FROM leases WHERE name = 'job'`))
            .then((rows) => Number(rows[0]!.token))
        // another process of the same place, running: its lease holds until it expires
        await heldBy(`${place}:${sibling.pid}`)
        expect(await tryWrite("sibling-running")).toEqual(Option.none())
        // the same place's previous run, whose pid is gone: taken at once, the token moved on
        await heldBy(`${place}:${gone}`)
        expect(Option.isSome(await tryWrite("restarted"))).toBe(true)
        expect(await token()).toBe(8)
        // a holder written before holders carried a pid
        await heldBy(place)
        expect(Option.isSome(await tryWrite("upgraded"))).toBe(true)
        // another place's live lease is never taken early
        await heldBy(`other-host:${place.split(":")[1]}:${gone}`)
        expect(await tryWrite("other-place")).toEqual(Option.none())
        expect(await writes(a)).toEqual(["restarted", "upgraded"])
      } finally {
        sibling.kill("SIGKILL")
      }
    })
  })
}
