/**
 * Rotating the time-stamping key (CONTRACT §8, `attestd signing-keys rotate --tsa`) on two
 * instances over one SQLite database and one data dir (shared key custody), without a
 * restart: each instance signs its next tokens with the new key after a poll and publishes
 * the new key's demo chain (a new CA per rotation); a token issued before the rotation still
 * verifies against the chain published then, and not against the new one.
 */
import { Duration, Effect, ManagedRuntime } from "effect"
import { createHash } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { KeyCustodyLive, rotateKey } from "../../src/Platform/Signer.js"
import { validateTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { TimestampAuthority } from "../../src/Timestamping/Authority.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { waitFor } from "../helpers/process.js"
import { readReply, timestampRequest } from "../helpers/timestampRequests.js"

const sha256 = (text: string) => new Uint8Array(createHash("sha256").update(text).digest())

const makeRuntime = (db: TestDatabase) =>
  ManagedRuntime.make(AppLive(
    AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24), signingKeyPoll: Duration.millis(200) }),
    { workers: false }
  ))

type Runtime = ReturnType<typeof makeRuntime>

const chainOf = (rt: Runtime) => rt.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.certificateChain))

const tokenFrom = async (rt: Runtime, digest: Uint8Array) => {
  const reply = readReply(await rt.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.respond(timestampRequest({ digest, certReq: true }), null))))
  expect(reply.status).toBe(0)
  return reply.token!
}

/** The chain's self-signed certificate (the demo CA), as PEM: the trust anchor a verifier takes. */
const rootOf = (chainPem: string) => `-----BEGIN CERTIFICATE-----${chainPem.split("-----BEGIN CERTIFICATE-----")[2]!}`

const verifies = (token: Uint8Array, digest: Uint8Array, chainPem: string) =>
  validateTimeStampToken(token, { digest, trustAnchorsPem: rootOf(chainPem), requireChain: true }).then(
    (v) => v.signer.subject,
    (e: Error) => e.message
  )

describe("rotating the time-stamping key on two instances (SQLite, shared data dir)", () => {
  let db: TestDatabase | undefined
  const runtimes: Array<Runtime> = []
  afterAll(async () => {
    for (const rt of runtimes) await rt.dispose()
    await db?.drop()
  })

  it("both instances sign with the new key after a poll; old tokens still verify against the old chain", async () => {
    db = await createSqliteDatabase()
    const a = makeRuntime(db)
    runtimes.push(a)
    const before = await chainOf(a)
    const b = makeRuntime(db)
    runtimes.push(b)
    expect(await chainOf(b)).toBe(before)

    const oldDigest = sha256("before the rotation")
    const oldToken = await tokenFrom(b, oldDigest)
    expect(await verifies(oldToken, oldDigest, before)).toMatch(/^CN=attestd time-stamping authority/)

    const rotated = await a.runPromise(Effect.provide(rotateKey("tsa"), KeyCustodyLive))
    expect(rotated.kid).toEqual(expect.any(String))

    for (const [name, rt] of [["A", a], ["B", b]] as const) {
      const digest = sha256(`after the rotation on ${name}`)
      // a token is what moves the instance to the new key's chain, or a poll and the certchain route
      const after = await waitFor(`${name} to publish a new chain`, async () => {
        const token = await tokenFrom(rt, digest)
        const chain = await chainOf(rt)
        return chain !== before ? { token, chain } : undefined
      }, 10_000)
      const token = await tokenFrom(rt, digest)
      expect(await verifies(token, digest, after.chain)).toMatch(/^CN=attestd time-stamping authority/)
      expect(await verifies(token, digest, before)).toMatch(/chain|certificate|path/i)
    }
    // the token issued before the rotation verifies against the chain of its time only
    expect(await verifies(oldToken, oldDigest, before)).toMatch(/^CN=attestd time-stamping authority/)
    expect(await verifies(oldToken, oldDigest, await chainOf(a))).toMatch(/chain|certificate|path/i)
  }, 60_000)
})
