/**
 * The T1 sealer over both stores, against a real OpenSSL RFC 3161 TSA, with
 * windows driven by the TestClock (no real sleeping for windows: the test
 * only polls, in real time, for the sealer's database and TSA I/O to finish).
 *
 * Synchronisation: the sealer loop sleeps to each window boundary. A window
 * is "done" when the sealer has gone back to sleep until the NEXT boundary,
 * i.e. when one more TestClock sleep is registered at that instant.
 */
import { it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Chunk, Clock, Context, Duration, Effect, Layer, Option, TestClock } from "effect"
import { expect } from "vitest"
import { Attestor } from "../../src/Attestations/Attestor.js"
import { Evidence } from "../../src/Attestations/Evidence.js"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { formatMillis } from "../../src/Domain/Time.js"
import { HealthChecks } from "../../src/Platform/HealthChecks.js"
import { AppLive } from "../../src/main.js"
import { AppConfig, type AppConfigShape } from "../../src/Platform/Config.js"
import { parseTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { CHUNK_NODES, SealingRepo } from "../../src/Sealing/Repo.js"
import { Sealer } from "../../src/Sealing/Sealer.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { type OpensslTsa, opensslVerify, startOpensslTsa } from "../helpers/opensslTsa.js"
import {
  checkSealingInvariants,
  merkleLevelsV2,
  merkleRootV2,
  proofLength,
  randomHex32,
  rootFromProofV2
} from "../helpers/process.js"

const INTERVAL = 60_000
const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/
const HEX64 = /^[0-9a-f]{64}$/

class Fixture extends Context.Tag("test/SealerFixture")<Fixture, {
  readonly tsa: OpensslTsa
  readonly db: TestDatabase
  readonly config: AppConfigShape
}>() {}

const FixtureLive = (dialect: "sqlite" | "pg") =>
  Layer.scoped(
    Fixture,
    Effect.acquireRelease(
      Effect.promise(async () => {
        const [tsa, db] = await Promise.all([startOpensslTsa(), createDatabase(dialect)])
        const config = AppConfig.make({
          databaseUrl: db.url,
          dataDir: db.dataDir,
          sealInterval: Duration.seconds(60),
          tsaUrls: [tsa.url],
          tsaCaFile: Option.some(tsa.caFile)
        })
        return { tsa, db, config }
      }),
      (f) => Effect.promise(async () => {
        await f.tsa.close()
        await f.db.drop()
      })
    )
  )

const TestLayer = (dialect: "sqlite" | "pg") =>
  Layer.unwrapEffect(Effect.map(Fixture, (f) => AppLive(f.config, { workers: false }))).pipe(
    Layer.provideMerge(FixtureLive(dialect))
  )

// ---------------------------------------------------------------------------
// Helpers (Effects over the layer's services)

const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))

/** Polls (in real time) until `check` yields a value other than undefined/false. */
const eventually = <A, E, R>(label: string, check: Effect.Effect<A | undefined | false, E, R>, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (true) {
      const v = yield* check
      if (v !== undefined && v !== false) return v
      if (Date.now() > deadline) return yield* Effect.dieMessage(`timed out waiting for ${label}`)
      yield* realSleep(20)
    }
  })

const sleepsAt = (t: number) =>
  Effect.map(TestClock.sleeps(), (s) => Chunk.toReadonlyArray(s).filter((x) => x === t).length)

/** Runs `action`, then waits until one more TestClock sleep ends at `t` (the sealer's next sleep). */
const thenSealerSleepsUntil = <A, E, R>(t: number, action: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = yield* sleepsAt(t)
    const a = yield* action
    yield* eventually(`the sealer to sleep until ${t}`, Effect.map(sleepsAt(t), (n) => n > before))
    return a
  })

const nextBoundary = Effect.map(Clock.currentTimeMillis, (now) => (Math.floor(now / INTERVAL) + 1) * INTERVAL)

/** Forks the sealer loop (scoped to the test) and returns the boundary it sleeps to. */
const startSealer = Effect.gen(function*() {
  const sealer = yield* Sealer
  const boundary = yield* nextBoundary
  yield* thenSealerSleepsUntil(boundary, Effect.forkScoped(sealer.run))
  return boundary
})

/** Moves the TestClock to boundary `t` and waits until the sealer has handled that window. */
const crossBoundary = (t: number) =>
  thenSealerSleepsUntil(
    t + INTERVAL,
    Effect.flatMap(Clock.currentTimeMillis, (now) => TestClock.adjust(Duration.millis(t - now)))
  )

