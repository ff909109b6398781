/**
 * Organisation inventory over the real server (spec 1.6, 2.13, 4.9, 5.3, 8;
 * CONTRACT §3, §5): the scan (scope scan, key with org_id, server-side maximum,
 * 5 scans per hour per key) and the inventory stats (scope batch, key with org_id).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { attestWith } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { allKeys, client, expectEnvelope, randomHash, startTestServer, type TestServer, WIRE_TIME } from "../helpers/server.js"

type Api = ReturnType<typeof client>

interface ClaimRow {
  readonly id: number
  readonly created_at: string
  readonly source: string | null
  readonly api_key_id: string
  readonly deleted_at: string | null
}

/** Every claim on `hash`, oldest first, straight from the table. */
const claimsOf = (server: TestServer, hash: string): Promise<Array<ClaimRow>> =>
  server.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<ClaimRow>`SELECT c.id, c.created_at, c.source, c.api_key_id, c.deleted_at FROM claims c
      JOIN attestations a ON a.seq = c.attestation_seq WHERE a.hash_hex = ${hash} ORDER BY c.created_at, c.id`)).then((rows) =>
      rows.map((r) => ({ ...r, id: Number(r.id) })))

interface OrgClaimRow {
  readonly id: number
  readonly created_at: string
  readonly org_id: string | null
}

const claimsOfHash = (server: TestServer, hash: string): Promise<Array<OrgClaimRow>> =>
  server.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<OrgClaimRow>`SELECT c.id, c.created_at, c.org_id FROM claims c JOIN attestations a ON a.seq = c.attestation_seq
      WHERE a.hash_hex = ${hash} AND c.deleted_at IS NULL ORDER BY c.created_at, c.id`)).then((rows) =>
      rows.map((r) => ({ ...r, id: Number(r.id) })))

const sha256Hex = (s: string): string => createHash("sha256").update(s, "utf8").digest("hex")

/** A unique org id per test run, so suites never see each other's claims. */
const orgName = (label: string): string => `${label}-${Math.random().toString(36).slice(2, 10)}`

const sortedBy = <T extends { hash_hex: string }>(xs: ReadonlyArray<T>): Array<T> =>
  [...xs].sort((a, b) => (a.hash_hex < b.hash_hex ? -1 : a.hash_hex > b.hash_hex ? 1 : 0))

