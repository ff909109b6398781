/**
 * The T2 anchorer at service level, over both stores, against two simulated
 * OpenTimestamps calendars speaking the real calendar protocol over HTTP on
 * loopback. Workers are off: the test drives Sealer.sealWindow,
 * Anchorer.anchorWindow and Anchorer.upgradeOnce itself, in real time (window
 * ends are real instants just ahead of now, so nothing waits for a boundary).
 */
import { headerBytes, meetsTarget, parseHeader, REGTEST_BITS } from "../../src/Domain/BitcoinHeader.js"
import { layerEsplora } from "../../src/Platform/Bitcoin/HeaderSources.js"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, ManagedRuntime } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { Anchorer, type AnchorOutcome } from "../../src/Anchoring/Anchorer.js"
import { AnchorProofs } from "../../src/Anchoring/Proofs.js"
import { AnchoringRepo } from "../../src/Anchoring/Repo.js"
import { Attestor } from "../../src/Attestations/Attestor.js"
import type { Attestation } from "../../src/Attestations/Domain.js"
import { Evidence } from "../../src/Attestations/Evidence.js"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { bitcoinAttestations, bytesToHex, parseDetachedFile } from "../../src/Domain/Ots.js"
import { HealthChecks } from "../../src/Platform/HealthChecks.js"
import { AppLive, DatabaseLive, TsaLive } from "../../src/main.js"
import { KeyCacheRef } from "../../src/Auth/KeyCache.js"
import { layerHttp, type OtsCalendar } from "../../src/Platform/Calendar/OtsCalendar.js"
import { SimulatedBitcoinChain } from "../../src/Platform/Calendar/SimulatedCalendar.js"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { AppConfig, type AppConfigShape } from "../../src/Platform/Config.js"
import { Signer } from "../../src/Platform/Signer.js"
import { SealingRepo } from "../../src/Sealing/Repo.js"
import { Sealer, type SealOutcome } from "../../src/Sealing/Sealer.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import {
  checkAnchoringInvariants,
  HEX64,
  ISO_8601,
  merkleRoot,
  parseOts,
  poll,
  proofLength,
  randomHash,
  rootFromProof,
  sleep,
  WIRE_TIME
} from "../helpers/anchoring.js"

// ---------------------------------------------------------------------------
// Layers

/**
 * The services the slow-calendar test needs (attest, seal, anchor, upgrade),
 * wired as in main.ts's ServicesLive but with the given calendar layer (for a
 * short HTTP timeout). Deliberately minimal so it follows main.ts with little drift.
 */
const servicesWithCalendar = (config: AppConfigShape, calendar: Layer.Layer<OtsCalendar>) =>
  Layer.mergeAll(Attestor.Default, Sealer.Default, Anchorer.Default).pipe(
    Layer.provideMerge(HealthChecks.Default),
    Layer.provideMerge(Layer.mergeAll(AttestationRepo.Default, ApiKeyRepo.Default, Signer.Default, SealingRepo.Default, AnchoringRepo.Default)),
    Layer.provideMerge(KeyCacheRef.none),
    Layer.provideMerge(TsaLive(config)),
    Layer.provideMerge(calendar),
    Layer.provideMerge(layerEsplora({ sources: config.bitcoinSources })),
    Layer.provideMerge(DatabaseLive(config)),
    Layer.provideMerge(Layer.succeed(AppConfig, config))
  )

type Services =
  | Attestor
  | Evidence
  | Sealer
  | Anchorer
  | AnchorProofs
  | HealthChecks
  | AttestationRepo
  | ApiKeyRepo
  | SealingRepo
  | AnchoringRepo
  | SqlClient.SqlClient

interface Ctx {
  readonly db: TestDatabase
  readonly calA: SimulatedCalendarServer
  readonly calB: SimulatedCalendarServer
  readonly run: <A, E>(effect: Effect.Effect<A, E, Services>) => Promise<A>
  readonly dispose: () => Promise<void>
}

// ---------------------------------------------------------------------------
// Effects over the services

/** Window ends: real instants just ahead of now, strictly increasing (window_end is unique). */
let lastWindow = 0
const nextWindow = (): number => (lastWindow = Math.max(Date.now() + 1_000, lastWindow + 1))