const advance = (ms: number) => TestClock.adjust(Duration.millis(ms))

const newKey = Effect.gen(function*() {
  const keys = yield* ApiKeyRepo
  const created = yield* keys.create({
    label: "sealer-test",
    scopes: ["attest"],
    orgId: null,
    env: null,
    allowIps: null,
    rateLimit: null,
    monthlyQuota: null
  })
  const key = yield* keys.findByHash(hashSecret(created.secret))
  if (!key) return yield* Effect.dieMessage("created key not found")
  return key
})

const attest = (n: number) =>
  Effect.gen(function*() {
    const key = yield* newKey
    const attestor = yield* Attestor
    const hashes = Array.from({ length: n }, randomHex32)
    const results = yield* attestor.attest({ key, hashes, source: null, extraData: null, clientEncrypted: false })
    expect(results.every((r) => r.created)).toBe(true)
    return results.map((r) => r.attestation)
  })

interface AttRow {
  readonly seq: number
  readonly id: string
  readonly hash_hex: string
  readonly level: string
  readonly batch_id: number | null
  readonly leaf_index: number | null
  readonly t1_at: string | null
  readonly registered_at: string
}

const rowsOf = (ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<Record<string, unknown>>`SELECT seq, id, hash_hex, level, batch_id, leaf_index, t1_at, registered_at
      FROM attestations WHERE ${sql.in("id", ids)}`
    return rows.map((r): AttRow => ({
      seq: Number(r.seq),
      id: String(r.id),
      hash_hex: String(r.hash_hex),
      level: String(r.level),
      batch_id: r.batch_id === null ? null : Number(r.batch_id),
      leaf_index: r.leaf_index === null ? null : Number(r.leaf_index),
      t1_at: r.t1_at === null ? null : String(r.t1_at),
      registered_at: String(r.registered_at)
    }))
  }).pipe(Effect.orDie)

const batchRows = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<Record<string, unknown>>`SELECT id, window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time
    FROM batches ORDER BY id`
  return rows.map((r) => ({
    id: Number(r.id),
    windowEnd: String(r.window_end),
    merkleRoot: String(r.merkle_root),
    leafCount: Number(r.leaf_count),
    token: new Uint8Array(r.tsa_token as Uint8Array),
    provider: String(r.tsa_provider),
    genTime: String(r.tsa_gen_time)
  }))
}).pipe(Effect.orDie)

/** t1_complete events per attestation seq. */
const outboxCounts = (seqs: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ attestation_seq: number | string; event_type: string }>`SELECT attestation_seq, event_type
      FROM outbox WHERE ${sql.in("attestation_seq", [...seqs])}`
    const counts = new Map<number, number>(seqs.map((s) => [s, 0]))
    for (const r of rows) {
      expect(r.event_type).toBe("t1_complete")
      counts.set(Number(r.attestation_seq), (counts.get(Number(r.attestation_seq)) ?? 0) + 1)
    }
    return counts
  }).pipe(Effect.orDie)

const sortedIds = (rows: ReadonlyArray<{ id: string }>) => rows.map((r) => r.id).sort()

// ---------------------------------------------------------------------------

