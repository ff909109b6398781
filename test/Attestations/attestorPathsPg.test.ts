/**
 * The attests' group on Postgres runs with callbacks on one client of the pool
 * (PgDirect), and in a fiber through @effect/sql when that fails. New digests
 * are written with their claims in one statement (its own transaction), other
 * writes in a transaction; a group of digests the instance has not attested
 * lately goes to that statement before any read (RecentDigests). Both are the
 * same program (Attestor, Steps.ts): these tests tell the paths apart by what
 * they leave behind. So do the verifies' group reads (AttestationRepo). PgDirect notes the statements it runs, BEGIN and COMMIT
 * included (PgStatementObserver), and opens no span; the fiber's statements
 * open a span each.
 */
import { Cause, Duration, Effect, Exit, Layer, ManagedRuntime } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import type { AttestationStatus } from "../../src/Attestations/Domain.js"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { type ApiKey, hashSecret } from "../../src/Auth/Domain.js"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { PgStatementObserver } from "../../src/Platform/PgDirect.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"
import { expectAgainFromReads, expectAnsweredAsStored, firstWords } from "../helpers/attestorPaths.js"
import { queryTextTracer } from "../helpers/statementNotes.js"
import { randomHash } from "../helpers/server.js"

const available = await postgresAvailable()

let db: TestDatabase
/** Statements PgDirect ran, and the SQL of the spans @effect/sql opened. */
const ran: Array<string> = []
const spans: Array<string> = []
/** Set to make PgDirect's observer throw on the statement whose text starts so: a statement that fails on that path only. */
let failOn: string | undefined

const makeRuntime = () => {
  const tracer = queryTextTracer((text) => void spans.push(text))
  const observer = (text: string) => {
    ran.push(text)
    if (failOn !== undefined && text.trim().startsWith(failOn)) throw new Error(`refused for the test: ${failOn}`)
  }
  return ManagedRuntime.make(
    AppLive(AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24) }), { workers: false })
      .pipe(Layer.provide(Layer.merge(Layer.setTracer(tracer), Layer.succeed(PgStatementObserver, observer))))
  )
}
let rt: ReturnType<typeof makeRuntime>
let key: ApiKey

const attest = (hashes: ReadonlyArray<string>, as: ApiKey = key) =>
  Effect.flatMap(Attestor, (a) => a.attest({ key: as, hashes, source: "paths", extraData: { n: 1 }, clientEncrypted: false }))
