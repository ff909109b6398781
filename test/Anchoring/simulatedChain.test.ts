/**
 * The demo instance's simulated Bitcoin chain, through a real server on both
 * stores: T2 bundles carry a real 80-byte header (checked with the portable
 * codec and cross-checked against the `.ots` proof replayed by the
 * `opentimestamps` package); the chain is served over the Esplora endpoints
 * (asked here through the production header-source adapter, over HTTP); and it
 * lives in the database, so a restart keeps both the chain and the calendar's
 * pending submissions.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { SCOPES } from "../../src/Auth/Domain.js"
import { blockHash, headerBytes, meetsTarget, parseHeader, REGTEST_BITS } from "../../src/Domain/BitcoinHeader.js"
import { startServer } from "../../src/main.js"
import { BitcoinHeaderSources, layerEsplora } from "../../src/Platform/Bitcoin/HeaderSources.js"
import { SIMULATED_GENESIS_PREV, SIMULATED_START_HEIGHT } from "../../src/Platform/Calendar/SimulatedCalendar.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { client } from "../helpers/server.js"
import { parseOts, poll, randomHash } from "../helpers/anchoring.js"

const demoConfig = (db: TestDatabase) =>
  AppConfig.make({
    databaseUrl: db.url,
    dataDir: db.dataDir,
    port: 0,
    sealInterval: Duration.millis(200),
    anchorInterval: Duration.millis(500),
    otsUpgradeInterval: Duration.millis(200),
    // long enough that the second submission is still pending when the server stops
    demoConfirmDelay: Duration.millis(1500)
  })

type Server = Awaited<ReturnType<typeof startServer>>

const keyOn = async (server: Server) => {
  const created = await server.runtime.runPromise(
    Effect.flatMap(ApiKeyRepo, (r) =>
      r.create({ label: "t", scopes: [...SCOPES], orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null }))
  )
  return created.secret
}

const levelOf = async (base: string, id: string) => (await client(base).get(`/v1/attestation/${id}/status`)).body as {
  level: string
  t2_bitcoin_block: number | null
  ots_available: boolean
}

/** Checks a T2 bundle's header against its own .ots and the codec; returns the header. */
const checkBundle = async (base: string, id: string, hash: string) => {
  const evidence = (await client(base).get(`/v1/attestation/${id}/evidence`)).body
  expect(evidence.level).toBe("T2")
  const t2 = evidence.t2
  expect(t2.simulated).toBe(true)
  expect(t2.bitcoinBlockHash).toBeNull()
  expect(t2.bitcoinTxid).toBeNull()
  expect(t2.bitcoinBlockHeader).toMatch(/^[0-9a-f]{160}$/)
  const fields = parseHeader(t2.bitcoinBlockHeader)
  expect(fields.bits).toBe(REGTEST_BITS)
  expect(meetsTarget(headerBytes(t2.bitcoinBlockHeader))).toBe(true)
  // the independent package replays the .ots to the Bitcoin attestation's message: the header's merkle root
  const ots = parseOts(Buffer.from(t2.otsProof, "base64"))
  expect(ots.fileDigest).toBe(hash)
  const btc = ots.attestations.filter((a) => a.kind === "bitcoin")
  expect(btc).toEqual([{ kind: "bitcoin", height: t2.bitcoinBlockHeight, msg: fields.merkleRoot }])
  // a header byte changed no longer matches
  const tampered = t2.bitcoinBlockHeader.slice(0, 100) + (t2.bitcoinBlockHeader[100] === "0" ? "1" : "0") + t2.bitcoinBlockHeader.slice(101)
  expect(parseHeader(tampered).merkleRoot).not.toBe(btc[0]!.msg)

  const anchor = (await client(base).get(`/v1/attestation/${id}/ots`)).body
  expect(anchor.bitcoin_block_header).toBe(t2.bitcoinBlockHeader)
  expect(anchor.bitcoin_merkle_root).toBe(fields.merkleRoot)
  return { height: t2.bitcoinBlockHeight as number, header: t2.bitcoinBlockHeader as string }
}

