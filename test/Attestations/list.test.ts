/**
 * GET /v1/attestations (the calling key's own live claims, newest first, cursor-paginated)
 * on both stores: isolation between keys, pages without duplicates or gaps, the level and
 * time filters, 403 without metadata:read, 400 on a bad cursor or limit; and the client
 * SDK's listAttestations and `attestd list` over it.
 */
import { Duration, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createClient } from "../../src/Client/Client.js"
import { Sealer } from "../../src/Sealing/Sealer.js"
import { cliInProcess } from "../helpers/cli.js"
import { dialects } from "../helpers/databases.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

interface Item {
  readonly id: string
  readonly hash_hex: string
  readonly level: string
  readonly timestamp: string
  readonly source: string | null
}

for (const dialect of await dialects()) {
  describe(`GET /v1/attestations (${dialect})`, () => {
    let server: TestServer
    let keyA: string
    let keyB: string
    /** A's attestations, oldest first. */
    const ownA: Array<{ id: string; hash_hex: string }> = []
    let shared: string
    let deletedId: string
    let sealedIds: Set<string>

    /** Every page of `query` for `key`, following next_cursor. */
    const allPages = async (key: string, query: string, limit: number, from: string | null = null): Promise<{ items: Array<Item>; pages: number }> => {
      const items: Array<Item> = []
      let cursor: string | null = from
      let pages = 0
      do {
        const r: { status: number; text: string; body: any } = await client(server.url, key).get(`/v1/attestations?limit=${limit}${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`)
        expect(r.status, r.text).toBe(200)
        expect(r.body.attestations.length).toBeLessThanOrEqual(limit)
        items.push(...r.body.attestations)
        cursor = r.body.next_cursor
        pages++
      } while (cursor !== null)
      return { items, pages }
    }

    beforeAll(async () => {
      // Sealed only when the test says so.
      server = await startTestServer(dialect, { sealInterval: Duration.hours(24) })
      keyA = (await server.createKey({ scopes: ["attest", "metadata:read", "metadata:write"] })).key
      keyB = (await server.createKey({ scopes: ["attest", "metadata:read"] })).key
      const a = client(server.url, keyA)
      const b = client(server.url, keyB)
      // one at a time: distinct timestamps for the time filters
      for (let i = 0; i < 8; i++) {
        const r = await a.post("/v1/attest", { hash_hex: randomHash(), source: `a-${i}` })
        expect(r.status, r.text).toBe(201)
        ownA.push({ id: r.body.id, hash_hex: r.body.hash_hex })
      }
      const sealed = await server.run(Effect.flatMap(Sealer, (s) => s.sealWindow(Date.now() + 1_000)))
      expect(sealed._tag).toBe("Sealed")
      sealedIds = new Set(ownA.map((x) => x.id))
      // a batch: one timestamp for many (ties broken by seq)
      const batch = await a.post("/v1/attest/batch", { hashes: Array.from({ length: 9 }, randomHash), source: "a-batch" })
      expect([200, 201], batch.text).toContain(batch.status)
      for (const x of batch.body.attestations) ownA.push({ id: x.id, hash_hex: x.hash_hex })
      // B holds its own claim on one of A's attestations, and attestations of its own
      shared = ownA[2]!.hash_hex
      expect((await b.post("/v1/attest", { hash_hex: shared, source: "b-shared" })).status).toBeLessThan(300)
      for (let i = 0; i < 3; i++) expect((await b.post("/v1/attest", { hash_hex: randomHash(), source: `b-${i}` })).status).toBe(201)
      // A gives up one claim: it is no longer listed for A
      deletedId = ownA[5]!.id
      expect((await a.delete(`/v1/attestation/${deletedId}/metadata`)).status).toBe(200)
    }, 60_000)

    afterAll(async () => {
      await server?.close()
    })

    it("lists only the caller's own live claims, newest first, every page within the limit, without duplicates or gaps", async () => {
      const expected = ownA.filter((x) => x.id !== deletedId)
      for (const limit of [1, 4, 7, 100]) {
        const { items, pages } = await allPages(keyA, "", limit)
        expect(items.map((x) => x.id).sort()).toEqual(expected.map((x) => x.id).sort())
        expect(new Set(items.map((x) => x.id)).size).toBe(items.length)
        expect(pages).toBe(Math.max(1, Math.ceil(expected.length / limit)))
        const stamps = items.map((x) => x.timestamp)
        expect([...stamps].sort().reverse()).toEqual(stamps)
      }
      const first = (await client(server.url, keyA).get("/v1/attestations")).body
      expect(first.next_cursor).toBeNull()
      expect(Object.keys(first.attestations[0]).sort()).toEqual(["hash_hex", "id", "level", "source", "timestamp"])
      expect(first.attestations.find((x: Item) => x.hash_hex === shared).source).toBe("a-2")
    })

    it("another key sees its own claims only, with its own source", async () => {
      const { items } = await allPages(keyB, "", 2)
      expect(items).toHaveLength(4)
      expect(items.find((x) => x.hash_hex === shared)?.source).toBe("b-shared")
      expect(items.some((x) => ownA.some((a) => a.id === x.id && a.hash_hex !== shared))).toBe(false)
    })

    it("a page stays stable while more is attested: the next page neither repeats nor skips", async () => {
      const a = client(server.url, keyA)
      const page1 = (await a.get("/v1/attestations?limit=5")).body
      const added = await a.post("/v1/attest", { hash_hex: randomHash() })
      const rest = await allPages(keyA, "", 5, page1.next_cursor)
      const ids = [...page1.attestations.map((x: Item) => x.id), ...rest.items.map((x) => x.id)]
      expect(ids).not.toContain(added.body.id) // newer than the first page: on a fresh listing only
      expect(new Set(ids).size).toBe(ids.length)
      expect(ids.length).toBe(ownA.length - 1)
      expect((await a.get("/v1/attestations?limit=1")).body.attestations[0].id).toBe(added.body.id)
      ownA.push({ id: added.body.id, hash_hex: added.body.hash_hex })
    })

    it("filters by level and by time (from inclusive, to exclusive)", async () => {
      const t1 = await allPages(keyA, "&level=T1", 3)
      expect(new Set(t1.items.map((x) => x.id))).toEqual(new Set([...sealedIds].filter((id) => id !== deletedId)))
      expect(t1.items.every((x) => x.level === "T1")).toBe(true)
      const t0 = await allPages(keyA, "&level=T0", 3)
      expect(t0.items.every((x) => x.level === "T0" && !sealedIds.has(x.id))).toBe(true)
      expect(t0.items.length + t1.items.length).toBe(ownA.length - 1)
      expect((await allPages(keyA, "&level=T2", 3)).items).toEqual([])

      const all = (await allPages(keyA, "", 1000)).items
      const oldestFirst = [...all].reverse()
      const from = oldestFirst[2]!.timestamp
      const to = oldestFirst[5]!.timestamp
      const ranged = (await allPages(keyA, `&from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`, 2)).items
      expect(ranged.map((x) => x.id)).toEqual(all.filter((x) => x.timestamp >= from && x.timestamp < to).map((x) => x.id))
      expect(ranged.length).toBeGreaterThanOrEqual(3)
      // the same instant written as ISO 8601 with Z (milliseconds) selects the same start
      const fromZ = `${from.slice(0, 23)}Z`
      const sinceZ = (await allPages(keyA, `&from=${encodeURIComponent(fromZ)}`, 50)).items
      expect(sinceZ.every((x) => x.timestamp >= `${from.slice(0, 23)}000+00:00`)).toBe(true)
      expect((await allPages(keyA, `&level=T1&from=${encodeURIComponent(to)}`, 50)).items.every((x) => x.level === "T1" && x.timestamp >= to)).toBe(true)
    })

    it("403 without metadata:read (metadata:write implies it), 401 without a key", async () => {
      const attestOnly = (await server.createKey({ scopes: ["attest"] })).key
      const denied = await client(server.url, attestOnly).get("/v1/attestations")
      expect(denied.status).toBe(403)
      expect(denied.body).toMatchObject({ error: true, code: "FORBIDDEN" })
      const writer = (await server.createKey({ scopes: ["metadata:write"] })).key
      const allowed = await client(server.url, writer).get("/v1/attestations")
      expect(allowed.status, allowed.text).toBe(200)
      expect(allowed.body).toEqual({ attestations: [], next_cursor: null })
      expect((await client(server.url).get("/v1/attestations")).status).toBe(401)
    })

    it("400 on a bad cursor, limit, level or time", async () => {
      const a = client(server.url, keyA)
      const forged = Buffer.from("v1:not-a-time|5").toString("base64url")
      for (const q of [
        "cursor=garbage!",
        "cursor=AAAA",
        `cursor=${forged}`,
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=-1",
        "limit=2.5",
        "level=T3",
        "from=yesterday",
        "to=2026-13-01T00:00:00Z"
      ]) {
        const r = await a.get(`/v1/attestations?${q}`)
        expect(r.status, q).toBe(400)
        expect(r.body, q).toMatchObject({ error: true, code: "VALIDATION_ERROR" })
      }
    })

    it("the client SDK and attestd list page through the same listing", async () => {
      const sdk = createClient({ baseUrl: server.url, apiKey: keyA })
      const page = await sdk.listAttestations({ limit: 3, level: "T1" })
      expect(page.attestations).toHaveLength(3)
      const next = await sdk.listAttestations({ limit: 3, level: "T1", cursor: page.next_cursor! })
      expect(next.attestations.map((x) => x.id)).not.toContain(page.attestations[0]!.id)

      const run = await cliInProcess(["list", "--server", server.url, "--limit", "4"], { ATTESTD_API_KEY: keyA })
      expect(run.code, run.stderr).toBe(0)
      const out = JSON.parse(run.stdout)
      expect(out.attestations).toHaveLength(ownA.length - 1)
      expect(out.attestations.map((x: Item) => x.id)).toEqual((await allPages(keyA, "", 100)).items.map((x) => x.id))
      const one = await cliInProcess(["list", "--server", server.url, "--level", "T1", "--limit", "2", "--max", "2"], { ATTESTD_API_KEY: keyA })
      expect(one.code, one.stderr).toBe(0)
      expect(JSON.parse(one.stdout).attestations).toHaveLength(2)
      expect(JSON.parse(one.stdout).next_cursor).toEqual(expect.any(String))
      const denied = await cliInProcess(["list", "--server", server.url], { ATTESTD_API_KEY: (await server.createKey({ scopes: ["attest"] })).key })
      expect(denied.code).toBe(1)
      expect(denied.stderr.trim().split("\n")).toHaveLength(1)
      expect(denied.stderr).toMatch(/metadata:read/)
    })
  })
}
