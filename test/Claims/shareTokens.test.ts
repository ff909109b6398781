/**
 * Share tokens over the real server (spec 2.12, 3.3, 5.7, 8; CONTRACT §3):
 * creation rules, the plaintext shown once, list/get/revoke and status, holder
 * reads of the creator's claim, 403 for unlisted ids and writes, 401 when
 * revoked / expired / exhausted, the race of two last uses, and the access log.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { attestWith } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { importLines } from "../../src/Attestations/Import.js"
import { historicalKey, historicalRecord } from "../helpers/historical.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer, WIRE_TIME } from "../helpers/server.js"

const SHR = /^shr_[A-Za-z0-9_-]{32}$/
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

for (const dialect of await dialects()) {
  describe(`share tokens (${dialect})`, () => {
    let server: TestServer
    let owner: ReturnType<typeof client>
    let att: Awaited<ReturnType<typeof attestWith>>
    let att2: Awaited<ReturnType<typeof attestWith>>
    beforeAll(async () => {
      server = await startTestServer(dialect)
      owner = client(server.url, (await server.createKey()).key)
      att = await attestWith(owner, { source: "owner-src", extra_data: { owner: "data" } })
      att2 = await attestWith(owner, { source: "owner-src-2" })
      await owner.put(`/v1/attestation/${att.id}/tags`, { tags: [{ key: "env", value: "prod" }] })
    })
    afterAll(async () => {
      await server?.close()
    })

    const create = (body: Record<string, unknown>, who = owner) => who.post("/v1/share-tokens", body)

    it("create: 201 with a shr_ plaintext shown once; list/get never return it; rules on ids, expiry and size", async () => {
      const r = await create({ attestation_ids: [att.id, ` ${att2.id} `], expires_in: 3600, recipient_label: "auditor", max_uses: 5 })
      expect(r.status).toBe(201)
      expect(r.body.share_token).toMatch(SHR)
      expect(r.body.id).toEqual(expect.any(String))
      expect(r.body.id).not.toBe(r.body.share_token)
      expect(r.body).toMatchObject({ attestation_ids: [att.id, att2.id], recipient_label: "auditor", max_uses: 5 })
      expect(Date.parse(r.body.expires_at.replace("+00:00", "Z")) - Date.now()).toBeGreaterThan(3500_000)

      const list = await owner.get("/v1/share-tokens")
      expect(list.status).toBe(200)
      const item = list.body.share_tokens.find((t: { id: string }) => t.id === r.body.id)
      expect(item).toMatchObject({ id: r.body.id, status: "active", uses: 0, max_uses: 5, recipient_label: "auditor", revoked_at: null })
      expect(item.created_at).toMatch(WIRE_TIME)
      expect(list.text).not.toContain(r.body.share_token)
      expect(list.text).not.toContain(r.body.share_token.slice(4))
      const get = await owner.get(`/v1/share-tokens/${r.body.id}`)
      expect(get.status).toBe(200)
      expect(get.body).toMatchObject({ id: r.body.id, status: "active", attestation_ids: [att.id, att2.id] })
      expect(get.text).not.toContain(r.body.share_token.slice(4))
      expect(Object.keys(get.body)).not.toContain("share_token")
      expect(Object.keys(get.body)).not.toContain("token_hash")

      // unlimited when max_uses is unset
      const unlimited = await create({ attestation_ids: [att.id], expires_in: 60 })
      expect(unlimited.status).toBe(201)
      expect(unlimited.body.max_uses).toBeNull()
      expect(unlimited.body.recipient_label).toBeNull()

      // ids must be claimed by the caller
      const other = client(server.url, (await server.createKey()).key)
      const foreign = await attestWith(other)
      expectEnvelope(await create({ attestation_ids: [att.id, foreign.id], expires_in: 60 }), 400, "VALIDATION_ERROR")
      expectEnvelope(await create({ attestation_ids: ["att_AAAAAAAAAAAAAAAAAAAAAAAA"], expires_in: 60 }), 400, "VALIDATION_ERROR")
      expectEnvelope(await create({ attestation_ids: ["nonsense"], expires_in: 60 }), 400, "VALIDATION_ERROR")
      expectEnvelope(await create({ attestation_ids: [], expires_in: 60 }), 400, "VALIDATION_ERROR")
      // expiry: at most 30 days
      expect((await create({ attestation_ids: [att.id], expires_in: 2592000 })).status).toBe(201)
      for (const expires_in of [2592001, 0, -5, 1.5, "60"]) {
        expectEnvelope(await create({ attestation_ids: [att.id], expires_in }), 400, "VALIDATION_ERROR")
      }
      expectEnvelope(await create({ attestation_ids: [att.id] }), 400, "VALIDATION_ERROR")
      for (const max_uses of [0, -1, 2.5]) {
        expectEnvelope(await create({ attestation_ids: [att.id], expires_in: 60, max_uses }), 400, "VALIDATION_ERROR")
      }
      // at most 100 ids
      expectEnvelope(await create({ attestation_ids: Array.from({ length: 101 }, () => att.id), expires_in: 60 }), 400, "VALIDATION_ERROR")
      const hundred = await owner.post("/v1/attest/batch", { hashes: Array.from({ length: 100 }, randomHash) })
      const ids = hundred.body.attestations.map((x: { id: string }) => x.id)
      const ok100 = await create({ attestation_ids: ids, expires_in: 60 })
      expect(ok100.status).toBe(201)
      expect(ok100.body.attestation_ids).toHaveLength(100)

      // scope share
      const noShare = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write", "tags:write"] })).key)
      const mine = await attestWith(noShare)
      expectEnvelope(await create({ attestation_ids: [mine.id], expires_in: 60 }, noShare), 403, "FORBIDDEN")
      expectEnvelope(await noShare.get("/v1/share-tokens"), 403, "FORBIDDEN")
      expectEnvelope(await noShare.get(`/v1/share-tokens/${r.body.id}`), 403, "FORBIDDEN")
      expectEnvelope(await noShare.delete(`/v1/share-tokens/${r.body.id}`), 403, "FORBIDDEN")
    })

    it("a holder reads the creator's metadata and tags for listed ids; unlisted → 403; writes → 403", async () => {
      const r = await create({ attestation_ids: [att.id], expires_in: 600 })
      const holder = client(server.url, r.body.share_token)
      const m = await holder.get(`/v1/attestation/${att.id}/metadata`)
      expect(m.status).toBe(200)
      expect(m.body).toMatchObject({ attestation_id: att.id, source: "owner-src", extra_data: { owner: "data" } })
      expect(m.headers.get("etag")).toBe(`"${m.body.etag}"`)
      const t = await holder.get(`/v1/attestation/${att.id}/tags`)
      expect(t.status).toBe(200)
      expect(t.body.tags).toEqual([{ key: "env", value: "prod" }])
      // by legacy alias and with whitespace around the id
      expect((await holder.get(`/attestation/${encodeURIComponent(` ${att.id} `)}/metadata`)).status).toBe(200)

      // an attestation the token does not list (even one the owner claims)
      expectEnvelope(await holder.get(`/v1/attestation/${att2.id}/metadata`), 403, "FORBIDDEN")
      expectEnvelope(await holder.get(`/v1/attestation/${att2.id}/tags`), 403, "FORBIDDEN")

      // writes and every other authenticated operation
      const writes = [
        holder.patch(`/v1/attestation/${att.id}/metadata`, { source: "hijack" }),
        holder.patch(`/v1/attestation/${att.id}/metadata`, { source: "hijack" }, { "if-match": `"${m.body.etag}"` }),
        holder.delete(`/v1/attestation/${att.id}/metadata`),
        holder.put(`/v1/attestation/${att.id}/tags`, { tags: [{ key: "env", value: "hijack" }] }),
        holder.delete(`/v1/attestation/${att.id}/tags/env`),
        holder.post("/v1/attest", { hash_hex: randomHash() }),
        holder.post("/v1/attest", { hash_hex: att.hash_hex, source: "hijack" }),
        holder.post("/v1/attest/batch", { hashes: [randomHash()] }),
        holder.post("/v1/tags/query", { filter: { and: [{ key: "env", value: "prod" }] } }),
        holder.post("/v1/share-tokens", { attestation_ids: [att.id], expires_in: 60 }),
        holder.get("/v1/share-tokens"),
        holder.get(`/v1/share-tokens/${r.body.id}`),
        holder.get(`/v1/share-tokens/${r.body.id}/access-log`),
        holder.delete(`/v1/share-tokens/${r.body.id}`),
        holder.post("/v1/webhook/register", { url: "http://127.0.0.1:9/x", events: ["t1_complete"] }),
        holder.get("/v1/webhooks")
      ]
      for (const w of await Promise.all(writes)) expectEnvelope(w, 403, "FORBIDDEN")
      const after = await owner.get(`/v1/attestation/${att.id}/metadata`)
      expect(after.body).toMatchObject({ source: "owner-src", etag: m.body.etag })
      expect((await owner.get(`/v1/attestation/${att.id}/tags`)).body.tags).toEqual([{ key: "env", value: "prod" }])
      // detailed batch verify needs an API key
      expectEnvelope(await holder.post("/v1/verify/batch", { hashes: [att.hash_hex], detailed: true }), 401, "AUTH_ERROR")
      // a made-up token of the right shape
      expectEnvelope(await client(server.url, "shr_" + "A".repeat(32)).get(`/v1/attestation/${att.id}/metadata`), 401, "AUTH_ERROR")
    })

    it("revoked → 401; status revoked; revoke is owner-only", async () => {
      const r = await create({ attestation_ids: [att.id], expires_in: 600 })
      const holder = client(server.url, r.body.share_token)
      expect((await holder.get(`/v1/attestation/${att.id}/metadata`)).status).toBe(200)
      const other = client(server.url, (await server.createKey()).key)
      expectEnvelope(await other.delete(`/v1/share-tokens/${r.body.id}`), 404, "NOT_FOUND")
      expect((await holder.get(`/v1/attestation/${att.id}/metadata`)).status).toBe(200)
      const rev = await owner.delete(`/v1/share-tokens/${r.body.id}`)
      expect(rev.status).toBe(200)
      expect(rev.body).toEqual({ id: r.body.id, revoked: true })
      expectEnvelope(await holder.get(`/v1/attestation/${att.id}/metadata`), 401, "AUTH_ERROR")
      expectEnvelope(await holder.get(`/v1/attestation/${att.id}/tags`), 401, "AUTH_ERROR")
      const info = await owner.get(`/v1/share-tokens/${r.body.id}`)
      expect(info.body.status).toBe("revoked")
      expect(info.body.revoked_at).toMatch(WIRE_TIME)
      expectEnvelope(await owner.get("/v1/share-tokens/st_doesnotexist"), 404, "NOT_FOUND")
    })

    it("revoking the creating API key ends its share tokens (401)", async () => {
      const created = await server.createKey()
      const k = client(server.url, created.key)
      const a = await attestWith(k, { source: "revoked-owner-src" })
      const r = await k.post("/v1/share-tokens", { attestation_ids: [a.id], expires_in: 600 })
      const holder = client(server.url, r.body.share_token)
      expect((await holder.get(`/v1/attestation/${a.id}/metadata`)).status).toBe(200)
      await server.revokeKey(created.id)
      const after = await holder.get(`/v1/attestation/${a.id}/metadata`)
      expectEnvelope(after, 401, "AUTH_ERROR")
      expect(after.text).not.toContain("revoked-owner-src")
      expectEnvelope(await holder.get(`/v1/attestation/${a.id}/tags`), 401, "AUTH_ERROR")
    })

    it("an attestation listed twice (id and legacy numeric handle) is listed once", async () => {
      // An imported historical record (legacy number 31337) the owner then attests too: its claim.
      const historical = historicalRecord(historicalKey(), { hash_hex: randomHash(), legacy_id: 31337 })
      expect(await server.run(importLines([JSON.stringify(historical)]))).toMatchObject({ imported: 1, failed: 0 })
      const claimed = await attestWith(owner, { hash_hex: historical.hash_hex, source: "historical-src" })
      expect(claimed.status).toBe("existing")
      expect((await client(server.url).get("/v1/attestation/31337")).body.id).toBe(claimed.id)
      const r = await create({ attestation_ids: [claimed.id, "31337", ` ${claimed.id}`], expires_in: 60 })
      expect(r.status).toBe(201)
      expect(r.body.attestation_ids).toEqual([claimed.id])
      expect((await owner.get(`/v1/share-tokens/${r.body.id}`)).body.attestation_ids).toEqual([claimed.id])
      const holder = client(server.url, r.body.share_token)
      expect((await holder.get("/v1/attestation/31337/metadata")).body.source).toBe("historical-src")
    })

    it("expired (expires_in 1, wait ~1.5 s) → 401; status expired", async () => {
      const r = await create({ attestation_ids: [att.id], expires_in: 1 })
      expect(r.status).toBe(201)
      const holder = client(server.url, r.body.share_token)
      await sleep(1500)
      expectEnvelope(await holder.get(`/v1/attestation/${att.id}/metadata`), 401, "AUTH_ERROR")
      expectEnvelope(await holder.get(`/v1/attestation/${att.id}/tags`), 401, "AUTH_ERROR")
      expect((await owner.get(`/v1/share-tokens/${r.body.id}`)).body.status).toBe("expired")
    })

    it("max_uses 2: two uses succeed, the third is 401; status exhausted; refusals are not counted as uses", async () => {
      const r = await create({ attestation_ids: [att.id], expires_in: 600, max_uses: 2 })
      const holder = client(server.url, r.body.share_token)
      // refused attempts (403) do not consume a use
      expectEnvelope(await holder.get(`/v1/attestation/${att2.id}/metadata`), 403, "FORBIDDEN")
      expectEnvelope(await holder.patch(`/v1/attestation/${att.id}/metadata`, { source: "x" }), 403, "FORBIDDEN")
      expect((await holder.get(`/v1/attestation/${att.id}/metadata`)).status).toBe(200)
      expect((await holder.get(`/v1/attestation/${att.id}/tags`)).status).toBe(200)
      expectEnvelope(await holder.get(`/v1/attestation/${att.id}/metadata`), 401, "AUTH_ERROR")
      const info = await owner.get(`/v1/share-tokens/${r.body.id}`)
      expect(info.body).toMatchObject({ uses: 2, max_uses: 2, status: "exhausted" })
    })

    it("two concurrent last uses (max_uses 1, parallel GETs): exactly one 200 (repeated)", async () => {
      for (let round = 0; round < 5; round++) {
        const r = await create({ attestation_ids: [att.id], expires_in: 600, max_uses: 1 })
        const holder = client(server.url, r.body.share_token)
        const replies = await Promise.all([
          holder.get(`/v1/attestation/${att.id}/metadata`),
          holder.get(`/v1/attestation/${att.id}/tags`),
          holder.get(`/v1/attestation/${att.id}/metadata`)
        ])
        const ok = replies.filter((x) => x.status === 200)
        expect(ok, `round ${round}: ${replies.map((x) => x.status).join(",")}`).toHaveLength(1)
        for (const x of replies.filter((x) => x.status !== 200)) expectEnvelope(x, 401, "AUTH_ERROR")
        const info = await owner.get(`/v1/share-tokens/${r.body.id}`)
        expect(info.body.uses).toBe(1)
        const log = await owner.get(`/v1/share-tokens/${r.body.id}/access-log`)
        expect(log.body.access_log).toHaveLength(1)
      }
    })

    it("100 requests per minute per token (429 after), separate from the owner key's limit", async () => {
      const r = await create({ attestation_ids: [att.id], expires_in: 600 })
      const holder = client(server.url, r.body.share_token)
      const statuses: Array<number> = []
      for (let lane = 0; lane < 4; lane++) {
        // 4 lanes × 25 = 100 admitted requests
        statuses.push(...(await Promise.all(Array.from({ length: 25 }, () => holder.get(`/v1/attestation/${att.id}/metadata`)))).map((x) => x.status))
      }
      expect(statuses.filter((s) => s === 200)).toHaveLength(100)
      const over = await holder.get(`/v1/attestation/${att.id}/metadata`)
      expectEnvelope(over, 429, "RATE_LIMIT")
      expect(Number(over.headers.get("retry-after"))).toBeGreaterThan(0)
      // the owner's key is not affected
      expect((await owner.get(`/v1/attestation/${att.id}/metadata`)).status).toBe(200)
      expect((await owner.get(`/v1/share-tokens/${r.body.id}`)).body.uses).toBe(100)
    })

    it("the access log {at, client_ip, attestation_id, path} is visible to the owner only", async () => {
      const r = await create({ attestation_ids: [att.id, att2.id], expires_in: 600 })
      const holder = client(server.url, r.body.share_token)
      await holder.get(`/v1/attestation/${att.id}/metadata`)
      await holder.get(`/v1/attestation/${att2.id}/tags`)
      await holder.get(`/attestation/${att.id}/tags`)
      const log = await owner.get(`/v1/share-tokens/${r.body.id}/access-log`)
      expect(log.status).toBe(200)
      expect(log.body.access_log).toHaveLength(3)
      for (const e of log.body.access_log) {
        expect(Object.keys(e).sort()).toEqual(["at", "attestation_id", "client_ip", "path"])
        expect(e.at).toMatch(WIRE_TIME)
        expect(e.client_ip).toBe("127.0.0.1")
      }
      expect(log.body.access_log.map((e: { attestation_id: string }) => e.attestation_id)).toEqual([att.id, att2.id, att.id])
      expect(log.body.access_log[0].path).toContain(`/attestation/${att.id}/metadata`)
      expect(log.body.access_log[1].path).toContain(`/attestation/${att2.id}/tags`)
      expect(log.body.access_log[2].path).toContain(`/attestation/${att.id}/tags`)
      expect((await owner.get(`/v1/share-tokens/${r.body.id}`)).body.uses).toBe(3)

      const other = client(server.url, (await server.createKey()).key)
      expectEnvelope(await other.get(`/v1/share-tokens/${r.body.id}/access-log`), 404, "NOT_FOUND")
      expectEnvelope(await other.get(`/v1/share-tokens/${r.body.id}`), 404, "NOT_FOUND")
      const otherList = await other.get("/v1/share-tokens")
      expect(otherList.body.share_tokens).toEqual([])
    })
  })
}