for (const dialect of await dialects()) {
  describe(`simulated chain of the demo instance (${dialect})`, () => {
    const cleanup: Array<() => Promise<void>> = []
    afterEach(async () => {
      for (const f of cleanup.splice(0).reverse()) await f()
    })

    it("T2 bundles carry a real header; Esplora endpoints over HTTP agree; a restart keeps the chain and a pending submission", async () => {
      const db = await createDatabase(dialect)
      cleanup.push(() => db.drop())
      const config = demoConfig(db)
      let server = await startServer(config)
      cleanup.push(() => server.close())
      const key = await keyOn(server)

      const h1 = randomHash()
      const id1 = (await client(server.url, key).post("/v1/attest", { hash_hex: h1 })).body.id as string
      await poll(`${id1} at T2`, async () => (await levelOf(server.url, id1)).level === "T2", 30_000, 100)
      const first = await checkBundle(server.url, id1, h1)
      expect(first.height).toBeGreaterThanOrEqual(SIMULATED_START_HEIGHT)

      // the Esplora endpoints, asked by the production adapter with two sources (same chain → they agree)
      const base = `${server.url}/v1/simulated-chain`
      const esplora = await Effect.runPromise(
        Effect.flatMap(BitcoinHeaderSources, (s) => s.header(first.height)).pipe(Effect.provide(layerEsplora({ sources: [base, `${server.url}/simulated-chain`] })))
      )
      expect(esplora).toEqual({ hash: blockHash(headerBytes(first.header)), header: first.header })
      const byHeight = await fetch(`${base}/block-height/${first.height}`)
      expect(byHeight.headers.get("content-type")).toMatch(/^text\/plain/)
      expect(await byHeight.text()).toBe(esplora.hash)
      expect((await client(server.url).get(`/v1/simulated-chain/block-height/${first.height + 1000}`)).status).toBe(404)
      expect((await client(server.url).get(`/v1/simulated-chain/block/${"ab".repeat(32)}/header`)).status).toBe(404)
      expect((await client(server.url).get(`/v1/simulated-chain/block-height/x`)).status).toBe(400)

      // a second attestation submitted to the simulated calendar, still pending when the server stops
      const h2 = randomHash()
      const id2 = (await client(server.url, key).post("/v1/attest", { hash_hex: h2 })).body.id as string
      await poll(`${id2} submitted`, async () => (await levelOf(server.url, id2)).ots_available, 30_000, 50)
      const pendingBefore = await server.runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM simulated_submissions WHERE height IS NULL`))
      await server.close()
      expect(Number(pendingBefore[0]!.n)).toBeGreaterThanOrEqual(1)

      server = await startServer(config)
      await poll(`${id2} at T2 after restart`, async () => (await levelOf(server.url, id2)).level === "T2", 30_000, 100)
      const second = await checkBundle(server.url, id2, h2)
      expect(second.height).toBeGreaterThan(first.height)

      // one chain across the restart: consecutive heights, each header chained to the previous block
      const list = (await client(server.url).get("/v1/simulated-chain/headers")).body
      expect(list.simulated).toBe(true)
      expect(list.note).toMatch(/SIMULATED/)
      const headers = list.headers as Array<{ height: number; hash: string; header: string }>
      expect(headers.map((h) => h.height)).toEqual(headers.map((_, i) => headers[0]!.height + i))
      expect(headers[0]!.height).toBe(SIMULATED_START_HEIGHT)
      headers.forEach((h, i) => {
        expect(blockHash(headerBytes(h.header))).toBe(h.hash)
        expect(meetsTarget(headerBytes(h.header))).toBe(true)
        expect(parseHeader(h.header).prevBlockHash).toBe(i === 0 ? SIMULATED_GENESIS_PREV : headers[i - 1]!.hash)
      })
      expect(headers.find((h) => h.height === first.height)?.header).toBe(first.header)
      expect(headers.find((h) => h.height === second.height)?.header).toBe(second.header)
    })

    it("outside the simulated calendar the simulated-chain endpoints are 404", async () => {
      const db = await createDatabase(dialect)
      cleanup.push(() => db.drop())
      const server = await startServer({ ...demoConfig(db), otsCalendars: ["http://127.0.0.1:9/calendar"] })
      cleanup.push(() => server.close())
      for (const path of ["/v1/simulated-chain/headers", `/v1/simulated-chain/block-height/${SIMULATED_START_HEIGHT}`]) {
        const r = await client(server.url).get(path)
        expect(r.status).toBe(404)
        expect(r.body).toMatchObject({ error: true, code: "NOT_FOUND" })
      }
    })
  })
}
