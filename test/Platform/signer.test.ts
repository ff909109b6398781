/**
 * The Signer over key files and one database, two instances in this process: a rotation
 * reaches the instance that holds the new key on its next poll, the rotated-out key stops
 * at the end of its window, and an instance whose (copied) key was rotated out by another
 * one that does not share its data dir makes a key of its own instead of failing.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { copyFileSync, mkdirSync, readdirSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { t0Payload } from "../../src/Domain/T0.js"
import { formatMillis } from "../../src/Domain/Time.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { KeyCustodyLive, rotateKey, Signer } from "../../src/Platform/Signer.js"
import { SigningKeys } from "../../src/Platform/SigningKeys.js"
import { DatabaseLive } from "../../src/Platform/Sql.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { waitFor } from "../helpers/process.js"

const instance = (databaseUrl: string, dataDir: string) => {
  const config = AppConfig.make({ databaseUrl, dataDir })
  return ManagedRuntime.make(
    Layer.mergeAll(Signer.Default, SigningKeys.Default, KeyCustodyLive).pipe(
      Layer.provideMerge(DatabaseLive(config)),
      Layer.provideMerge(Layer.succeed(AppConfig, config))
    )
  )
}

describe("Signer rotation over key files", () => {
  let db: TestDatabase | undefined
  const runtimes: Array<ManagedRuntime.ManagedRuntime<any, any>> = []
  afterAll(async () => {
    for (const r of runtimes) await r.dispose()
    await db?.drop()
  })

  it("the rotating instance switches on its next poll; one with a copy of the rotated key makes its own", async () => {
    db = await createSqliteDatabase()
    const dirA = join(db.dataDir, "a")
    const dirB = join(db.dataDir, "b")
    const a = instance(db.url, dirA)
    runtimes.push(a)
    const first = await a.runPromise(Effect.flatMap(Signer, (s) => s.currentKid))
    // B starts with a copy of A's key file (what "every instance needs the same keys" meant)
    mkdirSync(join(dirB, "signing-keys"), { recursive: true, mode: 0o700 })
    const file = readdirSync(join(dirA, "signing-keys"))[0]!
    copyFileSync(join(dirA, "signing-keys", file), join(dirB, "signing-keys", file))
    const b = instance(db.url, dirB)
    runtimes.push(b)
    expect(await b.runPromise(Effect.flatMap(Signer, (s) => s.currentKid))).toBe(first)

    const rotated = await a.runPromise(rotateKey("t0"))
    const kidOf = (rt: typeof a) => rt.runPromise(Effect.flatMap(Signer, (s) => s.currentKid))
    await waitFor("A signs with the new key", async () => (await kidOf(a)) === rotated.kid || undefined, 10_000)
    const own = await waitFor("B makes a key of its own", async () => {
      const kid = await kidOf(b)
      return kid !== first && kid !== rotated.kid ? kid : undefined
    }, 10_000)

    const keys = await a.runPromise(Effect.flatMap(SigningKeys, (k) => k.listed))
    const old = keys.find((k) => k.kid === first)!
    expect(old.status).toBe("retired")
    expect(old.attestd_retired_at! > rotated.activated_at).toBe(true)
    expect(keys.filter((k) => k.status === undefined).map((k) => k.kid).sort()).toEqual([rotated.kid, own].sort())

    // the old key signs up to its retirement, never after
    const signAt = (at: string) => b.runPromise(Effect.flatMap(Signer, (s) => s.sign(t0Payload("00".repeat(32), at), at)))
    expect((await signAt(old.attestd_retired_at!)).kid).toBe(own)
    const late = formatMillis(Date.parse(old.attestd_retired_at!.slice(0, 23) + "Z") + 1)
    expect((await signAt(late)).kid).toBe(own)
    const before = formatMillis(Date.parse(rotated.activated_at.slice(0, 23) + "Z") - 1)
    expect((await a.runPromise(Effect.flatMap(Signer, (s) => s.sign("x", before)))).kid).toBe(first)
  }, 60_000)
})
