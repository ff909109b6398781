/**
 * The attests' group on SQLite runs now, on the connection's synchronous API,
 * when no fiber's transaction holds the connection, and in a fiber through
 * @effect/sql when one does. Both are the same program (Attestor, Steps.ts):
 * these tests tell the paths apart by what they leave behind. A group run now
 * opens no span; one run in a fiber opens a span per statement. The connection
 * notes every statement either way (SqliteStatementObserver).
 */
import { SqlClient } from "@effect/sql"
import { Deferred, Duration, Effect, Fiber, Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { type ApiKey, hashSecret } from "../../src/Auth/Domain.js"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { SqliteNow, SqliteStatementObserver } from "../../src/Platform/SqliteClient.js"
import { UNDECIDED } from "../../src/Domain/Undecided.js"
import { newAttestationId } from "../../src/Domain/AttestationId.js"
import type { Attestation, Claim } from "../../src/Attestations/Domain.js"
import { createDatabase, type TestDatabase } from "../helpers/databases.js"
import { expectAgainFromReads, expectAnsweredAsStored, firstWords } from "../helpers/attestorPaths.js"
import { queryTextTracer } from "../helpers/statementNotes.js"
import { randomHash } from "../helpers/server.js"

let db: TestDatabase
/** Statements as the connection ran them, and the SQL of the spans @effect/sql opened. */
const ran: Array<string> = []
const spans: Array<string> = []

const makeRuntime = () => {
  const tracer = queryTextTracer((text) => void spans.push(text))
  return ManagedRuntime.make(
    AppLive(AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24) }), { workers: false })
      .pipe(Layer.provide(Layer.merge(Layer.setTracer(tracer), Layer.succeed(SqliteStatementObserver, (s: string) => void ran.push(s)))))
  )
}
let rt: ReturnType<typeof makeRuntime>
let key: ApiKey

const attest = (hashes: ReadonlyArray<string>) =>
  Effect.flatMap(Attestor, (a) => a.attest({ key, hashes, source: "paths", extraData: { n: 1 }, clientEncrypted: false }))