for (const dialect of await dialects()) {
  describe(`inventory scan (${dialect})`, () => {
    let server: TestServer
    const orgA = orgName("org-a")
    const orgB = orgName("org-b")
    let a1: Api
    let a2: Api
    let b1: Api
    const scanner = async (orgId: string | null = orgA, scopes: ReadonlyArray<"scan" | "batch" | "census" | "attest"> = ["scan"]) =>
      client(server.url, (await server.createKey({ scopes: [...scopes], ...(orgId === null ? {} : { orgId }) })).key)

    beforeAll(async () => {
      server = await startTestServer(dialect, { scanMaxHashes: 10 })
      a1 = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"], orgId: orgA })).key)
      a2 = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"], orgId: orgA })).key)
      b1 = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"], orgId: orgB })).key)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("matches the org's live claims (two keys of one org) with first_seen and source; other orgs, unattested and soft-deleted claims do not count", async () => {
      const both = randomHash() // a1 first, then a2
      const onlyA2 = randomHash() // a2, no source
      const orgBOnly = randomHash() // b1 only
      const unattested = randomHash()
      const deletedOnly = randomHash() // a1, then soft-deleted
      const firstDeleted = randomHash() // a1 (deleted), then a2 (live)

      const x = await attestWith(a1, { hash_hex: both, source: "src-a1" })
      await attestWith(a2, { hash_hex: both, source: "src-a2" })
      await attestWith(a2, { hash_hex: onlyA2 })
      await attestWith(b1, { hash_hex: orgBOnly, source: "src-b1" })
      const d = await attestWith(a1, { hash_hex: deletedOnly, source: "gone" })
      const fd = await attestWith(a1, { hash_hex: firstDeleted, source: "first-gone" })
      await attestWith(a2, { hash_hex: firstDeleted, source: "second-live" })
      expect(x.status).toBe("created")
      for (const id of [d.id, fd.id]) {
        const del = await a1.delete(`/v1/attestation/${id}/metadata`)
        expect(del.status, del.text).toBe(200)
        expect(del.body).toEqual({ deleted: true })
      }

      const scanned = [both, onlyA2, orgBOnly, unattested, deletedOnly, firstDeleted]
      const r = await (await scanner()).post("/v1/scan", { hashes: scanned })
      expect(r.status, r.text).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(["match_rate", "matched", "matches", "scan_id", "total_scanned"])
      expect(typeof r.body.scan_id).toBe("string")
      expect(r.body.scan_id.length).toBeGreaterThan(0)
      expect(r.body.total_scanned).toBe(6)
      expect(r.body.matched).toBe(3)
      expect(r.body.match_rate).toBeCloseTo(3 / 6, 10)
      expect(r.body.match_rate).toBeGreaterThanOrEqual(0)
      expect(r.body.match_rate).toBeLessThanOrEqual(1)

      const [cBoth, cOnlyA2, cFirstDeleted] = await Promise.all([claimsOf(server, both), claimsOf(server, onlyA2), claimsOf(server, firstDeleted)])
      const liveFirst = (rows: Array<ClaimRow>) => rows.filter((c) => c.deleted_at === null)[0]!
      expect(liveFirst(cFirstDeleted).source).toBe("second-live")
      const expected = sortedBy([
        // the scanning key holds no claim of its own: no source (claim data is the owning key's)
        { hash_hex: both, first_seen: liveFirst(cBoth).created_at, source: null },
        { hash_hex: onlyA2, first_seen: liveFirst(cOnlyA2).created_at, source: null },
        { hash_hex: firstDeleted, first_seen: liveFirst(cFirstDeleted).created_at, source: null }
      ])
      expect(sortedBy(r.body.matches)).toEqual(expected)
      for (const m of r.body.matches) expect(m.first_seen).toMatch(WIRE_TIME)
      // first_seen of a hash claimed by both keys is the EARLIER claim (a1's)
      expect(cBoth.map((c) => c.source)).toEqual(["src-a1", "src-a2"])
      expect(r.body.matches.find((m: any) => m.hash_hex === both).first_seen <= cBoth[1]!.created_at).toBe(true)
      // the soft-deleted first claim does not define first_seen
      expect(cFirstDeleted[0]!.deleted_at).not.toBeNull()
      expect(r.body.matches.find((m: any) => m.hash_hex === firstDeleted).first_seen).toBe(cFirstDeleted[1]!.created_at)
      // another org's source never appears
      expect(r.text).not.toContain("src-b1")
      expect(r.text).not.toContain("gone")

      // org B sees only its own hash, with its own source; the unprefixed alias works
      const rb = await (await scanner(orgB)).post("/scan", { hashes: scanned })
      expect(rb.status, rb.text).toBe(200)
      expect(rb.body.matched).toBe(1)
      expect(rb.body.matches).toEqual([{ hash_hex: orgBOnly, first_seen: (await claimsOf(server, orgBOnly))[0]!.created_at, source: null }])
      expect(rb.body.match_rate).toBeCloseTo(1 / 6, 10)
      expect(rb.body.scan_id).not.toBe(r.body.scan_id)

      // nothing matched: match_rate 0
      const r0 = await (await scanner()).post("/v1/scan", { hashes: [unattested, randomHash()] })
      expect(r0.status).toBe(200)
      expect(r0.body).toMatchObject({ matched: 0, total_scanned: 2, match_rate: 0, matches: [] })
      // everything matched: match_rate 1
      const r1 = await (await scanner()).post("/v1/scan", { hashes: [both, onlyA2] })
      expect(r1.body).toMatchObject({ matched: 2, total_scanned: 2, match_rate: 1 })
    })

    it("a key attesting again after a soft delete makes a new live claim, which counts", async () => {
      const h = randomHash()
      const first = await attestWith(a1, { hash_hex: h, source: "v1" })
      expect((await a1.delete(`/v1/attestation/${first.id}/metadata`)).status).toBe(200)
      const s = await scanner()
      expect((await s.post("/v1/scan", { hashes: [h] })).body.matched).toBe(0)
      await attestWith(a1, { hash_hex: h, source: "v2" })
      const r = await s.post("/v1/scan", { hashes: [h] })
      expect(r.body.matched).toBe(1)
      const live = (await claimsOf(server, h)).filter((c) => c.deleted_at === null)
      expect(live).toHaveLength(1)
      expect(r.body.matches).toEqual([{ hash_hex: h, first_seen: live[0]!.created_at, source: null }])
    })

    it("a match's source is the caller's own live claim's source, never another key's of the same org (spec 5.8)", async () => {
      const keyWith = async () => client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write", "scan"], orgId: orgA })).key)
      const [ka, kb, kc] = [await keyWith(), await keyWith(), await keyWith()]
      const shared = randomHash() // ka (source), kb (source), kc (no source)
      const onlyA = randomHash() // ka only
      const aDeleted = randomHash() // ka (deleted), kb (live)
      await attestWith(ka, { hash_hex: shared, source: "secret-of-a" })
      await attestWith(kb, { hash_hex: shared, source: "secret-of-b" })
      await attestWith(kc, { hash_hex: shared })
      await attestWith(ka, { hash_hex: onlyA, source: "only-a" })
      const d = await attestWith(ka, { hash_hex: aDeleted, source: "a-deleted" })
      expect((await ka.delete(`/v1/attestation/${d.id}/metadata`)).status).toBe(200)
      await attestWith(kb, { hash_hex: aDeleted, source: "b-live" })
      const hashes = [shared, onlyA, aDeleted]
      const sourcesSeenBy = async (api: Api) => {
        const r = await api.post("/v1/scan", { hashes })
        expect(r.status, r.text).toBe(200)
        expect(r.body.matched).toBe(3) // the org's inventory still counts every key's claims
        return Object.fromEntries((r.body.matches as Array<any>).map((m) => [m.hash_hex, m.source]))
      }
      const seenA = await sourcesSeenBy(ka)
      expect(seenA).toEqual({ [shared]: "secret-of-a", [onlyA]: "only-a", [aDeleted]: null })
      const seenB = await sourcesSeenBy(kb)
      expect(seenB).toEqual({ [shared]: "secret-of-b", [onlyA]: null, [aDeleted]: "b-live" })
      const seenC = await sourcesSeenBy(kc)
      expect(seenC).toEqual({ [shared]: null, [onlyA]: null, [aDeleted]: null })
    })

    it("needs an API key (401), the scan scope (403) and an org_id on the key (403)", async () => {
      const body = { hashes: [randomHash()] }
      expectEnvelope(await client(server.url).post("/v1/scan", body), 401, "AUTH_ERROR")
      expectEnvelope(await client(server.url, "atk_live_" + "A".repeat(32)).post("/v1/scan", body), 401, "AUTH_ERROR")
      expectEnvelope(await (await scanner(null)).post("/v1/scan", body), 403, "FORBIDDEN")
      expectEnvelope(await (await scanner(null, ["scan", "batch", "census", "attest"])).post("/v1/scan", body), 403, "FORBIDDEN")
      expectEnvelope(await (await scanner(orgA, ["batch", "census", "attest"])).post("/v1/scan", body), 403, "FORBIDDEN")
      // a legacy key holding every scope (scopes null) still needs an org
      const legacyNoOrg = client(server.url, (await server.createKey({ scopes: null })).key)
      expectEnvelope(await legacyNoOrg.post("/v1/scan", body), 403, "FORBIDDEN")
      const legacyWithOrg = client(server.url, (await server.createKey({ scopes: null, orgId: orgA })).key)
      expect((await legacyWithOrg.post("/v1/scan", body)).status).toBe(200)
    })

    it("more than scanMaxHashes (10 here) is 400 VALIDATION_ERROR; malformed or empty lists are 400", async () => {
      const s = await scanner()
      const ten = Array.from({ length: 10 }, randomHash)
      expectEnvelope(await s.post("/v1/scan", { hashes: [...ten, randomHash()] }), 400, "VALIDATION_ERROR")
      const ok = await s.post("/v1/scan", { hashes: ten })
      expect(ok.status, ok.text).toBe(200)
      expect(ok.body.total_scanned).toBe(10)
      expectEnvelope(await s.post("/v1/scan", { hashes: [] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await s.post("/v1/scan", { hashes: [randomHash().toUpperCase()] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await s.post("/v1/scan", { hashes: ["abc"] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await s.post("/v1/scan", {}), 400, "VALIDATION_ERROR")
    })

    it("the 6th scan within an hour by one key is 429 RATE_LIMIT with Retry-After; another key of the same org has its own 5", async () => {
      const k1 = await scanner()
      const k2 = await scanner()
      const body = { hashes: [randomHash()] }
      for (let i = 0; i < 5; i++) {
        const r = await k1.post("/v1/scan", body)
        expect(r.status, `scan ${i + 1}: ${r.text}`).toBe(200)
      }
      const sixth = await k1.post("/v1/scan", body)
      expectEnvelope(sixth, 429, "RATE_LIMIT")
      const retryAfter = Number(sixth.headers.get("retry-after"))
      expect(Number.isInteger(retryAfter)).toBe(true)
      expect(retryAfter).toBeGreaterThan(0)
      expect(retryAfter).toBeLessThanOrEqual(3600)
      expect(sixth.headers.get("x-ratelimit-limit")).toBe("5")
      expect(sixth.headers.get("x-ratelimit-remaining")).toBe("0")
      expect(Number(sixth.headers.get("x-ratelimit-reset"))).toBeGreaterThan(Date.now() / 1000)
      // still limited
      expectEnvelope(await k1.post("/v1/scan", body), 429, "RATE_LIMIT")
      for (let i = 0; i < 5; i++) {
        const r = await k2.post("/v1/scan", body)
        expect(r.status, `key 2 scan ${i + 1}: ${r.text}`).toBe(200)
      }
      expectEnvelope(await k2.post("/v1/scan", body), 429, "RATE_LIMIT")
    })
  })

  describe(`scan at the default maximum of 50,000 hashes (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    // 50,000 hashes are ~3.35 MB of JSON: more than the general 1 MiB body limit.
    it("a scan of exactly 50,000 hashes is answered; 50,001 is 400 VALIDATION_ERROR", async () => {
      expect(server.config.scanMaxHashes).toBe(50_000)
      const orgId = orgName("org-max")
      const attester = client(server.url, (await server.createKey({ scopes: ["attest"], orgId })).key)
      const s = client(server.url, (await server.createKey({ scopes: ["scan"], orgId })).key)
      const present = [randomHash(), randomHash()]
      for (const h of present) await attestWith(attester, { hash_hex: h })
      const hashes = [...present, ...Array.from({ length: 50_000 - present.length }, randomHash)]
      const r = await s.post("/v1/scan", { hashes })
      expect(r.status, r.text.slice(0, 300)).toBe(200)
      expect(r.body.total_scanned).toBe(50_000)
      expect(r.body.matched).toBe(2)
      expect(r.body.match_rate).toBeCloseTo(2 / 50_000, 12)
      expectEnvelope(await s.post("/v1/scan", { hashes: [...hashes, randomHash()] }), 400, "VALIDATION_ERROR")
    })
  })

  describe(`inventory stats (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("counts the org's live claims: total, unique hashes, first/last claim, claims by month; org_id only as its SHA-256", async () => {
      const orgId = orgName("Org Stats ünïcode")
      const s1 = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"], orgId })).key)
      const s2 = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"], orgId })).key)
      const outsider = client(server.url, (await server.createKey({ scopes: ["attest"], orgId: orgName("other") })).key)
      const stats = client(server.url, (await server.createKey({ scopes: ["batch"], orgId })).key)

      const empty = await stats.get("/v1/inventory/stats")
      expect(empty.status, empty.text).toBe(200)
      expect(empty.body).toEqual({
        org_id_hash: sha256Hex(orgId),
        total_claims: 0,
        unique_hashes: 0,
        first_claim: null,
        last_claim: null,
        claims_by_month: {}
      })

      const shared = randomHash()
      const own = randomHash()
      await attestWith(s1, { hash_hex: shared })
      await attestWith(s2, { hash_hex: shared }) // same hash, second key of the org: 2 claims, 1 unique
      await attestWith(s1, { hash_hex: own })
      const deleted = await attestWith(s2, { hash_hex: randomHash() })
      expect((await s2.delete(`/v1/attestation/${deleted.id}/metadata`)).status).toBe(200)
      await attestWith(outsider, { hash_hex: shared })
      await attestWith(outsider, { hash_hex: randomHash() })

      // move s1's claim on `own` back to January 2024, to see two months and first_claim
      const backdated = "2024-01-15T10:20:30.123000+00:00"
      const ownClaim = (await claimsOfHash(server, own))[0]!
      await server.run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE claims SET created_at = ${backdated} WHERE id = ${ownClaim.id}`))

      const live = (await claimsOfHash(server, shared)).filter((c) => c.org_id === orgId)
      expect(live).toHaveLength(2)
      const lastExpected = live.map((c) => c.created_at).sort().at(-1)!
      // by month, from the table (the two recent claims could straddle a month boundary)
      const byMonth: Record<string, number> = { "2024-01": 1 }
      for (const c of live) byMonth[c.created_at.slice(0, 7)] = (byMonth[c.created_at.slice(0, 7)] ?? 0) + 1

      const r = await stats.get("/v1/inventory/stats")
      expect(r.status, r.text).toBe(200)
      expect(r.body).toEqual({
        org_id_hash: sha256Hex(orgId),
        total_claims: 3,
        unique_hashes: 2,
        first_claim: backdated,
        last_claim: lastExpected,
        claims_by_month: byMonth
      })
      expect(r.body.org_id_hash).toMatch(/^[0-9a-f]{64}$/)
      expect(r.body.last_claim).toMatch(WIRE_TIME)
      expect(Object.keys(r.body.claims_by_month).every((m) => /^\d{4}-\d{2}$/.test(m))).toBe(true)
      // the org id itself is nowhere in the body or headers
      expect(r.text).not.toContain(orgId)
      expect(r.text.toLowerCase()).not.toContain("org stats")
      expect([...allKeys(r.body)].some((k) => k.includes(orgId))).toBe(false)
      r.headers.forEach((v) => expect(v).not.toContain(orgId))
      // unprefixed alias
      expect((await stats.get("/inventory/stats")).body).toEqual(r.body)
    })

    it("needs scope batch (403), a key with org_id (403) and a key at all (401)", async () => {
      const orgId = orgName("org-perm")
      expectEnvelope(await client(server.url).get("/v1/inventory/stats"), 401, "AUTH_ERROR")
      const noOrg = client(server.url, (await server.createKey({ scopes: ["batch"] })).key)
      expectEnvelope(await noOrg.get("/v1/inventory/stats"), 403, "FORBIDDEN")
      const noScope = client(server.url, (await server.createKey({ scopes: ["scan", "census", "attest"], orgId })).key)
      expectEnvelope(await noScope.get("/v1/inventory/stats"), 403, "FORBIDDEN")
      const ok = client(server.url, (await server.createKey({ scopes: ["batch"], orgId })).key)
      expect((await ok.get("/v1/inventory/stats")).status).toBe(200)
    })
  })
}