const makeKey = () =>
  rt.runPromise(Effect.gen(function*() {
    const repo = yield* ApiKeyRepo
    const created = yield* repo.create({ label: "paths", scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
    return (yield* repo.findByHash(hashSecret(created.secret)))!
  }))

/** Sessions of this database other than `watcher`'s own, and whether any sits in an open transaction. */
const sessions = async (watcher: pg.Client) =>
  (await watcher.query(
    "SELECT state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
  )).rows.map((r) => String(r.state))

describe.skipIf(!available)("on Postgres", () => {
  beforeAll(async () => {
    db = await createPgDatabase()
    rt = makeRuntime()
    key = await makeKey()
    await rt.runPromise(attest([randomHash()])) // the signer registered its key
  })
  afterAll(async () => {
    await rt?.dispose()
    await db?.drop()
  })

  describe("the attests' group", () => {
    it("new digests: the attestations and their claims in one statement, before any read, with callbacks and no span", async () => {
      const other = await makeKey()
      const hashes = [randomHash(), randomHash(), randomHash()]
      ran.length = 0
      spans.length = 0
      // two keys in one group, both on the first digest
      const [results, theirs] = await rt.runPromise(Effect.all([attest(hashes), attest([hashes[0]!], other)], { concurrency: "unbounded" }))
      expect(firstWords(ran)).toEqual(["WITH a AS"])
      expect(spans).toEqual([])
      expect(results.map((r) => r.created)).toEqual([true, true, true])
      expect(theirs.map((r) => [r.created, r.attestation, r.claim.apiKeyId])).toEqual([[false, results[0]!.attestation, other.id]])
      expect(theirs[0]!.claim.id).not.toBe(results[0]!.claim.id)

      await expectAnsweredAsStored(rt, key.id, hashes, results)
      await expectAnsweredAsStored(rt, other.id, [hashes[0]!], theirs)
      await expectAgainFromReads({ again: () => rt.runPromise(attest(hashes)), results, ran, spans })
    })

    it("its statements' texts do not depend on the group's size (PgDirect prepares each once per connection)", async () => {
      const textsOf = async (n: number) => {
        ran.length = 0
        await rt.runPromise(attest(Array.from({ length: n }, () => randomHash())))
        return [...ran]
      }
      const one = await textsOf(1)
      expect(firstWords(one)).toEqual(["WITH a AS"])
      expect(await textsOf(3)).toEqual(one)
      expect(await textsOf(40)).toEqual(one)
    })

    it("claims on digests that exist: a transaction, with callbacks and no span", async () => {
      const hashes = [randomHash(), randomHash()]
      const first = await rt.runPromise(attest(hashes))
      const other = await makeKey()
      ran.length = 0
      spans.length = 0
      const results = await rt.runPromise(attest(hashes, other))
      expect(firstWords(ran)).toEqual(["SELECT * FROM", "SELECT * FROM", "BEGIN", "INSERT INTO claims", "COMMIT"])
      expect(spans).toEqual([])
      expect(results.map((r) => [r.created, r.attestation])).toEqual(first.map((r) => [false, r.attestation]))
      await expectAnsweredAsStored(rt, other.id, hashes, results)
    })

    describe("digests another instance attested (this one has not seen them): the statement skips them, then they are read", () => {
      /** `hashes` attested through a second instance on the same database, by `as`. */
      const attestElsewhere = async (hashes: ReadonlyArray<string>, as: ApiKey) => {
        const elsewhere = makeRuntime()
        try {
          return await elsewhere.runPromise(attest(hashes, as))
        } finally {
          await elsewhere.dispose()
        }
      }

      it("by another key: this key's claims in a transaction", async () => {
        const hashes = [randomHash(), randomHash()]
        const theirs = await attestElsewhere(hashes, await makeKey())
        ran.length = 0
        spans.length = 0
        const results = await rt.runPromise(attest(hashes))
        expect(firstWords(ran)).toEqual(["WITH a AS", "SELECT * FROM", "SELECT * FROM", "BEGIN", "INSERT INTO claims", "COMMIT"])
        expect(spans).toEqual([])
        expect(results.map((r) => [r.created, r.attestation])).toEqual(theirs.map((r) => [false, r.attestation]))
        await expectAnsweredAsStored(rt, key.id, hashes, results)
        // now remembered: read first
        await expectAgainFromReads({ again: () => rt.runPromise(attest(hashes)), results, ran, spans })
      })

      it("by this key: its claims as they are, nothing written", async () => {
        const hashes = [randomHash(), randomHash()]
        const theirs = await attestElsewhere(hashes, key)
        ran.length = 0
        spans.length = 0
        const results = await rt.runPromise(attest(hashes))
        expect(firstWords(ran)).toEqual(["WITH a AS", "SELECT * FROM", "SELECT * FROM"])
        expect(spans).toEqual([])
        expect(results.map((r) => [r.created, r.attestation, r.claim])).toEqual(theirs.map((r) => [false, r.attestation, r.claim]))
      })

      it("beside new digests: the new ones written with their claims in the statement, the others' claims in a transaction", async () => {
        const old = randomHash()
        const [theirs] = await attestElsewhere([old], await makeKey())
        const fresh = [randomHash(), randomHash()]
        const hashes = [old, ...fresh]
        ran.length = 0
        spans.length = 0
        const results = await rt.runPromise(attest(hashes))
        expect(firstWords(ran)).toEqual(["WITH a AS", "SELECT * FROM", "SELECT * FROM", "BEGIN", "INSERT INTO claims", "COMMIT"])
        expect(results.map((r) => r.created)).toEqual([false, true, true])
        expect(results[0]!.attestation).toEqual(theirs!.attestation)
        await expectAnsweredAsStored(rt, key.id, hashes, results)
        // one attestation per digest, one live claim of this key on each
        const repo = await rt.runPromise(AttestationRepo)
        expect((await rt.runPromise(repo.findByHashes(hashes))).length).toBe(3)
        expect((await rt.runPromise(repo.liveClaims(key.id, results.map((r) => r.attestation.seq)))).length).toBe(3)
      })
    })

    // with callbacks up to the failing statement (noted, not sent), then the fiber's statements, in spans
    const failures = [
      { failing: "WITH a AS", existing: false, upTo: ["WITH a AS"], fiber: ["WITH a AS"] },
      ...["INSERT INTO claims", "COMMIT"].map((failing) => ({
        failing,
        existing: true,
        upTo: ["SELECT * FROM", "SELECT * FROM", "BEGIN", "INSERT INTO claims", "COMMIT"].slice(0, failing === "COMMIT" ? 5 : 4),
        fiber: ["SELECT * FROM", "SELECT * FROM", "INSERT INTO claims"]
      }))
    ]
    for (const { existing, failing, fiber, upTo } of failures) {
      it(`a group whose ${failing === "WITH a AS" ? "one statement" : failing} fails with callbacks leaves nothing behind, and runs again in a fiber`, async () => {
        const hashes = [randomHash(), randomHash()]
        if (existing) await rt.runPromise(attest(hashes))
        const other = await makeKey()
        const watcher = new pg.Client({ connectionString: db.url })
        await watcher.connect()
        try {
          ran.length = 0
          spans.length = 0
          failOn = failing
          const results = await rt.runPromise(attest(hashes, other))
          failOn = undefined
          expect(firstWords(ran)).toEqual(upTo)
          expect(firstWords(spans)).toEqual(fiber)
          expect(results.map((r) => r.created)).toEqual([!existing, !existing])
          // one attestation per digest, and one claim of `other` on each: the first try left nothing
          const counts = await watcher.query(
            `SELECT (SELECT count(*)::int FROM attestations WHERE hash_hex = ANY($1)) AS a,
              (SELECT count(*)::int FROM claims c JOIN attestations a ON a.seq = c.attestation_seq WHERE a.hash_hex = ANY($1) AND c.api_key_id = $2) AS c`,
            [hashes, other.id]
          )
          expect(counts.rows[0]).toEqual({ a: 2, c: 2 })
          await expectAnsweredAsStored(rt, other.id, hashes, results)
          // the client that failed is not back in the pool with its transaction open
          const deadline = Date.now() + 5_000
          while ((await sessions(watcher)).some((s) => s.startsWith("idle in transaction"))) {
            if (Date.now() > deadline) throw new Error("a session stayed idle in transaction")
            await new Promise((r) => setTimeout(r, 20))
          }
          // and the next group runs with callbacks again
          ran.length = 0
          spans.length = 0
          await rt.runPromise(attest([randomHash()]))
          expect(firstWords(ran)).toEqual(["WITH a AS"])
          expect(spans).toEqual([])
        } finally {
          failOn = undefined
          await watcher.end()
        }
      })
    }
  })

  describe("the verifies' group reads", () => {
    /** Looks up `hashes` and `key`'s claims on them in one turn each, as the fast lane's verifies do, and gives their answers. */
    const lookUp = async (hashes: ReadonlyArray<string>) => {
      const repo = await rt.runPromise(AttestationRepo)
      const statuses = await Promise.all(hashes.map((h) =>
        new Promise<AttestationStatus | undefined>((resolve, reject) =>
          repo.findByHashThen(h, (exit) => Exit.isSuccess(exit) ? resolve(exit.value) : reject(Cause.squash(exit.cause))))
      ))
      const sources = await Promise.all(statuses.map((s) =>
        s === undefined ? undefined : new Promise<string | null | undefined>((resolve, reject) =>
          repo.liveClaimThen(key.id, s.seq, (exit) => Exit.isSuccess(exit) ? resolve(exit.value?.source) : reject(Cause.squash(exit.cause))))
      ))
      return statuses.map((s, i) => [s?.id, sources[i]])
    }

    it("run with callbacks: one statement per turn for the lookups, one for the claims, no span; the fiber's when that fails", async () => {
      const known = [randomHash(), randomHash()]
      const attested = await rt.runPromise(attest(known))
      const hashes = [...known, randomHash()]
      const expected = [...attested.map((r) => [r.attestation.id, "paths"]), [undefined, undefined]]

      ran.length = 0
      spans.length = 0
      expect(await lookUp(hashes)).toEqual(expected)
      expect(firstWords(ran)).toEqual(["SELECT seq, id,", "SELECT api_key_id, attestation_seq,"])
      expect(ran[0]).toMatch(/= ANY\(\$1::text\[\]\)/)
      expect(spans).toEqual([])

      ran.length = 0
      spans.length = 0
      failOn = "SELECT"
      try {
        expect(await lookUp(hashes)).toEqual(expected)
      } finally {
        failOn = undefined
      }
      expect(firstWords(ran)).toEqual(["SELECT seq, id,", "SELECT api_key_id, attestation_seq,"])
      expect(firstWords(spans)).toEqual(["SELECT seq, id,", "SELECT api_key_id, attestation_seq,"])
    })
  })
})