for (const dialect of await dialects()) {
  layer(TestLayer(dialect), { timeout: Duration.seconds(90) })(`Sealer (${dialect}, OpenSSL TSA, TestClock)`, (it) => {
    it.scoped("attestations registered before a boundary reach T1 after it: one batch, one t1_complete each", () =>
      Effect.gen(function*() {
        const { tsa } = yield* Fixture
        const boundary = yield* startSealer
        const early = yield* attest(4)
        yield* advance(INTERVAL / 2) // still inside the window
        const late = yield* attest(3)
        const ids = [...early, ...late].map((a) => a.id)
        const batchesBefore = (yield* batchRows).length

        const before = yield* rowsOf(ids)
        expect(before.every((r) => r.level === "T0" && r.batch_id === null && r.leaf_index === null && r.t1_at === null)).toBe(true)

        yield* crossBoundary(boundary)

        const rows = yield* rowsOf(ids)
        expect(rows).toHaveLength(7)
        const batchIds = new Set(rows.map((r) => r.batch_id))
        expect(batchIds.size).toBe(1)
        const batchId = [...batchIds][0]!
        expect(batchId).not.toBeNull()
        const sortedHashes = rows.map((r) => r.hash_hex).sort()
        for (const r of rows) {
          expect(r.level).toBe("T1")
          expect(r.leaf_index).toBe(sortedHashes.indexOf(r.hash_hex))
          expect(r.t1_at).toMatch(WIRE_TIME)
        }
        const batches = yield* batchRows
        expect(batches).toHaveLength(batchesBefore + 1)
        const batch = batches.find((b) => b.id === batchId)!
        expect(batch.windowEnd).toBe(formatMillis(boundary))
        expect(batch.leafCount).toBe(7)
        expect(batch.merkleRoot).toBe(merkleRootV2(sortedHashes))
        expect(batch.provider).toBe(tsa.url)
        // t1_at is the TSA's genTime (wire format), the batch keeps it as ISO 8601
        for (const r of rows) expect(Date.parse(r.t1_at!.replace("+00:00", "Z"))).toBe(Date.parse(batch.genTime))
        expect(parseTimeStampToken(batch.token).hashed_message).toBe(batch.merkleRoot)

        const events = yield* outboxCounts(rows.map((r) => r.seq))
        expect([...events.values()]).toEqual(rows.map(() => 1))
      }))

    it.scoped("attestations registered at or after the boundary go into the next batch, never into two", () =>
      Effect.gen(function*() {
        const b1 = yield* startSealer
        const first = yield* attest(3)
        yield* crossBoundary(b1)
        // The clock is now exactly at b1: these are registered AT the closed boundary.
        const atBoundary = yield* attest(2)
        yield* advance(INTERVAL - 1)
        const endOfWindow = yield* attest(2)
        const firstRows = yield* rowsOf(first.map((a) => a.id))
        const batch1 = firstRows[0]!.batch_id!
        expect(firstRows.every((r) => r.level === "T1" && r.batch_id === batch1)).toBe(true)
        const pendingRows = yield* rowsOf([...atBoundary, ...endOfWindow].map((a) => a.id))
        expect(pendingRows.every((r) => r.level === "T0")).toBe(true)
        expect(pendingRows.filter((r) => r.registered_at === formatMillis(b1))).toHaveLength(2)

        // re-attesting a sealed hash changes nothing
        const attestor = yield* Attestor
        const again = yield* attestor.attest({
          key: yield* newKey,
          hashes: [first[0]!.hashHex],
          source: null,
          extraData: null,
          clientEncrypted: false
        })
        expect(again[0]!.created).toBe(false)

        const b2 = b1 + INTERVAL
        yield* crossBoundary(b2)
        const second = yield* rowsOf([...atBoundary, ...endOfWindow].map((a) => a.id))
        const batch2 = second[0]!.batch_id!
        expect(batch2).not.toBe(batch1)
        expect(second.every((r) => r.level === "T1" && r.batch_id === batch2)).toBe(true)
        const after1 = yield* rowsOf(first.map((a) => a.id))
        expect(after1).toEqual(firstRows.map((r) => ({ ...r, level: "T1" })))

        const batches = yield* batchRows
        const one = batches.find((b) => b.id === batch1)!
        const two = batches.find((b) => b.id === batch2)!
        expect(one.leafCount).toBe(3)
        expect(one.windowEnd).toBe(formatMillis(b1))
        expect(two.leafCount).toBe(4)
        expect(two.windowEnd).toBe(formatMillis(b2))
        expect(two.merkleRoot).toBe(merkleRootV2(second.map((r) => r.hash_hex)))

        // an empty window writes no batch
        yield* crossBoundary(b2 + INTERVAL)
        expect((yield* batchRows).length).toBe(batches.length)

        const all = [...after1, ...second]
        const events = yield* outboxCounts(all.map((r) => r.seq))
        expect([...events.values()]).toEqual(all.map(() => 1))
      }))

    it.scoped("TSA down: nothing changes, health reports tsa degraded; after recovery (and backoff) a later window seals", () =>
      Effect.gen(function*() {
        const { tsa } = yield* Fixture
        const health = yield* HealthChecks
        const b = yield* startSealer
        const pending = yield* attest(3)
        const ids = pending.map((a) => a.id)
        const batchesBefore = (yield* batchRows).length
        tsa.setMode("http500")
        try {
          const r0 = tsa.requests
          yield* crossBoundary(b) // failure 1: next window is attempted again
          expect(tsa.requests).toBe(r0 + 1)
          const rows = yield* rowsOf(ids)
          expect(rows.every((r) => r.level === "T0" && r.batch_id === null && r.leaf_index === null && r.t1_at === null)).toBe(true)
          expect((yield* batchRows).length).toBe(batchesBefore)
          expect([...(yield* outboxCounts(rows.map((r) => r.seq))).values()]).toEqual([0, 0, 0])
          const probe = yield* health.run
          expect(probe.checks.tsa).toBe("degraded")
          expect(probe.ok).toBe(true) // degraded, not unhealthy

          yield* crossBoundary(b + INTERVAL) // failure 2: skips 2^(2-1)-1 = 1 window
          expect(tsa.requests).toBe(r0 + 2)
          expect((yield* rowsOf(ids)).every((r) => r.level === "T0")).toBe(true)

          tsa.setMode("ok")
          yield* crossBoundary(b + 2 * INTERVAL) // skipped: no TSA request at all
          expect(tsa.requests).toBe(r0 + 2)
          expect((yield* rowsOf(ids)).every((r) => r.level === "T0")).toBe(true)
          expect((yield* health.run).checks.tsa).toBe("degraded")

          yield* crossBoundary(b + 3 * INTERVAL)
          expect(tsa.requests).toBe(r0 + 3)
        } finally {
          tsa.setMode("ok")
        }
        const rows = yield* rowsOf(ids)
        expect(rows.every((r) => r.level === "T1" && r.batch_id === rows[0]!.batch_id)).toBe(true)
        const batch = (yield* batchRows).find((x) => x.id === rows[0]!.batch_id)!
        expect(batch.windowEnd).toBe(formatMillis(b + 3 * INTERVAL))
        expect(batch.leafCount).toBe(3)
        expect((yield* health.run).checks.tsa).toBe("ok")
        expect([...(yield* outboxCounts(rows.map((r) => r.seq))).values()]).toEqual([1, 1, 1])
      }))

    it.scoped("a TSA reply for another digest is rejected and never stored; the next window seals", () =>
      Effect.gen(function*() {
        const { tsa } = yield* Fixture
        const b = yield* startSealer
        const pending = yield* attest(2)
        const batchesBefore = (yield* batchRows).length
        tsa.setMode("wrongDigest")
        try {
          const r0 = tsa.requests
          yield* crossBoundary(b)
          expect(tsa.requests).toBe(r0 + 1)
          expect((yield* rowsOf(pending.map((a) => a.id))).every((r) => r.level === "T0")).toBe(true)
          expect((yield* batchRows).length).toBe(batchesBefore)
          expect((yield* (yield* HealthChecks).run).checks.tsa).toBe("degraded")
        } finally {
          tsa.setMode("ok")
        }
        yield* crossBoundary(b + INTERVAL) // one failure: no window skipped
        const rows = yield* rowsOf(pending.map((a) => a.id))
        expect(rows.every((r) => r.level === "T1")).toBe(true)
        const batch = (yield* batchRows).find((x) => x.id === rows[0]!.batch_id)!
        expect(parseTimeStampToken(batch.token).hashed_message).toBe(batch.merkleRoot)
      }))

    it.scoped("a batch above the parallel-build threshold: stored in many 1024-node chunks, every checked proof verifies", () =>
      Effect.gen(function*() {
        const { db } = yield* Fixture
        const repo = yield* SealingRepo
        const n = 4_099 // odd at several levels
        const b = yield* startSealer
        const key = yield* newKey
        const attestor = yield* Attestor
        const hashes = Array.from({ length: n }, randomHex32)
        for (let i = 0; i < n; i += 2000) {
          yield* attestor.attest({ key, hashes: hashes.slice(i, i + 2000), source: null, extraData: null, clientEncrypted: false })
        }
        yield* crossBoundary(b)
        const sql = yield* SqlClient.SqlClient
        const members = yield* sql<{ hash_hex: string; leaf_index: number | string; batch_id: number | string }>`
          SELECT hash_hex, leaf_index, batch_id FROM attestations WHERE ${sql.in("hash_hex", hashes.slice(0, 1))}`.pipe(Effect.orDie)
        const batch = (yield* repo.batchById(Number(members[0]!.batch_id)).pipe(Effect.orDie))!
        expect(batch.leafCount).toBe(n)
        const sorted = [...hashes].sort()
        expect(batch.merkleRoot).toBe(merkleRootV2(sorted))
        const chunks = yield* sql<{ level: number | string; n: number | string }>`SELECT level, COUNT(*) AS n FROM merkle_chunks
          WHERE batch_id = ${batch.id} GROUP BY level ORDER BY level`.pipe(Effect.orDie)
        expect(Number(chunks[0]!.n)).toBe(Math.ceil(n / CHUNK_NODES))
        expect(chunks).toHaveLength(proofLength(n) + 1)
        // leaves at chunk edges, at the odd tail, and a few random ones
        const probes = new Set([0, 1, CHUNK_NODES - 1, CHUNK_NODES, 2 * CHUNK_NODES - 1, 2 * CHUNK_NODES, n - 3, n - 2, n - 1])
        for (let i = 0; i < 20; i++) probes.add(Math.floor(Math.random() * n))
        for (const index of probes) {
          const proof = yield* repo.proof(batch, index).pipe(Effect.orDie)
          expect(proof).toHaveLength(proofLength(n))
          expect(rootFromProofV2(sorted[index]!, proof)).toBe(batch.merkleRoot)
        }
        const snap = yield* Effect.promise(() => checkSealingInvariants(db.url))
        expect(snap.violations).toEqual([])
      }), { timeout: 120_000 })

    it.scoped("token verifies with openssl ts -verify; every proof verifies independently; evidence t1 per spec 2.7", () =>
      Effect.gen(function*() {
        const { tsa } = yield* Fixture
        const repo = yield* SealingRepo
        const attestations = yield* AttestationRepo
        const evidence = yield* Evidence
        const b = yield* startSealer
        const seven = yield* attest(7) // odd sizes at two levels: nodes paired with themselves
        const t0Bundle = yield* evidence.bundle((yield* attestations.findByRef({ _tag: "Id", id: seven[0]!.id }))!)
        expect(t0Bundle.level).toBe("T0")
        expect("t1" in t0Bundle).toBe(false)
        yield* crossBoundary(b)
        const single = yield* attest(1)
        yield* crossBoundary(b + INTERVAL)

        for (const group of [seven, single]) {
          const rows = yield* rowsOf(group.map((a) => a.id))
          const batch = (yield* repo.batchById(rows[0]!.batch_id!).pipe(Effect.orDie))!
          expect(batch.leafCount).toBe(group.length)
          const leaves = rows.map((r) => r.hash_hex).sort()
          expect(batch.merkleRoot).toBe(merkleRootV2(leaves))
          if (group.length === 1) expect(batch.merkleRoot).toBe(leaves[0]) // one-leaf tree: root = leaf

          const ossl = yield* Effect.promise(() => opensslVerify(batch.tsaToken, batch.merkleRoot, tsa.caFile))
          expect(ossl.ok, ossl.output).toBe(true)
          // the token is bound to the root: another digest must not verify
          const wrong = yield* Effect.promise(() => opensslVerify(batch.tsaToken, merkleLevelsV2([randomHex32()])[0]!.toString("hex"), tsa.caFile))
          expect(wrong.ok).toBe(false)

          for (const r of rows) {
            const proof = yield* repo.proof(batch, r.leaf_index!).pipe(Effect.orDie)
            expect(proof).toHaveLength(proofLength(group.length))
            expect(rootFromProofV2(r.hash_hex, proof)).toBe(batch.merkleRoot)

            const a = (yield* attestations.findByRef({ _tag: "Id", id: r.id }).pipe(Effect.orDie))!
            const bundle = yield* evidence.bundle(a)
            expect(bundle.level).toBe("T1")
            expect(Object.keys(bundle).sort()).toEqual(["hash_hex", "id", "level", "t0", "t1"])
            const t1 = bundle.t1!
            expect(Object.keys(t1).sort()).toEqual(["batchId", "merkleProof", "merkleRoot", "tsaProvider", "tsaTimestamp", "tsaToken"])
            expect(Number.isInteger(t1.batchId)).toBe(true)
            expect(t1.batchId).toBe(batch.id)
            expect(t1.merkleRoot).toMatch(HEX64)
            expect(t1.merkleRoot).toBe(batch.merkleRoot)
            expect(t1.merkleProof).toEqual(proof)
            for (const step of t1.merkleProof) {
              expect(Object.keys(step).sort()).toEqual(["hash", "position"])
              expect(step.hash).toMatch(HEX64)
              expect(["left", "right"]).toContain(step.position)
            }
            expect(rootFromProofV2(bundle.hash_hex, t1.merkleProof)).toBe(t1.merkleRoot)
            expect(t1.tsaProvider).toBe(tsa.url)
            expect(t1.tsaTimestamp).toMatch(ISO_8601)
            const token = Buffer.from(t1.tsaToken, "base64")
            expect(token.toString("base64")).toBe(t1.tsaToken) // canonical Base64
            expect(token.equals(Buffer.from(batch.tsaToken))).toBe(true)
            expect(Date.parse(t1.tsaTimestamp)).toBe(Date.parse(parseTimeStampToken(token).gen_time))
          }
        }
      }))
  })
}
