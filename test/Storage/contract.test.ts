/**
 * One storage contract, run against SQLite and Postgres at the service level
 * (no HTTP): the Attestor, AttestationRepo, ApiKeyRepo, Quota and RateLimiter
 * as AppLive wires them over a fresh database.
 */
import { it as effectIt } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Cause, Deferred, Duration, Effect, Either, Fiber, Layer, ManagedRuntime, TestClock } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { newAttestationIds } from "../../src/Domain/AttestationId.js"
import { API_KEY_PATTERN, type ApiKey, hashSecret, type Scope } from "../../src/Auth/Domain.js"
import { Quota } from "../../src/Auth/Quota.js"
import { RateLimiter, SQL_LIMITER_FLUSH_MS } from "../../src/Auth/RateLimiter.js"
import { jwkToKeyObject, verifyT0 } from "../../src/Platform/T0Node.js"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { Signer } from "../../src/Platform/Signer.js"
import { SigningKeys } from "../../src/Platform/SigningKeys.js"
import pg from "pg"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { queryTextTracer } from "../helpers/statementNotes.js"
import { randomHash, WIRE_TIME } from "../helpers/server.js"

const makeRuntime = (db: TestDatabase) =>
  ManagedRuntime.make(
    AppLive(
      AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24) }),
      { workers: false }
    )
  )

type Runtime = ReturnType<typeof makeRuntime>

/**
 * A second runtime over the same database that notes each statement's text in
 * `texts`, from @effect/sql's spans (BEGIN and COMMIT have none), on both stores.
 */
const notingRuntime = (db: TestDatabase) => {
  const texts: Array<string> = []
  const noting = queryTextTracer((text) => void texts.push(text))
  const traced = ManagedRuntime.make(
    AppLive(AppConfig.make({ databaseUrl: db.url, dataDir: db.dataDir, sealInterval: Duration.hours(24) }), { workers: false })
      .pipe(Layer.provide(Layer.setTracer(noting)))
  )
  return { traced, texts }
}

/** A statement's first three words; BEGIN and COMMIT (which the fiber path's spans on Postgres do not show) left out. */
const statementHeads = (texts: ReadonlyArray<string>) =>
  texts.map((t) => t.trim().split(/\s+/).slice(0, 3).join(" ")).filter((t) => t !== "BEGIN" && t !== "COMMIT")

/** A registry row to insert, its signature made up (the repository does not check it). */
const rowToInsert = (hash: string, i: number, kid: string) => ({
  id: newAttestationIds(1)[0]!,
  hash_hex: hash,
  registered_at: "2026-11-30T01:00:00.000000+00:00",
  signature: `sig-${i}`,
  signing_key_id: kid,
  format_version: "2.0.0"
})

const newKey = (overrides: Partial<{ scopes: ReadonlyArray<Scope> | null; monthlyQuota: number | null; orgId: string | null }> = {}) =>
  Effect.gen(function*() {
    const repo = yield* ApiKeyRepo
    const created = yield* repo.create({
      label: "contract",
      scopes: overrides.scopes === undefined ? null : overrides.scopes,
      orgId: overrides.orgId ?? null,
      env: null,
      allowIps: null,
      rateLimit: null,
      monthlyQuota: overrides.monthlyQuota ?? null
    })
    const key = yield* repo.findByHash(hashSecret(created.secret))
    if (!key) throw new Error("created key not found")
    return { key, secret: created.secret }
  })

const attestOne = (key: ApiKey, hash: string, extra: { source?: string | null; extraData?: unknown } = {}) =>
  Effect.flatMap(Attestor, (a) =>
    a.attest({ key, hashes: [hash], source: extra.source ?? null, extraData: extra.extraData ?? null, clientEncrypted: false })
  ).pipe(Effect.map((results) => results[0]!))