const newKey = Effect.gen(function*() {
  const keys = yield* ApiKeyRepo
  const created = yield* keys.create({
    label: "anchorer-test",
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
}).pipe(Effect.orDie)

const attest = (n: number) =>
  Effect.gen(function*() {
    const key = yield* newKey
    const results = yield* (yield* Attestor).attest({
      key,
      hashes: Array.from({ length: n }, randomHash),
      source: null,
      extraData: null,
      clientEncrypted: false
    })
    expect(results.every((r) => r.created)).toBe(true)
    return results.map((r) => r.attestation)
  }).pipe(Effect.orDie)

const seal = Effect.flatMap(Sealer, (s) => s.sealWindow(nextWindow())).pipe(
  Effect.orDie,
  Effect.map((o: SealOutcome) => {
    if (o._tag !== "Sealed") throw new Error(`expected a sealed batch, got ${o._tag}`)
    return o
  })
)

const anchor = Effect.flatMap(Anchorer, (a) => a.anchorWindow(nextWindow()))
const upgrade = Effect.flatMap(Anchorer, (a) => a.upgradeOnce)

const reload = (ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const repo = yield* AttestationRepo
    const out: Array<Attestation> = []
    for (const id of ids) {
      const a = yield* Effect.orDie(repo.findByRef({ _tag: "Id", id }))
      if (!a) return yield* Effect.dieMessage(`attestation ${id} vanished`)
      out.push(a)
    }
    return out
  })

const t2Events = (seqs: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ attestation_seq: number | string; n: number | string }>`SELECT attestation_seq, COUNT(*) AS n
      FROM outbox WHERE event_type = 't2_complete' AND ${sql.in("attestation_seq", [...seqs])} GROUP BY attestation_seq`
    const counts = new Map<number, number>(rows.map((r) => [Number(r.attestation_seq), Number(r.n)]))
    return seqs.map((s) => counts.get(s) ?? 0)
  }).pipe(Effect.orDie)

const submissionsOf = (dailyRootId: number) => Effect.orDie(Effect.flatMap(AnchoringRepo, (r) => r.submissions(dailyRootId)))
const dayOf = (dailyRootId: number) => Effect.map(Effect.orDie(Effect.flatMap(AnchoringRepo, (r) => r.dailyRootById(dailyRootId))), (d) => d!)
const view = (a: Attestation) => Effect.flatMap(AnchorProofs, (p) => p.view(a))
const calendarsProbe = Effect.map(Effect.flatMap(HealthChecks, (h) => h.run), (r) => r.checks.calendars)

const anchored = (o: AnchorOutcome) => {
  if (o._tag !== "Anchored") throw new Error(`expected Anchored, got ${o._tag}`)
  return o
}

// ---------------------------------------------------------------------------

