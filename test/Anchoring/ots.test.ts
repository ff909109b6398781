/**
 * T2 through a real server (HTTP on loopback, background workers running, real
 * time, bounded polling): an attestation climbs T0 → T1 → T2; the /ots
 * endpoints (CONTRACT §3) and the downloaded `.ots` file, checked with the
 * independent `opentimestamps` package and against the simulated chain.
 */
import { Duration, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Anchorer } from "../../src/Anchoring/Anchorer.js"
import { bitcoinAttestations, bytesToHex, parseDetachedFile } from "../../src/Domain/Ots.js"
import { SIMULATED_CALENDAR_URL, SIMULATED_START_HEIGHT } from "../../src/Platform/Calendar/SimulatedCalendar.js"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { parseHeader } from "../../src/Domain/BitcoinHeader.js"
import { Sealer } from "../../src/Sealing/Sealer.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, startTestServer, type TestServer } from "../helpers/server.js"
import { HEX64, parseOts, poll, randomHash, rootFromProof, WIRE_TIME } from "../helpers/anchoring.js"

const OTS_TYPE = "application/vnd.opentimestamps.v1"
const CONTRACT_OTS_FIELDS = ["bitcoin_block_height", "calendars", "confirmed_at", "daily_root", "id", "status", "t1_to_t2_proof"]

const FAST = {
  sealInterval: Duration.millis(300),
  anchorInterval: Duration.seconds(1),
  otsUpgradeInterval: Duration.millis(300)
}

const proofOf = async (base: string, id: string) => {
  const res = await fetch(`${base}/v1/attestation/${id}/ots/proof`)
  const bytes = new Uint8Array(await res.arrayBuffer())
  return { status: res.status, headers: res.headers, bytes }
}

const statusOf = async (base: string, id: string) => {
  const r = await client(base).get(`/v1/attestation/${id}/status`)
  expect(r.status).toBe(200)
  return r.body as {
    level: string
    t1_timestamp: string | null
    t2_timestamp: string | null
    t2_bitcoin_block: number | null
    ots_available: boolean
    merkle_proof_available: boolean
  }
}

const levelReached = (base: string, id: string, level: "T1" | "T2") => async () => {
  const s = await statusOf(base, id)
  return s.level === level || (level === "T1" && s.level === "T2") ? s : undefined
}

/** The .ots checks shared by both calendar kinds. */
const checkOtsFile = (
  bytes: Uint8Array,
  hashHex: string,
  expected: { height: number; merkleRoot: string; pendingUri: string; dailyRoot: string }
) => {
  const theirs = parseOts(bytes)
  expect(theirs.messages).toContain(expected.dailyRoot)
  expect(theirs.hashOp).toBe("sha256")
  expect(theirs.fileDigest).toBe(hashHex)
  expect(theirs.reserialized).toBe(bytesToHex(bytes))
  expect(theirs.complete).toBe(true)
  expect(theirs.attestations.filter((a) => a.kind === "bitcoin")).toEqual([{ kind: "bitcoin", height: expected.height, msg: expected.merkleRoot }])
  expect(theirs.attestations.filter((a) => a.kind === "pending").map((a) => a.uri)).toEqual([expected.pendingUri])
  // our own parser agrees
  const ours = parseDetachedFile(bytes)
  expect(ours.fileHashOp).toBe("sha256")
  expect(bytesToHex(ours.digest)).toBe(hashHex)
  expect(bitcoinAttestations(ours.timestamp, ours.digest).map((b) => [b.height, bytesToHex(b.commitment)])).toEqual([
    [expected.height, expected.merkleRoot]
  ])
}