const makeKey = () =>
  rt.runPromise(Effect.gen(function*() {
    const repo = yield* ApiKeyRepo
    const created = yield* repo.create({ label: "paths", scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
    return (yield* repo.findByHash(hashSecret(created.secret)))!
  }))

beforeAll(async () => {
  db = await createDatabase("sqlite")
  rt = makeRuntime()
  key = await makeKey()
  await rt.runPromise(attest([randomHash()])) // the signer registered its key, the statements are prepared
})
afterAll(async () => {
  await rt?.dispose()
  await db?.drop()
})

describe("the attests' group on SQLite", () => {
  it("runs now when the connection is free: its statements in one transaction, no span, answered as stored", async () => {
    const hashes = [randomHash(), randomHash(), randomHash()]
    ran.length = 0
    spans.length = 0
    const results = await rt.runPromise(attest(hashes))
    // run now: a single-row insert per row (a fiber sends one multi-row insert per table, below)
    expect(firstWords(ran)).toEqual([
      "SELECT * FROM", "BEGIN", ...hashes.map(() => "INSERT INTO attestations"), ...hashes.map(() => "INSERT INTO claims"), "COMMIT"
    ])
    expect(spans).toEqual([])
    expect(results.map((r) => r.created)).toEqual([true, true, true])

    await expectAnsweredAsStored(rt, key.id, hashes, results)

    await expectAgainFromReads({ again: () => rt.runPromise(attest(hashes)), results, ran, spans })
  })

  it("run now, an insert skips a digest another writer holds and returns only what it inserted, as the fiber's does", async () => {
    const [taken, fresh] = [randomHash(), randomHash()]
    await rt.runPromise(attest([taken]))
    const [repo, now] = await rt.runPromise(Effect.all([AttestationRepo, SqliteNow]))
    const row = (hash: string) => ({
      id: newAttestationId(), hash_hex: hash, registered_at: "2026-01-01T00:00:00.000000Z", signature: "x", signing_key_id: "k", format_version: "2.0.0"
    })
    const rows = [row(taken), row(fresh)]
    const inserted = now!.runNow((run) => run.transaction(() => repo.groupStatementsNow(run).insertIfAbsent(rows)))
    expect(inserted).not.toBe(UNDECIDED)
    expect((inserted as ReadonlyArray<Attestation>).map((a) => [a.id, a.hashHex])).toEqual([[rows[1]!.id, fresh]])
    const stored = await rt.runPromise(repo.findByHashes([taken, fresh]))
    expect(stored.find((a) => a.hashHex === taken)!.id).not.toBe(rows[0]!.id)
    expect(stored.find((a) => a.hashHex === fresh)).toEqual((inserted as ReadonlyArray<Attestation>)[0])
  })

  it("run now, a claims insert skips a claim the key holds and returns only what it inserted, with the ids SQLite gave", async () => {
    const [held, fresh] = await rt.runPromise(attest([randomHash(), randomHash()]))
    const other = await makeKey()
    const [repo, now] = await rt.runPromise(Effect.all([AttestationRepo, SqliteNow]))
    const claim = (seq: number, apiKeyId: string) => ({
      attestation_seq: seq, api_key_id: apiKeyId, org_id: null, source: "now", extra_data: JSON.stringify({ n: 2 }), client_encrypted: true,
      etag: "e".repeat(24), created_at: "2026-01-01T00:00:00.000Z", updated_at: "2026-01-01T00:00:00.000Z"
    })
    // the key holds a live claim on `held` already; `other` holds none on either
    const rows = [claim(held!.attestation.seq, key.id), claim(held!.attestation.seq, other.id), claim(fresh!.attestation.seq, other.id)]
    const inserted = now!.runNow((run) => run.transaction(() => repo.groupStatementsNow(run).insertClaimsIfAbsent(rows)))
    expect(inserted).not.toBe(UNDECIDED)
    const made = inserted as ReadonlyArray<Claim>
    expect(made.map((c) => [c.attestationSeq, c.apiKeyId])).toEqual([[held!.attestation.seq, other.id], [fresh!.attestation.seq, other.id]])
    expect(new Set(made.map((c) => c.id)).size).toBe(2)
    // as stored, field for field; the key's own claim untouched
    const stored = await rt.runPromise(repo.liveClaims(other.id, [held!.attestation.seq, fresh!.attestation.seq]))
    expect(new Map(stored.map((c) => [c.id, c]))).toEqual(new Map(made.map((c) => [c.id, c])))
    expect(await rt.runPromise(repo.liveClaims(key.id, [held!.attestation.seq]))).toEqual([held!.claim])
  })

  it("waits in a fiber while a fiber's transaction holds the connection, and runs after its COMMIT", async () => {
    const hashes = [randomHash(), randomHash()]
    const held = randomHash()
    await rt.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const inside = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      ran.length = 0
      spans.length = 0
      // a transaction that has written and waits, open across turns of the event loop
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version)
          VALUES ('att_AAAAAAAAAAAAAAAAAAAAAAAA', ${held}, '2026-01-01T00:00:00.000000Z', 'x', 'k', '1')`
        yield* Deferred.succeed(inside, undefined)
        yield* Deferred.await(release)
      })))
      yield* Deferred.await(inside)
      const attesting = yield* Effect.fork(attest(hashes))
      // the group was flushed in a turn of its own (setImmediate) while the transaction held the connection
      yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
      yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
      expect(firstWords(ran)).toEqual(["BEGIN", "INSERT INTO attestations"]) // the holder's only
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      const results = yield* Fiber.join(attesting)
      expect(results.map((r) => r.created)).toEqual([true, true])
      // the holder's transaction, then the group's, each whole; the group's statements in spans (a fiber ran them)
      expect(firstWords(ran)).toEqual([
        "BEGIN", "INSERT INTO attestations", "COMMIT",
        "SELECT * FROM", "BEGIN", "INSERT INTO attestations", "INSERT INTO claims", "COMMIT"
      ])
      expect(firstWords(spans).slice(-3)).toEqual(["SELECT * FROM", "INSERT INTO attestations", "INSERT INTO claims"])
      const repo = yield* AttestationRepo
      expect((yield* repo.findByHashes([held, ...hashes])).map((a) => a.hashHex).sort()).toEqual([held, ...hashes].sort())
    }))
  })
})