for (const dialect of await dialects()) {
  describe(`storage contract (${dialect})`, () => {
    let db: TestDatabase
    let rt: Runtime
    let firstHash: string
    let firstId: string

    beforeAll(async () => {
      db = await createDatabase(dialect)
      rt = makeRuntime(db)
      const { key } = await rt.runPromise(newKey())
      firstHash = randomHash()
      const r = await rt.runPromise(attestOne(key, firstHash))
      firstId = r.attestation.id
    })
    afterAll(async () => {
      await rt?.dispose()
      await db?.drop()
    })

    describe("Attestor", () => {
      /**
       * A group's write when it inserts into `tables` alone: on Postgres one statement (a
       * data-modifying WITH), on SQLite one multi-row insert per table, in one transaction.
       */
      const groupWrite = (...tables: ReadonlyArray<string>) =>
        dialect === "pg" ? ["WITH registered AS"] : tables.map((table) => `INSERT INTO ${table}`)

      it("creates a signed T0 attestation once; re-attesting returns it with the same claim", async () => {
        const { key } = await rt.runPromise(newKey())
        const hash = randomHash()
        const a = await rt.runPromise(attestOne(key, hash, { source: "src", extraData: { k: [1, 2] } }))
        expect(a.created).toBe(true)
        expect(a.attestation).toMatchObject({ hashHex: hash, level: "T0", formatVersion: "2.0.0", batchId: null })
        expect(a.attestation.id).toMatch(/^att_[A-Za-z0-9_-]{24}$/)
        expect(a.attestation.registeredAt).toMatch(WIRE_TIME)
        expect(a.claim).toMatchObject({ apiKeyId: key.id, source: "src", extraData: { k: [1, 2] }, clientEncrypted: false })
        expect(a.attestation.signingKeyId).toBe(await rt.runPromise(Effect.flatMap(Signer, (s) => s.currentKid)))
        const jwk = (await rt.runPromise(Effect.flatMap(SigningKeys, (k) => k.byKid(a.attestation.signingKeyId))))!
        expect(verifyT0(a.attestation, jwkToKeyObject(jwk))).toBe(true)

        const b = await rt.runPromise(attestOne(key, hash, { source: "changed" }))
        expect(b.created).toBe(false)
        expect(b.attestation).toEqual(a.attestation)
        expect(b.claim.id).toBe(a.claim.id)
        expect(b.claim.source).toBe("src")
        expect(b.claim.etag).toBe(a.claim.etag)
      })

      it("re-attesting what the keys hold writes nothing (two reads, no transaction); a missing claim alone is inserted", async () => {
        const { traced, texts } = notingRuntime(db)
        try {
          const [{ key }, { key: other }] = await rt.runPromise(Effect.all([newKey(), newKey()]))
          const hashes = [randomHash(), randomHash()]
          const first = await traced.runPromise(Effect.flatMap(Attestor, (a) =>
            a.attest({ key, hashes, source: "s", extraData: null, clientEncrypted: false })))
          const batch = (k: ApiKey) =>
            traced.runPromise(Effect.flatMap(Attestor, (a) => a.attest({ key: k, hashes, source: "t", extraData: null, clientEncrypted: false })))
          const writes = () => texts.filter((t) => /^\s*(INSERT|UPDATE|DELETE|BEGIN|COMMIT|SAVEPOINT|WITH)/i.test(t))

          texts.length = 0
          const again = await batch(key)
          expect(again.map((r) => [r.created, r.attestation, r.claim])).toEqual(first.map((r) => [false, r.attestation, r.claim]))
          expect(writes()).toEqual([])
          expect(texts).toHaveLength(2) // the attestations, then the key's claims on them

          // another key: the attestations exist, its claims are inserted (and nothing else)
          texts.length = 0
          const theirs = await batch(other)
          expect(theirs.map((r) => [r.created, r.attestation.id, r.claim.apiKeyId])).toEqual(first.map((r) => [false, r.attestation.id, other.id]))
          expect(statementHeads(writes())).toEqual(groupWrite("claims"))

          // a claim the key gave up is made anew
          const sql = await rt.runPromise(SqlClient.SqlClient)
          await rt.runPromise(sql`UPDATE claims SET deleted_at = ${new Date().toISOString()} WHERE id = ${first[0]!.claim.id}`)
          const renewed = await batch(key)
          expect(renewed[0]!.claim.id).not.toBe(first[0]!.claim.id)
          expect(renewed[0]!.claim.source).toBe("t")
          expect(renewed[1]!.claim).toEqual(first[1]!.claim)
        } finally {
          await traced.dispose()
        }
      })

      it("writes new attestations with one read and their inserts, and answers them as stored", async () => {
        const { traced, texts } = notingRuntime(db)
        try {
          const { key } = await rt.runPromise(newKey())
          const hashes = [randomHash(), randomHash(), randomHash()]
          await traced.runtime() // built before counting (the signer registers its key)
          texts.length = 0
          const results = await traced.runPromise(Effect.flatMap(Attestor, (a) =>
            a.attest({ key, hashes, source: "one", extraData: { n: 1 }, clientEncrypted: false })))
          expect(results.map((r) => r.created)).toEqual([true, true, true])
          // the read, then one write: the attestations, then their claims (BEGIN and COMMIT have no span)
          expect(statementHeads(texts)).toEqual(["SELECT * FROM", ...groupWrite("registry", "claims")])
          const repo = await rt.runPromise(AttestationRepo)
          const stored = await rt.runPromise(repo.findByHashes(hashes))
          expect(new Map(stored.map((a) => [a.hashHex, a]))).toEqual(new Map(results.map((r) => [r.attestation.hashHex, r.attestation])))
          const claims = await rt.runPromise(repo.liveClaims(key.id, results.map((r) => r.attestation.seq)))
          expect(new Map(claims.map((c) => [c.attestationSeq, c]))).toEqual(new Map(results.map((r) => [r.attestation.seq, r.claim])))
        } finally {
          await traced.dispose()
        }
      })

      it("two instances attesting the same new digests at once: one attestation each, every key its claim", async () => {
        const other = makeRuntime(db)
        try {
          const [{ key: k1 }, { key: k2 }] = await rt.runPromise(Effect.all([newKey(), newKey()]))
          for (let round = 0; round < 5; round++) {
            const hashes = Array.from({ length: 12 }, () => randomHash())
            const attestAll = (runtime: Runtime, key: ApiKey) =>
              runtime.runPromise(Effect.all(hashes.map((h) => attestOne(key, h)), { concurrency: "unbounded" }))
            const [a, b] = await Promise.all([attestAll(rt, k1), attestAll(other, k2)])
            hashes.forEach((h, i) => {
              expect(a[i]!.attestation.id).toBe(b[i]!.attestation.id)
              expect([a[i]!.created, b[i]!.created].filter(Boolean)).toHaveLength(1)
              expect([a[i]!.claim.apiKeyId, b[i]!.claim.apiKeyId]).toEqual([k1.id, k2.id])
            })
            const repo = await rt.runPromise(AttestationRepo)
            expect(await rt.runPromise(repo.findByHashes(hashes))).toHaveLength(hashes.length)
            const seqs = a.map((r) => r.attestation.seq)
            expect(await rt.runPromise(repo.liveClaims(k1.id, seqs))).toHaveLength(hashes.length)
            expect(await rt.runPromise(repo.liveClaims(k2.id, seqs))).toHaveLength(hashes.length)
          }
        } finally {
          await other.dispose()
        }
      })

      // SQLite has one writer per file (a second one waits for the lock before it reads), so
      // the race needs Postgres: the other writer's INSERT is held open until ours waits on it.
      if (dialect === "pg") it("an attest whose digest another writer inserts first reads it back and claims it, not created", async () => {
        const { key } = await rt.runPromise(newKey())
        const model = await rt.runPromise(attestOne(key, randomHash()))
        const hash = randomHash()
        const theirs = newAttestationIds(1)[0]!
        const writer = new pg.Client({ connectionString: db.url })
        const watcher = new pg.Client({ connectionString: db.url })
        await writer.connect()
        await watcher.connect()
        try {
          await writer.query("BEGIN")
          await writer.query(
            `INSERT INTO registry (id, hash_hex, registered_at, signature, signing_key_id, format_version)
             VALUES ($1, $2, $3, $4, $5, '2.0.0')`,
            [theirs, hash, model.attestation.registeredAt, model.attestation.signature, model.attestation.signingKeyId]
          )
          const ours = rt.runPromise(attestOne(key, hash, { source: "late" }))
          // positive control: our INSERT is waiting on the other writer's row lock
          const deadline = Date.now() + 10_000
          while ((await watcher.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0].n < 1) {
            if (Date.now() > deadline) throw new Error("our attest never waited on the other writer's insert")
            await new Promise((r) => setTimeout(r, 10))
          }
          await writer.query("COMMIT")
          const r = await ours
          expect(r.created).toBe(false)
          expect(r.attestation.id).toBe(theirs)
          expect(r.claim).toMatchObject({ apiKeyId: key.id, attestationSeq: r.attestation.seq, source: "late" })
          const repo = await rt.runPromise(AttestationRepo)
          expect(await rt.runPromise(repo.liveClaims(key.id, [r.attestation.seq]))).toEqual([r.claim])
        } finally {
          await writer.end()
          await watcher.end()
        }
      })

      it("gives each key its own claim on one attestation", async () => {
        const [k1, k2] = await rt.runPromise(Effect.all([newKey(), newKey()]))
        const hash = randomHash()
        const a = await rt.runPromise(attestOne(k1.key, hash, { source: "one" }))
        const b = await rt.runPromise(attestOne(k2.key, hash, { source: "two" }))
        expect(a.created).toBe(true)
        expect(b.created).toBe(false)
        expect(b.attestation.id).toBe(a.attestation.id)
        expect(b.claim.id).not.toBe(a.claim.id)
        expect(b.claim).toMatchObject({ apiKeyId: k2.key.id, source: "two" })
        const repo = await rt.runPromise(AttestationRepo)
        const c1 = await rt.runPromise(repo.liveClaims(k1.key.id, [a.attestation.seq]))
        const c2 = await rt.runPromise(repo.liveClaims(k2.key.id, [a.attestation.seq]))
        expect(c1.map((c) => c.source)).toEqual(["one"])
        expect(c2.map((c) => c.source)).toEqual(["two"])
      })

      it("created is true exactly once across concurrent callers (one key and many keys)", async () => {
        const keys = await rt.runPromise(Effect.all(Array.from({ length: 5 }, () => newKey())))
        const hash = randomHash()
        const results = await rt.runPromise(
          Effect.all(
            Array.from({ length: 40 }, (_, i) => attestOne(keys[i % keys.length]!.key, hash)),
            { concurrency: "unbounded" }
          )
        )
        expect(results.filter((r) => r.created)).toHaveLength(1)
        expect(new Set(results.map((r) => r.attestation.id)).size).toBe(1)
        expect(new Set(results.map((r) => r.attestation.signature)).size).toBe(1)
        const claimsByKey = new Map<string, Set<number>>()
        results.forEach((r, i) => {
          const k = keys[i % keys.length]!.key.id
          expect(r.claim.apiKeyId).toBe(k)
          if (!claimsByKey.has(k)) claimsByKey.set(k, new Set())
          claimsByKey.get(k)!.add(r.claim.id)
        })
        for (const s of claimsByKey.values()) expect(s.size).toBe(1)
        const repo = await rt.runPromise(AttestationRepo)
        expect(await rt.runPromise(repo.findByHashes([hash]))).toHaveLength(1)
      })

      it("overlapping concurrent batches create each hash once", async () => {
        const { key } = await rt.runPromise(newKey())
        const pool = Array.from({ length: 30 }, randomHash)
        const batches = Array.from({ length: 12 }, (_, i) => Array.from({ length: 10 }, (_, j) => pool[(3 * i + j) % pool.length]!))
        const results = await rt.runPromise(
          Effect.all(
            batches.map((hashes) =>
              Effect.flatMap(Attestor, (a) => a.attest({ key, hashes, source: null, extraData: null, clientEncrypted: false }))
            ),
            { concurrency: "unbounded" }
          )
        )
        const flat = results.flat()
        const covered = new Set(batches.flat())
        expect(flat.filter((r) => r.created)).toHaveLength(covered.size)
        const ids = new Map<string, string>()
        for (const r of flat) {
          const prev = ids.get(r.attestation.hashHex)
          if (prev) expect(r.attestation.id).toBe(prev)
          ids.set(r.attestation.hashHex, r.attestation.id)
        }
        results.forEach((rs, i) => expect(rs.map((r) => r.attestation.hashHex)).toEqual(batches[i]))
      })
    })

    describe("AttestationRepo", () => {
      it("findByRef by id; a number finds no API-created attestation (only imported legacy ids resolve)", async () => {
        const repo = await rt.runPromise(AttestationRepo)
        const byId = await rt.runPromise(repo.findByRef({ _tag: "Id", id: firstId }))
        expect(byId?.hashHex).toBe(firstHash)
        expect(byId?.legacyId).toBeNull()
        const { key } = await rt.runPromise(newKey())
        const later = await rt.runPromise(attestOne(key, randomHash()))
        expect(later.attestation.legacyId).toBeNull()
        // The row sequence numbers are not handles: 1 … seq of the newest find nothing.
        for (let n = 1; n <= later.attestation.seq + 2; n++) {
          expect(await rt.runPromise(repo.findByRef({ _tag: "Legacy", legacyId: n })), `#${n}`).toBeUndefined()
        }
        expect(await rt.runPromise(repo.findByRef({ _tag: "Id", id: "att_AAAAAAAAAAAAAAAAAAAAAAAA" }))).toBeUndefined()
        expect(await rt.runPromise(repo.findByRef({ _tag: "Legacy", legacyId: 987654321 }))).toBeUndefined()
      })

      it("the inserts return each row as the store holds it, skipping the ones already there (over a chunk's 400)", async () => {
        const repo = await rt.runPromise(AttestationRepo)
        const sql = await rt.runPromise(SqlClient.SqlClient)
        const { key } = await rt.runPromise(newKey({ orgId: "org_contract" }))
        const taken = randomHash()
        await rt.runPromise(attestOne(key, taken))
        const hashes = [...Array.from({ length: 450 }, randomHash), taken].sort()
        const rows = hashes.map((hash, i) => rowToInsert(hash, i, "kid-contract"))
        const inserted = await rt.runPromise(sql.withTransaction(repo.insertIfAbsent(rows)))
        expect(inserted.map((a) => a.hashHex).sort()).toEqual(hashes.filter((h) => h !== taken))
        const stored = new Map((await rt.runPromise(repo.findByHashes(hashes))).map((a) => [a.hashHex, a]))
        for (const a of inserted) expect(a).toEqual(stored.get(a.hashHex))

        const seqs = inserted.map((a) => a.seq)
        const claims = seqs.map((seq, i) => ({
          attestation_seq: seq,
          api_key_id: key.id,
          org_id: key.orgId,
          source: i % 2 === 0 ? null : `source-${i}`,
          extra_data: i % 3 === 0 ? null : JSON.stringify({ i, nested: [true, null, "x"] }),
          client_encrypted: i % 2 === 0,
          etag: `etag-${i}`,
          created_at: "2026-11-24T01:00:00.000Z",
          updated_at: "2026-11-24T01:00:00.000Z"
        }))
        const already = seqs.slice(0, 5)
        await rt.runPromise(sql.withTransaction(repo.insertClaimsIfAbsent(claims.slice(0, 5))))
        const insertedClaims = await rt.runPromise(sql.withTransaction(repo.insertClaimsIfAbsent(claims)))
        expect(insertedClaims.map((c) => c.attestationSeq).sort((a, b) => a - b)).toEqual(seqs.filter((s) => !already.includes(s)).sort((a, b) => a - b))
        const storedClaims = new Map((await rt.runPromise(repo.liveClaims(key.id, seqs))).map((c) => [c.attestationSeq, c]))
        for (const c of insertedClaims) expect(c).toEqual(storedClaims.get(c.attestationSeq))
        expect(insertedClaims.some((c) => c.clientEncrypted) && insertedClaims.some((c) => c.extraData !== null)).toBe(true)
      })

      it("register writes rows and the claims on them and on existing ones at once, skipping what is taken", async () => {
        const repo = await rt.runPromise(AttestationRepo)
        const [{ key }, { key: other }] = await rt.runPromise(Effect.all([newKey({ orgId: "org_register" }), newKey()]))
        const taken = await rt.runPromise(attestOne(other, randomHash())) // registered first by another writer
        const held = await rt.runPromise(attestOne(key, randomHash())) // exists, and the key holds its claim
        const bare = await rt.runPromise(attestOne(other, randomHash())) // exists, the key holds no claim on it
        const fresh = Array.from({ length: 3 }, randomHash).sort()
        const claim = (hash: string, seq: number | null, i: number, k = key) => ({
          hash_hex: hash,
          attestation_seq: seq,
          api_key_id: k.id,
          org_id: k.orgId,
          source: i === 0 ? null : `source "${i}" \\ {x}`,
          extra_data: i === 1 ? JSON.stringify({ i, nested: [true, null, "a,b"] }) : null,
          client_encrypted: i === 2,
          etag: `etag-${i}`,
          created_at: "2026-11-30T01:00:00.000Z",
          updated_at: "2026-11-30T01:00:00.000Z"
        })
        const claims = [
          ...fresh.map((h, i) => claim(h, null, i)),
          claim(fresh[0]!, null, 3, other),
          claim(taken.attestation.hashHex, null, 4), // its row is not ours: no claim
          claim(held.attestation.hashHex, held.attestation.seq, 5), // already live: skipped
          claim(bare.attestation.hashHex, bare.attestation.seq, 6)
        ]
        const written = await rt.runPromise(repo.register([...fresh, taken.attestation.hashHex].map((h, i) => rowToInsert(h, i, "kid-register")), claims))

        expect(written.attestations.map((a) => a.hashHex).sort()).toEqual(fresh)
        const stored = new Map((await rt.runPromise(repo.findByHashes(fresh))).map((a) => [a.hashHex, a]))
        for (const a of written.attestations) expect(a).toEqual(stored.get(a.hashHex))
        const seqOf = new Map<string, number>(written.attestations.map((a) => [a.hashHex, a.seq]))
        expect(written.claims.map((c) => [c.apiKeyId, c.attestationSeq, c.etag]).sort()).toEqual([
          ...fresh.map((h, i) => [key.id, seqOf.get(h)!, `etag-${i}`]),
          [other.id, seqOf.get(fresh[0]!)!, "etag-3"],
          [key.id, bare.attestation.seq, "etag-6"]
        ].sort())
        const live = await rt.runPromise(repo.liveClaims(key.id, [...seqOf.values(), bare.attestation.seq, held.attestation.seq, taken.attestation.seq]))
        expect(live.find((c) => c.attestationSeq === taken.attestation.seq)).toBeUndefined()
        expect(live.find((c) => c.attestationSeq === held.attestation.seq)).toEqual(held.claim)
        for (const c of written.claims.filter((c) => c.apiKeyId === key.id)) expect(c).toEqual(live.find((l) => l.attestationSeq === c.attestationSeq))
        expect(written.claims.find((c) => c.etag === "etag-1")?.extraData).toEqual({ i: 1, nested: [true, null, "a,b"] })
        expect(written.claims.find((c) => c.etag === "etag-2")?.clientEncrypted).toBe(true)
        expect(written.claims.find((c) => c.etag === "etag-1")?.source).toBe('source "1" \\ {x}')
        // nothing to write: nothing written
        expect(await rt.runPromise(repo.register([], []))).toEqual({ attestations: [], claims: [] })
      })

      it("findByHashes returns only the attested ones (and handles many)", async () => {
        const repo = await rt.runPromise(AttestationRepo)
        const { key } = await rt.runPromise(newKey())
        const known = randomHash()
        await rt.runPromise(attestOne(key, known))
        const many = [known, ...Array.from({ length: 900 }, randomHash)]
        const found = await rt.runPromise(repo.findByHashes(many))
        expect(found.map((a) => a.hashHex)).toEqual([known])
        expect(await rt.runPromise(repo.findByHashes([]))).toEqual([])
      })

      it("statusByHashes answers the attested digests among those asked, each once, also inside a transaction", async () => {
        const repo = await rt.runPromise(AttestationRepo)
        const { key } = await rt.runPromise(newKey())
        const known = [randomHash(), randomHash(), randomHash()]
        for (const h of known) await rt.runPromise(attestOne(key, h))
        const unknown = [randomHash(), randomHash(), randomHash(), randomHash()]
        const found = await rt.runPromise(repo.statusByHashes([...known, ...unknown]))
        expect(found.map((a) => a.hashHex).sort()).toEqual([...known].sort())
        const sql = await rt.runPromise(SqlClient.SqlClient)
        const inTx = await rt.runPromise(sql.withTransaction(repo.statusByHashes([known[1]!, unknown[0]!])).pipe(Effect.timeout("10 seconds")))
        expect(inTx.map((a) => a.hashHex)).toEqual([known[1]])
      })

      it("create, findByHash, list, revoke; only the SHA-256 is stored", async () => {
        const repo = await rt.runPromise(ApiKeyRepo)
        const created = await rt.runPromise(repo.create({
          label: "L",
          scopes: ["attest", "batch"],
          orgId: "org-1",
          env: "test",
          allowIps: ["127.0.0.1/32"],
          rateLimit: 10,
          monthlyQuota: 5
        }))
        expect(created.secret).toMatch(API_KEY_PATTERN)
        expect(created.secret.startsWith("atk_test_")).toBe(true)
        const found = await rt.runPromise(repo.findByHash(hashSecret(created.secret)))
        expect(found).toMatchObject({
          id: created.id,
          label: "L",
          scopes: ["attest", "batch"],
          orgId: "org-1",
          env: "test",
          allowIps: ["127.0.0.1/32"],
          rateLimit: 10,
          monthlyQuota: 5,
          revokedAt: null,
          keyHash: hashSecret(created.secret)
        })
        expect(await rt.runPromise(repo.findByHash(hashSecret(created.secret + "x")))).toBeUndefined()

        const listed = await rt.runPromise(repo.list)
        expect(listed.map((k) => k.id)).toContain(created.id)

        const rows = await rt.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT * FROM api_keys`))
        for (const row of rows) {
          for (const v of Object.values(row)) expect(String(v)).not.toContain(created.secret.slice(9))
        }

        expect(await rt.runPromise(repo.revoke(created.id))).toBe(true)
        expect(await rt.runPromise(repo.revoke(created.id))).toBe(false)
        expect(await rt.runPromise(repo.revoke("key_nope"))).toBe(false)
        // Inside a transaction it refuses (a defect), and revokes nothing.
        const other = await rt.runPromise(newKey())
        const inTx = await rt.runPromise(
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(repo.revoke(other.key.id))).pipe(Effect.exit)
        )
        expect(inTx._tag === "Failure" && String(Cause.squash(inTx.cause))).toMatch(/outside a transaction/)
        expect((await rt.runPromise(repo.findByHash(hashSecret(other.secret))))?.revokedAt).toBeNull()
        const revoked = await rt.runPromise(repo.findByHash(hashSecret(created.secret)))
        expect(revoked?.revokedAt).toMatch(WIRE_TIME)
      })

      it("keys without scopes are stored as null (all scopes); production and unrestricted keys are atk_live_", async () => {
        const repo = await rt.runPromise(ApiKeyRepo)
        const a = await rt.runPromise(repo.create({
          label: "legacy",
          scopes: null,
          orgId: null,
          env: null,
          allowIps: null,
          rateLimit: null,
          monthlyQuota: null
        }))
        expect(a.secret.startsWith("atk_live_")).toBe(true)
        const k = await rt.runPromise(repo.findByHash(hashSecret(a.secret)))
        expect(k).toMatchObject({ scopes: null, orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
        const p = await rt.runPromise(repo.create({
          label: "prod",
          scopes: ["attest"],
          orgId: null,
          env: "production",
          allowIps: null,
          rateLimit: null,
          monthlyQuota: null
        }))
        expect(p.secret.startsWith("atk_live_")).toBe(true)
      })
    })

    describe("Quota", () => {
      it("consumes per key per month and refuses without consuming", async () => {
        const { key } = await rt.runPromise(newKey({ monthlyQuota: 3 }))
        const quota = await rt.runPromise(Quota)
        const run = (n: number) => rt.runPromise(Effect.either(quota.consume(key, n)))
        expect(Either.isRight(await run(2))).toBe(true)
        const refused = await run(2)
        expect(Either.isLeft(refused)).toBe(true)
        if (Either.isLeft(refused)) {
          expect(refused.left._tag).toBe("QuotaExceeded")
          expect(refused.left.retryAfter).toBeGreaterThanOrEqual(1)
        }
        expect(Either.isRight(await run(1))).toBe(true)
        expect(Either.isLeft(await run(1))).toBe(true)
        expect(Either.isRight(await run(0))).toBe(true)

        const other = await rt.runPromise(newKey({ monthlyQuota: 3 }))
        expect(Either.isRight(await rt.runPromise(Effect.either(quota.consume(other.key, 3))))).toBe(true)
        expect(Either.isLeft(await rt.runPromise(Effect.either(quota.consume(other.key, 4))))).toBe(true)
      })

      it("no quota means unlimited", async () => {
        const { key } = await rt.runPromise(newKey())
        const quota = await rt.runPromise(Quota)
        expect(Either.isRight(await rt.runPromise(Effect.either(quota.consume(key, 1_000_000))))).toBe(true)
      })

      it("concurrent consumers never exceed the quota", async () => {
        const { key } = await rt.runPromise(newKey({ monthlyQuota: 5 }))
        const quota = await rt.runPromise(Quota)
        const results = await rt.runPromise(
          Effect.all(Array.from({ length: 20 }, () => Effect.either(quota.consume(key, 1))), { concurrency: "unbounded" })
        )
        expect(results.filter(Either.isRight)).toHaveLength(5)
      })
    })

    describe("RateLimiter (as wired for this store)", () => {
      it("admits up to the limit, then refuses with retryAfter >= 1", async () => {
        const limiter = await rt.runPromise(RateLimiter)
        const k = `contract:${randomHash().slice(0, 12)}`
        const verdicts = await rt.runPromise(Effect.all(Array.from({ length: 6 }, () => limiter.hit(k, 5))))
        expect(verdicts.map((v) => v.allowed)).toEqual([true, true, true, true, true, false])
        expect(verdicts.map((v) => v.remaining)).toEqual([4, 3, 2, 1, 0, 0])
        const last = verdicts[5]!
        expect(last.retryAfter).toBeGreaterThanOrEqual(1)
        expect(last.retryAfter).toBeLessThanOrEqual(60)
        expect(last.limit).toBe(5)
      })

      it("concurrent hits admit exactly the limit", async () => {
        const limiter = await rt.runPromise(RateLimiter)
        const k = `contract-c:${randomHash().slice(0, 12)}`
        const verdicts = await rt.runPromise(
          Effect.all(Array.from({ length: 25 }, () => limiter.hit(k, 7)), { concurrency: "unbounded" })
        )
        expect(verdicts.filter((v) => v.allowed)).toHaveLength(7)
      })

      it("hits from four lanes at once, then one more: exactly the limit (reads that come back out of order hide no hit)", async () => {
        // On Postgres, hits decided here, the periodic flush and the exact path's reads interleave;
        // their reads of the window finish in any order, and a late, older read must not make the
        // view forget hits (the next hit would then be admitted past the limit).
        const limiter = await rt.runPromise(RateLimiter)
        for (let round = 0; round < 6; round++) {
          const k = `contract-l:${randomHash().slice(0, 12)}`
          const lane = Effect.forEach(Array.from({ length: 25 }, (_, i) => i), (i) =>
            Effect.delay(limiter.hit(k, 100), (i * 7 + round) % 9))
          const lanes = await rt.runPromise(Effect.all([lane, lane, lane, lane], { concurrency: "unbounded" }))
          expect(lanes.flat().filter((v) => v.allowed), `round ${round}`).toHaveLength(100)
          expect((await rt.runPromise(limiter.hit(k, 100))).allowed, `round ${round}: hit 101`).toBe(false)
        }
      })
    })

    if (dialect === "pg") {
      describe("RateLimiter.sql with the TestClock", () => {
        let sql: SqlClient.SqlClient
        beforeAll(async () => {
          sql = await rt.runPromise(SqlClient.SqlClient)
        })

        effectIt.effect("the window frees after 60 s", () =>
          windowScenario(`sql:${randomHash().slice(0, 12)}`).pipe(
            Effect.provide(RateLimiter.sql.pipe(Layer.provide(Layer.sync(SqlClient.SqlClient, () => sql))))
          ))

        effectIt.scoped("an exact hit waits for the key's flush in flight, then it and the next hit count exactly", () =>
          Effect.gen(function*() {
            // All in one second of the TestClock, so the flush and the exact hit write the same row.
            yield* TestClock.setTime(1_800_000_000_000)
            const limiter = yield* RateLimiter
            const k = `sql-wait:${randomHash().slice(0, 12)}`
            const sleep = (ms: number) => Effect.promise(() => new Promise((r) => setTimeout(r, ms)))
            expect((yield* limiter.hit(k, 100)).remaining).toBe(99) // exact: the view starts
            for (const left of [98, 97, 96]) expect((yield* limiter.hit(k, 100)).remaining).toBe(left) // decided here
            // Another transaction holds the key's row, so the next flush's INSERT waits on it.
            const locked = yield* Deferred.make<void>()
            const release = yield* Deferred.make<void>()
            yield* Effect.forkScoped(sql.withTransaction(Effect.gen(function*() {
              yield* sql`SELECT n FROM rate_buckets WHERE bucket_key = ${k} FOR UPDATE`
              yield* Deferred.succeed(locked, undefined)
              yield* Deferred.await(release)
            })))
            yield* Deferred.await(locked)
            yield* sleep(3 * SQL_LIMITER_FLUSH_MS) // the flush has taken the 3 hits and waits on the lock
            // A hit over the local allowance takes the exact path: it must wait for that flush.
            const exact = yield* Effect.fork(limiter.hit(k, 100, 60, 20))
            yield* sleep(SQL_LIMITER_FLUSH_MS)
            expect(exact.unsafePoll()).toBeNull()
            yield* Deferred.succeed(release, undefined)
            const verdict = yield* Fiber.join(exact)
            expect({ allowed: verdict.allowed, remaining: verdict.remaining }).toEqual({ allowed: true, remaining: 76 })
            // decided here at once, whether or not the flush's own read has come back
            expect((yield* limiter.hit(k, 100)).remaining).toBe(75)
            const [row] = yield* sql<{ n: string | number }>`SELECT SUM(n) AS n FROM rate_buckets WHERE bucket_key = ${k}`
            expect(Number(row!.n)).toBe(24)
          }).pipe(Effect.provide(RateLimiter.sql.pipe(Layer.provide(Layer.sync(SqlClient.SqlClient, () => sql))))), 20_000)
      })
    }
  })
}

/** Shared sliding-window scenario: 3 hits at t=0, 2 at t=30 s, full until t=60 s, then the t=0 hits expire. */
const windowScenario = (k: string) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter
    for (let i = 0; i < 3; i++) expect((yield* limiter.hit(k, 5)).allowed).toBe(true)
    yield* TestClock.adjust(Duration.seconds(30))
    for (let i = 0; i < 2; i++) expect((yield* limiter.hit(k, 5)).allowed).toBe(true)
    const full = yield* limiter.hit(k, 5)
    expect(full.allowed).toBe(false)
    expect(full.remaining).toBe(0)
    expect(full.retryAfter).toBe(30)
    yield* TestClock.adjust(Duration.seconds(29))
    const stillFull = yield* limiter.hit(k, 5)
    expect(stillFull.allowed).toBe(false)
    expect(stillFull.retryAfter).toBe(1)
    yield* TestClock.adjust(Duration.seconds(1))
    // t = 60 s: the three hits of t = 0 left the window
    for (let i = 0; i < 3; i++) expect((yield* limiter.hit(k, 5)).allowed, `after the window, hit ${i}`).toBe(true)
    expect((yield* limiter.hit(k, 5)).allowed).toBe(false)
    yield* TestClock.adjust(Duration.seconds(60))
    const fresh = yield* limiter.hit(k, 5)
    expect(fresh.allowed).toBe(true)
    expect(fresh.remaining).toBe(4)
  })

describe("RateLimiter.memory with the TestClock", () => {
  effectIt.effect("the window frees after 60 s", () =>
    windowScenario("mem:a").pipe(Effect.provide(RateLimiter.memory)))

  effectIt.effect("limits are per key", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      for (let i = 0; i < 2; i++) expect((yield* limiter.hit("a", 2)).allowed).toBe(true)
      expect((yield* limiter.hit("a", 2)).allowed).toBe(false)
      expect((yield* limiter.hit("b", 2)).allowed).toBe(true)
    }).pipe(Effect.provide(RateLimiter.memory)))

  effectIt.effect("reset is the Unix second at which the window frees a request", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(1_700_000_000_000)
      const limiter = yield* RateLimiter
      const v = yield* limiter.hit("r", 1)
      expect(v.reset).toBe(1_700_000_060)
      const refused = yield* limiter.hit("r", 1)
      expect(refused.allowed).toBe(false)
      expect(refused.retryAfter).toBe(60)
    }).pipe(Effect.provide(RateLimiter.memory)))
})