for (const dialect of await dialects()) {
  describe(`T2 over HTTP (${dialect})`, () => {
    let cal: SimulatedCalendarServer
    beforeAll(async () => {
      cal = await startSimulatedCalendarServer()
    })
    afterAll(async () => {
      await cal?.close()
    })

    it("climbs T0 → T1 → T2 after a block; /ots and /ots/proof are available (pending) before mining; the .ots verifies independently", async () => {
      const server = await startTestServer(dialect, { ...FAST, otsCalendars: [cal.url] })
      try {
        const { key } = await server.createKey()
        const api = client(server.url, key)
        const hashes = [randomHash(), randomHash(), randomHash()]
        const created = await api.post("/v1/attest/batch", { hashes })
        expect(created.status).toBe(200)
        const items = created.body.attestations as Array<{ id: string; hash_hex: string }>
        expect(items.map((i) => i.hash_hex).sort()).toEqual([...hashes].sort())
        // /ots first, status after: a T0 seen afterwards means it was T0 when /ots answered
        const early = await client(server.url).get(`/v1/attestation/${items[0]!.id}/ots`)
        const first = await statusOf(server.url, items[0]!.id)
        expect(["T0", "T1"]).toContain(first.level)
        if (first.level === "T0") expectEnvelope(early, 404, "NOT_FOUND")

        for (const item of items) await poll(`${item.id} at T1`, levelReached(server.url, item.id, "T1"), 10_000)
        // anchored at the next 1 s boundary; available once the calendar accepted the daily root
        const ots = new Map<string, any>()
        for (const item of items) {
          ots.set(item.id, await poll(`${item.id} submitted`, async () => {
            const r = await client(server.url).get(`/v1/attestation/${item.id}/ots`)
            return r.status === 200 && r.body.ots_available === true ? r.body : undefined
          }, 10_000))
        }
        const dailyRoot = ots.get(items[0]!.id).daily_root as string
        for (const item of items) {
          const body = ots.get(item.id)
          for (const k of CONTRACT_OTS_FIELDS) expect(k in body, k).toBe(true)
          expect(body.id).toBe(item.id)
          expect(body.status).toBe("pending")
          expect(body.daily_root).toBe(dailyRoot) // one batch → one day
          expect(body.daily_root).toMatch(HEX64)
          expect(body.bitcoin_block_height).toBeNull()
          expect(body.confirmed_at).toBeNull()
          expect(body.simulated).toBe(false)
          expect(body.calendars).toHaveLength(1)
          expect(body.calendars[0]).toMatchObject({ url: cal.url, status: "pending", last_error: null })
          expect(body.calendars[0].submitted_at).toMatch(WIRE_TIME)
          const merkle = (await client(server.url).get(`/v1/attestation/${item.id}/merkle`)).body
          expect(rootFromProof(item.hash_hex, merkle.merkle_proof)).toBe(merkle.merkle_root)
          expect(rootFromProof(merkle.merkle_root, body.t1_to_t2_proof)).toBe(body.daily_root)

          const s = await statusOf(server.url, item.id)
          expect(s.level).toBe("T1")
          expect(s.ots_available).toBe(true)
          expect(s.t2_timestamp).toBeNull()
          expect(s.t2_bitcoin_block).toBeNull()

          const proof = await proofOf(server.url, item.id)
          expect(proof.status).toBe(200)
          expect(proof.headers.get("content-type")).toBe(OTS_TYPE)
          expect(proof.headers.get("content-disposition")).toBe(`attachment; filename="${item.id}.ots"`)
          const pending = parseOts(proof.bytes)
          expect(pending.fileDigest).toBe(item.hash_hex)
          expect(pending.complete).toBe(false)
          expect(pending.attestations.map((a) => `${a.kind}:${a.uri}`)).toEqual([`pending:${cal.url}`])

          const evidence = (await client(server.url).get(`/v1/attestation/${item.id}/evidence`)).body
          expect(evidence.level).toBe("T1")
          expect("t2" in evidence).toBe(false)
        }

        const block = cal.mine()
        for (const item of items) await poll(`${item.id} at T2`, levelReached(server.url, item.id, "T2"), 10_000)
        const header = cal.blockHeaders().get(block.height)
        expect(header?.merkleRoot).toBe(block.merkleRoot)
        for (const item of items) {
          const s = await statusOf(server.url, item.id)
          expect(s.level).toBe("T2")
          expect(s.t2_bitcoin_block).toBe(block.height)
          expect(s.t2_timestamp).toMatch(WIRE_TIME)
          expect(s.ots_available).toBe(true)

          const body = (await client(server.url).get(`/v1/attestation/${item.id}/ots`)).body
          expect(body.status).toBe("confirmed")
          expect(body.daily_root).toBe(dailyRoot)
          expect(body.bitcoin_block_height).toBe(block.height)
          expect(body.bitcoin_merkle_root).toBe(block.merkleRoot)
          expect(body.confirmed_at).toBe(s.t2_timestamp)
          expect(body.calendars[0].status).toBe("confirmed")
          // the header, fetched from the calendar's Esplora endpoints (the test server's source)
          expect(body.bitcoin_block_header).toBe(header!.header)

          const proof = await proofOf(server.url, item.id)
          expect(proof.status).toBe(200)
          checkOtsFile(proof.bytes, item.hash_hex, { height: block.height, merkleRoot: header!.merkleRoot, pendingUri: cal.url, dailyRoot })

          const evidence = (await client(server.url).get(`/v1/attestation/${item.id}/evidence`)).body
          expect(evidence.level).toBe("T2")
          expect(evidence.t2.otsProof).toBe(Buffer.from(proof.bytes).toString("base64"))
          expect(evidence.t2.dailyRoot).toBe(dailyRoot)
          expect(evidence.t2.bitcoinBlockHeight).toBe(block.height)
          expect(evidence.t2.bitcoinBlockHash).toBeNull()
          expect(evidence.t2.bitcoinTxid).toBeNull()
          expect(evidence.t2.bitcoinBlockHeader).toBe(header!.header)
          expect(evidence.t2.t1ToT2Proof).toEqual(body.t1_to_t2_proof)
          expect("simulated" in evidence.t2).toBe(false)
        }

        const stats = (await client(server.url).get("/v1/stats")).body
        expect(stats.daily_roots).toBe(1)
        expect(stats.by_level).toMatchObject({ T0: 0, T1: 0, T2: 3 })
        const info = (await client(server.url).get("/v1/info")).body
        expect(info.features).toContain("t2_opentimestamps")
        expect(info.features).not.toContain("t2_simulated_calendar")
        expect(info.tiers.T2).toMatchObject({ calendars: [cal.url], simulated: false })
      } finally {
        await server.close()
      }
    })

    it("404 NOT_FOUND on /ots and /ots/proof while T0 and before anchoring; every calendar down → /ots pending without proof; back up → proof", async () => {
      // Windows of 24 h: the test drives sealing and anchoring itself through the server's services.
      const server: TestServer = await startTestServer(dialect, { otsCalendars: [cal.url] })
      try {
        const { key } = await server.createKey()
        const pub = client(server.url)
        const hash = randomHash()
        const created = await client(server.url, key).post("/v1/attest", { hash_hex: hash })
        expect(created.status).toBe(201)
        const id = created.body.id as string
        const notFoundBoth = async () => {
          const r = await pub.get(`/v1/attestation/${id}/ots`)
          expectEnvelope(r, 404, "NOT_FOUND")
          expectEnvelope(await pub.get(`/v1/attestation/${id}/ots/proof`), 404, "NOT_FOUND")
          expect((await statusOf(server.url, id)).ots_available).toBe(false)
        }
        expect((await statusOf(server.url, id)).level).toBe("T0")
        await notFoundBoth()
        expectEnvelope(await pub.get("/v1/attestation/att_AAAAAAAAAAAAAAAAAAAAAAAA/ots"), 404, "NOT_FOUND")
        expectEnvelope(await pub.get("/v1/attestation/att_AAAAAAAAAAAAAAAAAAAAAAAA/ots/proof"), 404, "NOT_FOUND")

        const sealed = await server.run(Effect.flatMap(Sealer, (s) => s.sealWindow(Date.now() + 1_000)))
        expect(sealed._tag).toBe("Sealed")
        expect((await statusOf(server.url, id)).level).toBe("T1")
        await notFoundBoth() // T1, not in a daily root yet

        cal.setDown(true)
        try {
          const out = await server.run(Effect.flatMap(Anchorer, (a) => a.anchorWindow(Date.now() + 2_000)))
          expect(out).toMatchObject({ _tag: "Anchored", batches: 1, submitted: 0 })
          const r = await pub.get(`/v1/attestation/${id}/ots`)
          expect(r.status).toBe(200)
          expect(r.body.status).toBe("pending")
          expect(r.body.ots_available).toBe(false)
          expect(r.body.calendars).toHaveLength(1)
          expect(r.body.calendars[0]).toMatchObject({ url: cal.url, status: "unsubmitted", attempts: 1, submitted_at: null })
          expect(typeof r.body.calendars[0].last_error).toBe("string")
          expectEnvelope(await pub.get(`/v1/attestation/${id}/ots/proof`), 404, "NOT_FOUND")
          expect((await statusOf(server.url, id)).ots_available).toBe(false)
          const health = await pub.get("/v1/healthz")
          expect(health.status).toBe(200) // degraded, not unhealthy
          expect(health.body.checks.calendars).toBe("degraded")
        } finally {
          cal.setDown(false)
        }

        expect(await server.run(Effect.flatMap(Anchorer, (a) => a.upgradeOnce))).toEqual({ open: 1, confirmed: 0 })
        const proof = await proofOf(server.url, id)
        expect(proof.status).toBe(200)
        expect(parseOts(proof.bytes).fileDigest).toBe(hash)
        expect((await statusOf(server.url, id)).ots_available).toBe(true)
        expect((await pub.get("/v1/healthz")).body.checks.calendars).toBe("ok")
      } finally {
        await server.close()
      }
    })

    it("demo path, no calendars configured: the in-process simulated calendar confirms by itself; /v1/info and /ots say simulated", async () => {
      const server = await startTestServer(dialect, { ...FAST, demoConfirmDelay: Duration.millis(500) })
      try {
        const { key } = await server.createKey()
        const hash = randomHash()
        const created = await client(server.url, key).post("/v1/attest", { hash_hex: hash })
        expect(created.status).toBe(201)
        const id = created.body.id as string
        const s = await poll(`${id} at T2`, levelReached(server.url, id, "T2"), 15_000, 100)
        expect(s.t2_bitcoin_block).toBeGreaterThanOrEqual(SIMULATED_START_HEIGHT)
        // the demo chain lives in the server's database; its header rides in /ots and the evidence
        const chainList = (await client(server.url).get("/v1/simulated-chain/headers")).body
        const block = (chainList.headers as Array<{ height: number; header: string }>).find((b) => b.height === s.t2_bitcoin_block)
        expect(block).toBeDefined()
        const header = { merkleRoot: parseHeader(block!.header).merkleRoot }

        const info = (await client(server.url).get("/v1/info")).body
        expect(info.mode).toBe("demo")
        expect(info.features).toContain("t2_simulated_calendar")
        expect(info.tiers.T2).toMatchObject({ calendars: [SIMULATED_CALENDAR_URL], simulated: true })
        expect(info.tiers.T2.note).toMatch(/SIMULATED/)

        const ots = (await client(server.url).get(`/v1/attestation/${id}/ots`)).body
        expect(ots.status).toBe("confirmed")
        expect(ots.simulated).toBe(true)
        expect(ots.note).toMatch(/SIMULATED/)
        expect(ots.bitcoin_block_height).toBe(s.t2_bitcoin_block)
        expect(ots.bitcoin_merkle_root).toBe(header.merkleRoot)
        expect(ots.bitcoin_block_header).toBe(block!.header)
        expect(ots.calendars.map((c: { url: string }) => c.url)).toEqual([SIMULATED_CALENDAR_URL])

        const proof = await proofOf(server.url, id)
        expect(proof.status).toBe(200)
        expect(proof.headers.get("content-type")).toBe(OTS_TYPE)
        checkOtsFile(proof.bytes, hash, {
          height: s.t2_bitcoin_block!,
          merkleRoot: header.merkleRoot,
          pendingUri: SIMULATED_CALENDAR_URL,
          dailyRoot: ots.daily_root
        })

        const evidence = (await client(server.url).get(`/v1/attestation/${id}/evidence`)).body
        expect(evidence.level).toBe("T2")
        expect(evidence.t2.simulated).toBe(true)
        expect(evidence.t2.otsProof).toBe(Buffer.from(proof.bytes).toString("base64"))
      } finally {
        await server.close()
      }
    })
  })
}