for (const dialect of await dialects()) {
  describe(`Anchorer (${dialect}, two simulated calendars over HTTP)`, () => {
    let calA: SimulatedCalendarServer
    let calB: SimulatedCalendarServer
    /** Two Esplora header sources over HTTP (they serve the chain both calendars mine on). */
    let srcA: SimulatedCalendarServer
    let srcB: SimulatedCalendarServer
    const chain = new SimulatedBitcoinChain()
    const open: Array<Ctx> = []

    beforeAll(async () => {
      ;[calA, calB, srcA, srcB] = await Promise.all([
        startSimulatedCalendarServer({ chain }),
        startSimulatedCalendarServer({ chain }),
        startSimulatedCalendarServer({ chain }),
        startSimulatedCalendarServer({ chain })
      ])
    })
    afterAll(async () => {
      await Promise.all([calA?.close(), calB?.close(), srcA?.close(), srcB?.close()])
    })
    afterEach(async () => {
      srcA.setLying(false)
      srcB.setLying(false)
      srcB.setDown(false)
      calA.setDown(false)
      calB.setDown(false)
      calA.setSlow(0)
      calB.setSlow(0)
      for (const c of open.splice(0)) await c.dispose()
    })

    /** A fresh database and service graph (default wiring unless a calendar layer is given). */
    const setup = async (calendar?: (urls: ReadonlyArray<string>) => Layer.Layer<OtsCalendar>): Promise<Ctx> => {
      const db = await createDatabase(dialect)
      const config = AppConfig.make({
        databaseUrl: db.url,
        dataDir: db.dataDir,
        otsCalendars: [calA.url, calB.url],
        bitcoinSources: [srcA.url, srcB.url]
      })
      const layer = calendar === undefined
        ? AppLive(config, { workers: false })
        : servicesWithCalendar(config, calendar(config.otsCalendars))
      // The minimal graph lacks Evidence / AnchorProofs: the slow-calendar test does not use them.
      const runtime = ManagedRuntime.make(layer as unknown as Layer.Layer<Services>)
      const ctx: Ctx = {
        db,
        calA,
        calB,
        run: (effect) => runtime.runPromise(effect),
        dispose: async () => {
          await runtime.dispose()
          await db.drop()
        }
      }
      open.push(ctx)
      return ctx
    }

    const invariants = async (ctx: Ctx) => {
      const snap = await checkAnchoringInvariants(ctx.db.url, {
        calendars: [calA.url, calB.url],
        blockHeaders: new Map([...calA.blockHeaders(), ...calB.blockHeaders()])
      })
      expect(snap.violations).toEqual([])
      return snap
    }

    /** Evidence t2 of a confirmed attestation, checked per spec 2.7, CONTRACT §2 and independently. */
    const checkT2Evidence = async (
      ctx: Ctx,
      a: Attestation,
      expected: { readonly dailyRoot: string; readonly height: number; readonly merkleRoot: string; readonly pendingUris: ReadonlyArray<string> }
    ) => {
      const bundle = await ctx.run(Effect.flatMap(Evidence, (e) => e.bundle(a)))
      expect(bundle.level).toBe("T2")
      expect(Object.keys(bundle).sort()).toEqual(["hash_hex", "id", "level", "t0", "t1", "t2"])
      const t1 = bundle.t1!
      const t2 = bundle.t2!
      expect(Object.keys(t2).sort()).toEqual(
        ["bitcoinBlockHash", "bitcoinBlockHeader", "bitcoinBlockHeight", "bitcoinTxid", "confirmedAt", "dailyRoot", "otsProof", "t1ToT2Proof"]
      )
      // the block header: 80 bytes, merkle root = the message the OTS ops reach, PoW meets its nBits, chained
      const header = t2.bitcoinBlockHeader!
      expect(header).toMatch(/^[0-9a-f]{160}$/)
      const fields = parseHeader(header)
      expect(fields.merkleRoot).toBe(expected.merkleRoot)
      expect(fields.bits).toBe(REGTEST_BITS)
      expect(meetsTarget(headerBytes(header))).toBe(true)
      const mined = chain.headers().get(expected.height)!
      expect(mined.header).toBe(header)
      const parent = chain.headers().get(expected.height - 1)
      if (parent !== undefined) expect(fields.prevBlockHash).toBe(parent.hash)
      expect(t2.dailyRoot).toBe(expected.dailyRoot)
      expect(t2.dailyRoot).toMatch(HEX64)
      expect(t2.bitcoinBlockHeight).toBe(expected.height)
      expect(t2.bitcoinBlockHash).toBeNull()
      expect(t2.bitcoinTxid).toBeNull()
      expect(t2.confirmedAt).toMatch(ISO_8601)
      expect(t2.confirmedAt).toBe(a.t2At)
      for (const step of t2.t1ToT2Proof) {
        expect(Object.keys(step).sort()).toEqual(["hash", "position"])
        expect(step.hash).toMatch(HEX64)
      }
      // leaf → batch root → daily root, with an independent Merkle v2
      expect(rootFromProof(a.hashHex, t1.merkleProof)).toBe(t1.merkleRoot)
      expect(rootFromProof(t1.merkleRoot, t2.t1ToT2Proof)).toBe(t2.dailyRoot)

      // otsProof: Base64 of a standard .ots file whose file digest is hash_hex (CONTRACT §2, §5)
      const bytes = Buffer.from(t2.otsProof, "base64")
      expect(bytes.toString("base64")).toBe(t2.otsProof)
      const theirs = parseOts(bytes)
      expect(theirs.hashOp).toBe("sha256")
      expect(theirs.fileDigest).toBe(a.hashHex)
      expect(theirs.reserialized).toBe(bytes.toString("hex"))
      expect(theirs.complete, "the .ots of a T2 attestation must carry a Bitcoin attestation").toBe(true)
      // the path passes through the batch root and the daily root (the 32 bytes each calendar received)
      expect(theirs.messages).toContain(t1.merkleRoot)
      expect(theirs.messages).toContain(t2.dailyRoot)
      const btc = theirs.attestations.filter((x) => x.kind === "bitcoin")
      expect(btc).toEqual([{ kind: "bitcoin", height: expected.height, msg: expected.merkleRoot }])
      expect(theirs.attestations.filter((x) => x.kind === "pending").map((x) => x.uri).sort()).toEqual([...expected.pendingUris].sort())
      // our parser agrees
      const ours = parseDetachedFile(bytes)
      expect(bytesToHex(ours.digest)).toBe(a.hashHex)
      expect(bitcoinAttestations(ours.timestamp, ours.digest).map((b) => ({ height: b.height, root: bytesToHex(b.commitment) }))).toEqual([
        { height: expected.height, root: expected.merkleRoot }
      ])
    }

    it("one batch: daily root = batch root, both calendars get it, T1 until mined, then T2 with one t2_complete each and t2 evidence", async () => {
      const ctx = await setup()
      const { run } = ctx
      expect(await run(anchor)).toEqual({ _tag: "Empty" })
      const atts = await run(attest(3))
      const ids = atts.map((a) => a.id)
      const sealed = await run(seal)
      const subsA = calA.submissions
      const subsB = calB.submissions

      const out = anchored(await run(anchor))
      expect(out.batches).toBe(1)
      expect(out.submitted).toBe(2)
      expect(calA.submissions).toBe(subsA + 1)
      expect(calB.submissions).toBe(subsB + 1)
      const batch = (await run(Effect.orDie(Effect.flatMap(SealingRepo, (r) => r.batchById(sealed.batchId)))))!
      expect(batch.dailyRootId).toBe(out.dailyRootId)
      expect(batch.dailyLeafIndex).toBe(0)
      const day = await run(dayOf(out.dailyRootId))
      expect(day.root).toBe(batch.merkleRoot) // one leaf: root = the batch root
      expect(day.root).toBe(merkleRoot([batch.merkleRoot]))
      expect(day.leaves).toEqual([batch.merkleRoot])
      expect(day.batchCount).toBe(1)
      expect(day.status).toBe("pending")
      expect(day.bitcoinHeight).toBeNull()
      const subs = await run(submissionsOf(out.dailyRootId))
      expect(subs.map((s) => s.calendarUrl).sort()).toEqual([calA.url, calB.url].sort())
      for (const s of subs) {
        expect(s.status).toBe("pending")
        expect(s.attempts).toBe(1)
        expect(s.lastError).toBeNull()
        expect(s.timestamp).not.toBeNull()
        expect(s.submittedAt).toMatch(WIRE_TIME)
      }
      expect(await run(calendarsProbe)).toBe("ok")
      // the anchored batch is not anchored again
      expect(await run(anchor)).toEqual({ _tag: "Empty" })

      // before any block: still T1, but the (pending) proof exists
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T1")
        expect(a.t2At).toBeNull()
        expect(a.t2Block).toBeNull()
        const v = (await run(view(a)))!
        expect(v.calendarTimestamp).toBeDefined()
        expect(v.t1ToT2Proof).toEqual([])
        expect(v.batchProof).toHaveLength(proofLength(3))
        expect(await run(Effect.flatMap(Evidence, (e) => e.otsAvailable(a)))).toBe(true)
        const bundle = await run(Effect.flatMap(Evidence, (e) => e.bundle(a)))
        expect(bundle.level).toBe("T1")
        expect("t2" in bundle).toBe(false)
      }
      expect(await run(t2Events(atts.map((a) => a.seq)))).toEqual([0, 0, 0])

      // a block on ONE calendar confirms the day
      const block = calA.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      const confirmed = await run(reload(ids))
      for (const a of confirmed) {
        expect(a.level).toBe("T2")
        expect(a.t2At).toMatch(WIRE_TIME)
        expect(a.t2Block).toBe(block.height)
      }
      expect(await run(t2Events(atts.map((a) => a.seq)))).toEqual([1, 1, 1])
      const day2 = await run(dayOf(out.dailyRootId))
      expect(day2.status).toBe("confirmed")
      expect(day2.bitcoinHeight).toBe(block.height)
      expect(day2.bitcoinMerkleRoot).toBe(block.merkleRoot)
      expect(day2.confirmedAt).toBe(confirmed[0]!.t2At)
      const subs2 = await run(submissionsOf(out.dailyRootId))
      expect(subs2.find((s) => s.calendarUrl === calA.url)!.status).toBe("confirmed")
      expect(subs2.find((s) => s.calendarUrl === calB.url)!.status).toBe("pending")
      for (const a of confirmed) {
        await checkT2Evidence(ctx, a, { dailyRoot: day.root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calA.url, calB.url] })
      }

      // nothing more to do; a later block elsewhere changes nothing; no duplicate events
      expect(await run(upgrade)).toEqual({ open: 0, confirmed: 0 })
      calB.mine()
      expect(await run(upgrade)).toEqual({ open: 0, confirmed: 0 })
      expect((await run(reload(ids))).map((a) => a.t2Block)).toEqual([block.height, block.height, block.height])
      expect(await run(t2Events(atts.map((a) => a.seq)))).toEqual([1, 1, 1])
      await invariants(ctx)
    })

    it("several batches in a day: daily root = Merkle v2 over the batch roots; each t1ToT2Proof leads to it; later batches go to the next day", async () => {
      const ctx = await setup()
      const { run } = ctx
      const groups: Array<Array<Attestation>> = []
      const batchIds: Array<number> = []
      for (const n of [2, 3, 1]) {
        groups.push(await run(attest(n)))
        batchIds.push((await run(seal)).batchId)
      }
      const batches = await run(Effect.orDie(Effect.forEach(batchIds, (id) => Effect.map(Effect.flatMap(SealingRepo, (r) => r.batchById(id)), (b) => b!))))
      const roots = batches.map((b) => b.merkleRoot)
      expect(new Set(roots).size).toBe(3)

      const out = anchored(await run(anchor))
      expect(out.batches).toBe(3)
      expect(out.submitted).toBe(2)
      const day = await run(dayOf(out.dailyRootId))
      expect(day.leaves).toEqual([...roots].sort())
      expect(day.batchCount).toBe(3)
      expect(day.root).toBe(merkleRoot(roots))
      expect(roots).not.toContain(day.root)

      // a batch sealed after the anchor window stays unanchored
      const late = await run(attest(2))
      const lateBatch = (await run(seal)).batchId

      const all = groups.flat()
      for (const a of await run(reload(all.map((x) => x.id)))) {
        const v = (await run(view(a)))!
        const batch = batches.find((b) => b.id === a.batchId)!
        expect(v.day.id).toBe(out.dailyRootId)
        expect(v.t1ToT2Proof).toHaveLength(proofLength(3))
        expect(rootFromProof(a.hashHex, v.batchProof)).toBe(batch.merkleRoot)
        expect(rootFromProof(batch.merkleRoot, v.t1ToT2Proof)).toBe(day.root)
      }
      for (const b of await run(Effect.orDie(Effect.forEach(batchIds, (id) => Effect.map(Effect.flatMap(SealingRepo, (r) => r.batchById(id)), (x) => x!))))) {
        expect(b.dailyRootId).toBe(out.dailyRootId)
        expect(b.dailyLeafIndex).toBe(day.leaves.indexOf(b.merkleRoot))
      }
      for (const a of await run(reload(late.map((x) => x.id)))) {
        expect(a.level).toBe("T1")
        expect(a.batchId).toBe(lateBatch)
        expect(await run(view(a))).toBeUndefined()
        expect(await run(Effect.flatMap(Evidence, (e) => e.otsAvailable(a)))).toBe(false)
      }

      const block = calB.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      for (const a of await run(reload(all.map((x) => x.id)))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block.height)
        await checkT2Evidence(ctx, a, { dailyRoot: day.root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calA.url, calB.url] })
      }
      expect((await run(reload(late.map((x) => x.id)))).every((a) => a.level === "T1")).toBe(true)
      expect(await run(t2Events(all.map((a) => a.seq)))).toEqual(all.map(() => 1))
      expect(await run(t2Events(late.map((a) => a.seq)))).toEqual([0, 0])

      // the next day holds only the late batch: one leaf, root = that batch root
      const out2 = anchored(await run(anchor))
      expect(out2.batches).toBe(1)
      const lateRoot = (await run(Effect.orDie(Effect.flatMap(SealingRepo, (r) => r.batchById(lateBatch)))))!.merkleRoot
      const day2 = await run(dayOf(out2.dailyRootId))
      expect(day2.root).toBe(lateRoot)
      const block2 = calA.mine()
      expect(block2.height).toBeGreaterThan(block.height)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      for (const a of await run(reload(late.map((x) => x.id)))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block2.height)
        await checkT2Evidence(ctx, a, { dailyRoot: lateRoot, height: block2.height, merkleRoot: block2.merkleRoot, pendingUris: [calA.url, calB.url] })
      }
      // the first day kept its block
      expect((await run(reload(all.map((x) => x.id)))).every((a) => a.t2Block === block.height)).toBe(true)
      expect(await run(t2Events([...all, ...late].map((a) => a.seq)))).toEqual([...all, ...late].map(() => 1))
      await invariants(ctx)
    })

    it("every calendar down: the daily root is recorded but nothing is lost; after recovery upgradeOnce submits and the day reaches T2", async () => {
      const ctx = await setup()
      const { run } = ctx
      const atts = await run(attest(2))
      const ids = atts.map((a) => a.id)
      const sealed = await run(seal)
      calA.setDown(true)
      calB.setDown(true)
      const subsA = calA.submissions
      const subsB = calB.submissions

      const out = anchored(await run(anchor))
      expect(out.batches).toBe(1)
      expect(out.submitted).toBe(0)
      const day = await run(dayOf(out.dailyRootId))
      expect(day.status).toBe("pending")
      expect(day.root).toBe((await run(Effect.orDie(Effect.flatMap(SealingRepo, (r) => r.batchById(sealed.batchId)))))!.merkleRoot)
      const subs = await run(submissionsOf(out.dailyRootId))
      expect(subs).toHaveLength(2)
      for (const s of subs) {
        expect(s.status).toBe("unsubmitted")
        expect(s.timestamp).toBeNull()
        expect(s.attempts).toBe(1)
        expect(typeof s.lastError).toBe("string")
        // Dropped connections fail at once: the error is the connection's, not the HTTP timeout's.
        expect(s.lastError).not.toMatch(/timed out/)
        expect(s.submittedAt).toBeNull()
      }
      expect(await run(calendarsProbe)).toBe("degraded")
      const health = await run(Effect.flatMap(HealthChecks, (h) => h.run))
      expect(health.ok).toBe(true) // degraded is not unhealthy

      const checkNoProof = async () => {
        for (const a of await run(reload(ids))) {
          expect(a.level).toBe("T1")
          expect(a.t2At).toBeNull()
          const v = (await run(view(a)))!
          expect(v.day.id).toBe(out.dailyRootId)
          expect(v.calendarTimestamp).toBeUndefined()
          expect(await run(Effect.flatMap(Evidence, (e) => e.otsAvailable(a)))).toBe(false)
          expect("t2" in (await run(Effect.flatMap(Evidence, (e) => e.bundle(a))))).toBe(false)
        }
      }
      await checkNoProof()

      // still down: the upgrader retries, nothing changes
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      const again = await run(submissionsOf(out.dailyRootId))
      expect(again.map((s) => [s.status, s.attempts])).toEqual([["unsubmitted", 2], ["unsubmitted", 2]])
      await checkNoProof()
      expect(calA.submissions).toBe(subsA)
      expect(calB.submissions).toBe(subsB)
      await invariants(ctx)

      // back up: the next pass submits to both
      calA.setDown(false)
      calB.setDown(false)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      expect(calA.submissions).toBe(subsA + 1)
      expect(calB.submissions).toBe(subsB + 1)
      const up = await run(submissionsOf(out.dailyRootId))
      for (const s of up) {
        expect(s.status).toBe("pending")
        expect(s.attempts).toBe(3)
        expect(s.lastError).toBeNull()
        expect(s.timestamp).not.toBeNull()
      }
      expect(await run(calendarsProbe)).toBe("ok")
      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T1")
        expect(await run(Effect.flatMap(Evidence, (e) => e.otsAvailable(a)))).toBe(true)
      }

      const block = calA.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block.height)
        await checkT2Evidence(ctx, a, { dailyRoot: day.root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calA.url, calB.url] })
      }
      expect(await run(t2Events(atts.map((a) => a.seq)))).toEqual([1, 1])
      await invariants(ctx)
    })

    it("health: the calendars probe stays degraded after an upgrade pass while every calendar is still down", async () => {
      const ctx = await setup()
      const { run } = ctx
      await run(attest(1))
      await run(seal)
      calA.setDown(true)
      calB.setDown(true)
      expect(anchored(await run(anchor)).submitted).toBe(0)
      expect(await run(calendarsProbe)).toBe("degraded")
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 }) // resubmission fails again: no calendar holds the day
      expect(await run(calendarsProbe)).toBe("degraded")
      calA.setDown(false)
      calB.setDown(false)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      expect(await run(calendarsProbe)).toBe("ok")
    })

    it("one calendar down, the other up: the day is submitted (proof available) and confirms through the live one", async () => {
      const ctx = await setup()
      const { run } = ctx
      const atts = await run(attest(2))
      const ids = atts.map((a) => a.id)
      await run(seal)
      calA.setDown(true)
      const out = anchored(await run(anchor))
      expect(out.submitted).toBe(1)
      const subs = await run(submissionsOf(out.dailyRootId))
      const a0 = subs.find((s) => s.calendarUrl === calA.url)!
      const b0 = subs.find((s) => s.calendarUrl === calB.url)!
      expect([a0.status, a0.attempts, a0.timestamp]).toEqual(["unsubmitted", 1, null])
      expect(typeof a0.lastError).toBe("string")
      expect([b0.status, b0.attempts, b0.lastError]).toEqual(["pending", 1, null])
      expect(await run(calendarsProbe)).toBe("ok") // a day counts as submitted when one calendar answered

      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T1")
        expect(await run(Effect.flatMap(Evidence, (e) => e.otsAvailable(a)))).toBe(true)
        const v = (await run(view(a)))!
        const file = parseOts(await run(Effect.map(AnchorProofs, (p) => p.otsFile(a, v))))
        expect(file.fileDigest).toBe(a.hashHex)
        expect(file.complete).toBe(false)
        expect(file.attestations.map((x) => `${x.kind}:${x.uri}`)).toEqual([`pending:${calB.url}`])
      }

      const block = calB.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 }) // A still down: its retry fails, B confirms
      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block.height)
        await checkT2Evidence(ctx, a, { dailyRoot: (await run(dayOf(out.dailyRootId))).root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calB.url] })
      }
      const after = await run(submissionsOf(out.dailyRootId))
      expect(after.find((s) => s.calendarUrl === calA.url)!).toMatchObject({ status: "unsubmitted", attempts: 2 })
      expect(after.find((s) => s.calendarUrl === calB.url)!.status).toBe("confirmed")
      expect(await run(t2Events(atts.map((a) => a.seq)))).toEqual([1, 1])
      await invariants(ctx)
    })

    it("header sources over HTTP: they disagree → stays T1, healthz bitcoin degraded with the reason; a source down → stays T1; once they agree → T2", async () => {
      const ctx = await setup()
      const { run } = ctx
      const atts = await run(attest(2))
      const ids = atts.map((a) => a.id)
      await run(seal)
      const out = anchored(await run(anchor))
      const block = calA.mine()
      const health = Effect.flatMap(HealthChecks, (h) => h.run)
      const bitcoinTier = Effect.map(Effect.flatMap(HealthChecks, (h) => Effect.sync(() => h.tiers())), (t) => (t.T2 as any).bitcoin)
      expect(await run(health)).toMatchObject({ checks: { bitcoin: "ok" } })

      srcB.setLying(true)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      for (const a of await run(reload(ids))) expect(a.level).toBe("T1")
      expect((await run(dayOf(out.dailyRootId))).bitcoinHeader).toBeNull()
      const h1 = await run(health)
      expect(h1.checks.bitcoin).toBe("degraded")
      expect(h1.ok).toBe(true)
      const detail = await run(bitcoinTier)
      expect(detail.sources).toEqual([srcA.url, srcB.url])
      expect(detail.last_error).toMatch(/disagree/)
      expect(await run(Effect.flatMap(Evidence, (e) => e.bundle((atts[0]!))))).not.toHaveProperty("t2")

      srcB.setLying(false)
      srcB.setDown(true)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 }) // every source must answer
      expect((await run(health)).checks.bitcoin).toBe("degraded")
      for (const a of await run(reload(ids))) expect(a.level).toBe("T1")

      srcB.setDown(false)
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      expect((await run(health)).checks.bitcoin).toBe("ok")
      expect((await run(bitcoinTier)).last_error).toBeNull()
      const day = await run(dayOf(out.dailyRootId))
      expect(day.bitcoinHeader).toBe(chain.headers().get(day.bitcoinHeight!)!.header)
      for (const a of await run(reload(ids))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block.height)
        await checkT2Evidence(ctx, a, { dailyRoot: day.root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calA.url, calB.url] })
      }
      await invariants(ctx)
    })

    it("a calendar slower than the HTTP timeout stalls no other: the fast one is recorded at once, the slow one fails after the timeout", async () => {
      const TIMEOUT = 1_000
      const ctx = await setup((urls) => layerHttp({ urls, timeoutMs: TIMEOUT }))
      const { run } = ctx
      const atts = await run(attest(2))
      await run(seal)
      calA.setSlow(20_000)
      const answeredByA = calA.submissions

      let settled = false
      const pending = run(anchor).finally(() => {
        settled = true
      })
      const rowsOf = () =>
        run(Effect.orDie(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ calendar_url: string; status: string; last_error: string | null }>`SELECT calendar_url, status, last_error FROM calendar_submissions`)))
      const atFast = await poll("the fast calendar's submission", () =>
        rowsOf().then((rows) => rows.find((r) => r.calendar_url === calB.url)?.status === "pending" ? rows : undefined), 5_000, 10)
      // Recorded while the slow one is still being waited for: it has neither an answer nor a timeout yet.
      expect(settled).toBe(false)
      const slowAtFast = atFast.find((r) => r.calendar_url === calA.url)
      expect(slowAtFast?.status ?? "unsubmitted").toBe("unsubmitted")
      expect(slowAtFast?.last_error ?? null).toBeNull()
      const out = anchored(await pending)
      expect(out.submitted).toBe(1)
      const subs = await run(submissionsOf(out.dailyRootId))
      const slow = subs.find((s) => s.calendarUrl === calA.url)!
      expect(slow.status).toBe("unsubmitted")
      expect(slow.lastError).toMatch(/timed out/)
      expect(subs.find((s) => s.calendarUrl === calB.url)!.status).toBe("pending")

      // the upgrade pass (which retries the slow one, bounded by the timeout) confirms through the fast one
      // The slow calendar (20 s) answered neither attempt: both ended at the 1 s timeout.
      const block = calB.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      expect(calA.submissions).toBe(answeredByA)
      for (const a of await run(reload(atts.map((x) => x.id)))) {
        expect(a.level).toBe("T2")
        expect(a.t2Block).toBe(block.height)
      }
      await invariants(ctx)
    })

    it("race: an upgrade pass resubmitting a day whose first submission is still in flight; the late answer must not undo the confirmed proof", async () => {
      const ctx = await setup()
      const { run } = ctx
      const [a0] = await run(attest(1))
      await run(seal)
      calB.setDown(true)
      calA.setSlow(2_500) // the anchorer's submission to A is answered 2.5 s later
      const subsA = calA.submissions
      let settled = false
      const inFlight = run(anchor).finally(() => {
        settled = true
      })
      await poll("the daily root to be created", () =>
        run(Effect.orDie(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM daily_roots`)))
          .then((rows) => Number(rows[0]?.n) === 1), 5_000, 10)
      await sleep(500) // the anchorer's request has reached A and is being held
      calA.setSlow(0)
      // The upgrader (its own loop, or another instance) sees A still "unsubmitted" and submits again; a block confirms that one.
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 0 })
      const block = calA.mine()
      expect(await run(upgrade)).toEqual({ open: 1, confirmed: 1 })
      const [t2] = await run(reload([a0!.id]))
      expect(t2!.level).toBe("T2")
      // Now the anchorer's first submission is answered and recorded.
      expect(settled).toBe(false)
      const out = anchored(await inFlight)
      expect(calA.submissions).toBe(subsA + 2) // the day was submitted twice to A
      expect((await run(dayOf(out.dailyRootId))).status).toBe("confirmed")
      // The served proof of a T2 attestation must still reach its block ...
      await checkT2Evidence(ctx, t2!, { dailyRoot: (await run(dayOf(out.dailyRootId))).root, height: block.height, merkleRoot: block.merkleRoot, pendingUris: [calA.url] })
      // ... and the stored submission must stay the confirmed one.
      const subA = (await run(submissionsOf(out.dailyRootId))).find((s) => s.calendarUrl === calA.url)!
      expect(subA.status).toBe("confirmed")
      await invariants(ctx)
    })

    it("default wiring (10 s timeout): a slow calendar still answering does not delay recording the fast one", async () => {
      const ctx = await setup()
      const { run } = ctx
      await run(attest(1))
      await run(seal)
      calB.setSlow(2_000)
      let settled = false
      const pending = run(anchor).finally(() => {
        settled = true
      })
      await poll("the fast calendar's submission", () =>
        run(Effect.orDie(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ status: string }>`SELECT status FROM calendar_submissions WHERE calendar_url = ${calA.url}`))).then((rows) =>
          rows[0]?.status === "pending"
        ), 5_000, 10)
      expect(settled).toBe(false) // recorded while the slow one is still being waited for
      const out = anchored(await pending)
      // The slow one was waited for (2 s is within the 10 s timeout) and answered.
      expect(out.submitted).toBe(2)
      expect((await run(submissionsOf(out.dailyRootId))).map((s) => s.status)).toEqual(["pending", "pending"])
      await invariants(ctx)
    })
  })
}
