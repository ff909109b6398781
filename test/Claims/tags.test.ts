/**
 * Tags on a key's claim over the real server (spec 2.11, 4.9, 8; CONTRACT §3):
 * upsert, key pattern, the per-claim limit of 50 (atomic), encrypted tags,
 * delete, and the AND query with its limit and cursor pagination.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { attestWith } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

type Tag = { key: string; value?: string; value_enc?: string; value_nonce?: string }

const byKey = (tags: ReadonlyArray<Tag>) => [...tags].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))

for (const dialect of await dialects()) {
  describe(`tags (${dialect})`, () => {
    let server: TestServer
    let api: ReturnType<typeof client>
    beforeAll(async () => {
      server = await startTestServer(dialect)
      api = client(server.url, (await server.createKey()).key)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("PUT upserts and returns all of the key's tags on the attestation; GET reads them", async () => {
      const a = await attestWith(api)
      const path = `/v1/attestation/${a.id}/tags`
      const r1 = await api.put(path, { tags: [{ key: "env", value: "prod" }, { key: "team", value: "core" }] })
      expect(r1.status).toBe(200)
      expect(byKey(r1.body.tags)).toEqual([{ key: "env", value: "prod" }, { key: "team", value: "core" }])
      const r2 = await api.put(path, { tags: [{ key: "env", value: "staging" }, { key: "a-b_c9", value: "" }] })
      expect(r2.status).toBe(200)
      expect(byKey(r2.body.tags)).toEqual([{ key: "a-b_c9", value: "" }, { key: "env", value: "staging" }, { key: "team", value: "core" }])
      const g = await api.get(path)
      expect(g.status).toBe(200)
      expect(byKey(g.body.tags)).toEqual(byKey(r2.body.tags))
      // unprefixed alias
      expect(byKey((await api.get(`/attestation/${a.id}/tags`)).body.tags)).toEqual(byKey(r2.body.tags))
      // no claim → 404
      const other = client(server.url, (await server.createKey()).key)
      expectEnvelope(await other.get(path), 404, "NOT_FOUND")
      expectEnvelope(await other.put(path, { tags: [{ key: "x", value: "y" }] }), 404, "NOT_FOUND")
      // duplicate keys in one request
      expectEnvelope(await api.put(path, { tags: [{ key: "d", value: "1" }, { key: "d", value: "2" }] }), 400, "VALIDATION_ERROR")
      // empty list
      expectEnvelope(await api.put(path, { tags: [] }), 400, "VALIDATION_ERROR")
    })

    it("key pattern ^[a-z][a-z0-9_-]{0,62}$; _x reserved; 64 characters → 400; nothing stored", async () => {
      const a = await attestWith(api)
      const path = `/v1/attestation/${a.id}/tags`
      const ok63 = "k" + "a".repeat(62)
      const r = await api.put(path, { tags: [{ key: ok63, value: "v" }, { key: "z", value: "v" }] })
      expect(r.status).toBe(200)
      for (const bad of ["_x", "_", "k" + "a".repeat(63), "", "Env", "9lives", "-x", "a b", "a.b", "é", "a/b", " env", "env "]) {
        const res = await api.put(path, { tags: [{ key: "fine", value: "v" }, { key: bad, value: "v" }] })
        expectEnvelope(res, 400, "VALIDATION_ERROR")
      }
      expect(byKey((await api.get(path)).body.tags).map((t) => t.key)).toEqual([ok63, "z"])
      // value too long
      expectEnvelope(await api.put(path, { tags: [{ key: "long", value: "v".repeat(1025) }] }), 400, "VALIDATION_ERROR")
    })

    it("at most 50 tags per attestation per key: a PUT that would make 51 is 400 and changes nothing", async () => {
      const a = await attestWith(api)
      const path = `/v1/attestation/${a.id}/tags`
      const first = Array.from({ length: 45 }, (_, i) => ({ key: `k${i}`, value: `v${i}` }))
      expect((await api.put(path, { tags: first })).status).toBe(200)
      const wouldBe51 = [
        { key: "k0", value: "changed" },
        ...Array.from({ length: 6 }, (_, i) => ({ key: `n${i}`, value: "new" }))
      ]
      expectEnvelope(await api.put(path, { tags: wouldBe51 }), 400, "VALIDATION_ERROR")
      const after = (await api.get(path)).body.tags as Array<Tag>
      expect(after).toHaveLength(45)
      expect(after.find((t) => t.key === "k0")).toEqual({ key: "k0", value: "v0" })
      // exactly 50 is fine, and updating existing keys at 50 stays fine
      const five = Array.from({ length: 5 }, (_, i) => ({ key: `n${i}`, value: "new" }))
      expect((await api.put(path, { tags: five })).body.tags).toHaveLength(50)
      expect((await api.put(path, { tags: [{ key: "k1", value: "upd" }] })).status).toBe(200)
      expectEnvelope(await api.put(path, { tags: [{ key: "one-more", value: "x" }] }), 400, "VALIDATION_ERROR")
      // 51 in one request
      const b = await attestWith(api)
      const fiftyOne = Array.from({ length: 51 }, (_, i) => ({ key: `k${i}`, value: "v" }))
      expectEnvelope(await api.put(`/v1/attestation/${b.id}/tags`, { tags: fiftyOne }), 400, "VALIDATION_ERROR")
      expect((await api.get(`/v1/attestation/${b.id}/tags`)).body.tags).toEqual([])
      // the limit is per key: another key has its own 50
      const other = client(server.url, (await server.createKey()).key)
      await attestWith(other, { hash_hex: a.hash_hex })
      const r = await other.put(path, { tags: Array.from({ length: 50 }, (_, i) => ({ key: `o${i}`, value: "v" })) })
      expect(r.status).toBe(200)
      expect(r.body.tags).toHaveLength(50)
    })

    it("the 50-tag limit holds under concurrent PUTs (two PUTs of 30 new keys each: never more than 50 stored)", async () => {
      for (let round = 0; round < 6; round++) {
        const a = await attestWith(api)
        const path = `/v1/attestation/${a.id}/tags`
        const batch = (p: string) => ({ tags: Array.from({ length: 30 }, (_, i) => ({ key: `${p}${i}`, value: "v" })) })
        const [x, y] = await Promise.all([api.put(path, batch("x")), api.put(path, batch("y"))])
        const stored = ((await api.get(path)).body.tags as Array<Tag>).length
        expect(stored, `round ${round}: ${x.status} ${y.status}, ${stored} tags stored`).toBeLessThanOrEqual(50)
        expect([x.status, y.status].sort()).toEqual([200, 400])
      }
    })

    it("a PUT racing the claim's soft delete never leaves tags that a query still finds (repeated)", async () => {
      const orphans: Array<string> = []
      for (let round = 0; round < 15; round++) {
        const a = await attestWith(api)
        const value = `r${round}-${Math.random().toString(36).slice(2)}`
        const [put, del] = await Promise.all([
          api.put(`/v1/attestation/${a.id}/tags`, { tags: [{ key: "race", value }] }),
          api.delete(`/v1/attestation/${a.id}/metadata`)
        ])
        expect(del.status).toBe(200)
        expect([200, 404]).toContain(put.status)
        const q = await api.post("/v1/tags/query", { filter: { and: [{ key: "race", value }] } })
        if (q.body.attestations.length > 0) orphans.push(`round ${round}: PUT ${put.status} after DELETE; query still finds ${a.id}`)
      }
      expect(orphans).toEqual([])
    })

    it("encrypted tags (value_enc + value_nonce, hex) are returned as stored and never matched by a query", async () => {
      const a = await attestWith(api)
      const path = `/v1/attestation/${a.id}/tags`
      const enc = { key: "secret", value_enc: "a1b2c3d4e5f6", value_nonce: "00112233445566778899aabb" }
      const r = await api.put(path, { tags: [enc, { key: "plain", value: "a1b2c3d4e5f6" }] })
      expect(r.status).toBe(200)
      expect(byKey(r.body.tags)).toEqual([{ key: "plain", value: "a1b2c3d4e5f6" }, enc])
      expect(byKey((await api.get(path)).body.tags)).toEqual([{ key: "plain", value: "a1b2c3d4e5f6" }, enc])
      for (const value of [enc.value_enc, enc.value_nonce, ""]) {
        const q = await api.post("/v1/tags/query", { filter: { and: [{ key: "secret", value }] } })
        expect(q.status).toBe(200)
        expect(q.body.attestations).toEqual([])
      }
      const q = await api.post("/v1/tags/query", { filter: { and: [{ key: "plain", value: "a1b2c3d4e5f6" }] } })
      expect(q.body.attestations.map((x: { id: string }) => x.id)).toContain(a.id)
      // the matched item carries the encrypted tag as stored
      const item = q.body.attestations.find((x: { id: string }) => x.id === a.id)
      expect(byKey(item.tags)).toEqual([{ key: "plain", value: "a1b2c3d4e5f6" }, enc])
      // bad hex → 400
      for (const bad of [
        { key: "e", value_enc: "XYZ1", value_nonce: "00112233445566778899aabb" },
        { key: "e", value_enc: "abc", value_nonce: "00112233445566778899aabb" },
        { key: "e", value_enc: "ab", value_nonce: "0011" },
        { key: "e", value_enc: "ab" }
      ]) {
        expectEnvelope(await api.put(path, { tags: [bad] }), 400, "VALIDATION_ERROR")
      }
      // a plaintext tag can replace an encrypted one under the same key
      const flip = await api.put(path, { tags: [{ key: "secret", value: "now-plain" }] })
      expect(flip.body.tags.find((t: Tag) => t.key === "secret")).toEqual({ key: "secret", value: "now-plain" })
    })

    it("DELETE one tag by key; 404 when missing; tag keys in the path are not trimmed", async () => {
      const a = await attestWith(api)
      const path = `/v1/attestation/${a.id}/tags`
      await api.put(path, { tags: [{ key: "env", value: "prod" }, { key: "team", value: "core" }] })
      for (const variant of [" env", "env ", "%20env", "env%20", "ENV", "env%09"]) {
        const r = await api.delete(`${path}/${variant.includes("%") ? variant : encodeURIComponent(variant)}`)
        expectEnvelope(r, 404, "NOT_FOUND")
      }
      expect(byKey((await api.get(path)).body.tags).map((t) => t.key)).toEqual(["env", "team"])
      const del = await api.delete(`${path}/env`)
      expect(del.status).toBe(200)
      expect(del.body).toEqual({ deleted: true })
      expect((await api.get(path)).body.tags).toEqual([{ key: "team", value: "core" }])
      expectEnvelope(await api.delete(`${path}/env`), 404, "NOT_FOUND")
      // but the attestation reference IS trimmed
      const trimmed = await api.delete(`/v1/attestation/${encodeURIComponent(` ${a.id}\t`)}/tags/team`)
      expect(trimmed.status).toBe(200)
      expect((await api.get(path)).body.tags).toEqual([])
      // tags:read cannot delete or put
      const reader = client(server.url, (await server.createKey({ scopes: ["attest", "tags:read"] })).key)
      const ar = await attestWith(reader)
      expect((await reader.get(`/v1/attestation/${ar.id}/tags`)).status).toBe(200)
      expectEnvelope(await reader.put(`/v1/attestation/${ar.id}/tags`, { tags: [{ key: "a", value: "b" }] }), 403, "FORBIDDEN")
      expectEnvelope(await reader.delete(`/v1/attestation/${ar.id}/tags/a`), 403, "FORBIDDEN")
      expect((await reader.post("/v1/tags/query", { filter: { and: [{ key: "a", value: "b" }] } })).status).toBe(200)
      // no tags scope at all
      const none = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"] })).key)
      const an = await attestWith(none)
      expectEnvelope(await none.get(`/v1/attestation/${an.id}/tags`), 403, "FORBIDDEN")
      expectEnvelope(await none.post("/v1/tags/query", { filter: { and: [{ key: "a", value: "b" }] } }), 403, "FORBIDDEN")
    })

    it("query: AND semantics over the caller's own plaintext tags only; 1–10 conditions", async () => {
      const mine = client(server.url, (await server.createKey()).key)
      const theirs = client(server.url, (await server.createKey()).key)
      const [a1, a2, a3] = [await attestWith(mine), await attestWith(mine), await attestWith(mine)]
      await mine.put(`/v1/attestation/${a1.id}/tags`, { tags: [{ key: "env", value: "prod" }, { key: "team", value: "core" }] })
      await mine.put(`/v1/attestation/${a2.id}/tags`, { tags: [{ key: "env", value: "prod" }, { key: "team", value: "edge" }] })
      await mine.put(`/v1/attestation/${a3.id}/tags`, { tags: [{ key: "env", value: "dev" }, { key: "team", value: "core" }] })
      // the other key tags a3 (claimed too) with env=prod, team=core and a private tag
      await attestWith(theirs, { hash_hex: a3.hash_hex })
      await theirs.put(`/v1/attestation/${a3.id}/tags`, { tags: [{ key: "env", value: "prod" }, { key: "team", value: "core" }, { key: "private", value: "theirs" }] })

      const q = async (and: Array<{ key: string; value: string }>, who = mine) => {
        const r = await who.post("/v1/tags/query", { filter: { and } })
        expect(r.status, r.text).toBe(200)
        return r.body as { attestations: Array<{ id: string; hash_hex: string; tags: Array<Tag> }>; count: number; next_cursor: string | null }
      }
      const ids = (r: { attestations: Array<{ id: string }> }) => r.attestations.map((x) => x.id).sort()

      expect(ids(await q([{ key: "env", value: "prod" }]))).toEqual([a1.id, a2.id].sort())
      expect(ids(await q([{ key: "env", value: "prod" }, { key: "team", value: "core" }]))).toEqual([a1.id])
      expect(ids(await q([{ key: "team", value: "core" }]))).toEqual([a1.id, a3.id].sort())
      expect(ids(await q([{ key: "team", value: "core" }, { key: "env", value: "dev" }]))).toEqual([a3.id])
      expect(ids(await q([{ key: "env", value: "prod" }, { key: "env", value: "dev" }]))).toEqual([])
      expect(ids(await q([{ key: "private", value: "theirs" }]))).toEqual([])
      expect(ids(await q([{ key: "env", value: "PROD" }]))).toEqual([])
      // the other key sees only a3 (its own tags), and only its own tags on it
      const t = await q([{ key: "env", value: "prod" }], theirs)
      expect(ids(t)).toEqual([a3.id])
      expect(byKey(t.attestations[0]!.tags)).toEqual([{ key: "env", value: "prod" }, { key: "private", value: "theirs" }, { key: "team", value: "core" }])
      // mine: the a3 item carries only my tags
      const m = await q([{ key: "team", value: "core" }, { key: "env", value: "dev" }])
      expect(byKey(m.attestations[0]!.tags)).toEqual([{ key: "env", value: "dev" }, { key: "team", value: "core" }])
      expect(m.attestations[0]!.hash_hex).toBe(a3.hash_hex)
      expect(m.count).toBe(1)
      expect(m.next_cursor).toBeNull()

      // 10 conditions (repeats allowed) fine; 11 and 0 are 400
      const ten = Array.from({ length: 10 }, () => ({ key: "env", value: "prod" }))
      expect(ids(await q(ten))).toEqual([a1.id, a2.id].sort())
      expectEnvelope(await mine.post("/v1/tags/query", { filter: { and: [...ten, { key: "env", value: "prod" }] } }), 400, "VALIDATION_ERROR")
      expectEnvelope(await mine.post("/v1/tags/query", { filter: { and: [] } }), 400, "VALIDATION_ERROR")
      expectEnvelope(await mine.post("/v1/tags/query", { filter: {} }), 400, "VALIDATION_ERROR")
      expectEnvelope(await mine.post("/v1/tags/query", {}), 400, "VALIDATION_ERROR")
      expectEnvelope(await mine.post("/v1/tags/query", { filter: { and: [{ key: "env" }] } }), 400, "VALIDATION_ERROR")
    })

    it("query: limit default 100, max 1000; stable order; next_cursor pages return every match exactly once", async () => {
      const k = client(server.url, (await server.createKey()).key)
      // 101 attestations tagged page=all
      const b = await k.post("/v1/attest/batch", { hashes: Array.from({ length: 100 }, randomHash) })
      expect(b.status).toBe(200)
      const ids: Array<string> = b.body.attestations.map((x: { id: string }) => x.id)
      ids.push((await attestWith(k)).id)
      await Promise.all(
        [0, 1, 2, 3].map(async (lane) => {
          for (let i = lane; i < ids.length; i += 4) {
            const r = await k.put(`/v1/attestation/${ids[i]}/tags`, { tags: [{ key: "page", value: "all" }, { key: "n", value: String(i) }] })
            if (r.status !== 200) throw new Error(r.text)
          }
        })
      )
      const all = { filter: { and: [{ key: "page", value: "all" }] } }
      const d = await k.post("/v1/tags/query", all)
      expect(d.status).toBe(200)
      expect(d.body.count).toBe(100)
      expect(d.body.attestations).toHaveLength(100)
      expect(typeof d.body.next_cursor).toBe("string")
      const rest = await k.post("/v1/tags/query", { ...all, cursor: d.body.next_cursor })
      expect(rest.body.count).toBe(1)
      expect(rest.body.next_cursor).toBeNull()
      expect(new Set([...d.body.attestations, ...rest.body.attestations].map((x: { id: string }) => x.id))).toEqual(new Set(ids))
      const big = await k.post("/v1/tags/query", { ...all, limit: 1000 })
      expect(big.status).toBe(200)
      expect(big.body.count).toBe(101)
      expect(big.body.next_cursor).toBeNull()
      // same order every time
      expect(big.body.attestations.slice(0, 100).map((x: { id: string }) => x.id)).toEqual(d.body.attestations.map((x: { id: string }) => x.id))
      for (const limit of [0, 1001, -1, 1.5, "10"]) {
        expectEnvelope(await k.post("/v1/tags/query", { ...all, limit }), 400, "VALIDATION_ERROR")
      }
      expectEnvelope(await k.post("/v1/tags/query", { ...all, cursor: "garbage!" }), 400, "VALIDATION_ERROR")

      // 25 matches (n in 0..24 tagged "sub=yes") paged by 10
      await Promise.all(ids.slice(0, 25).map((id) => k.put(`/v1/attestation/${id}/tags`, { tags: [{ key: "sub", value: "yes" }] })))
      const seen: Array<string> = []
      const pages: Array<number> = []
      let cursor: string | null = null
      for (let i = 0; i < 10; i++) {
        const page: any = await k.post("/v1/tags/query", {
          filter: { and: [{ key: "sub", value: "yes" }, { key: "page", value: "all" }] },
          limit: 10,
          ...(cursor === null ? {} : { cursor })
        })
        expect(page.status).toBe(200)
        expect(page.body.count).toBe(page.body.attestations.length)
        pages.push(page.body.count)
        seen.push(...page.body.attestations.map((x: { id: string }) => x.id))
        cursor = page.body.next_cursor
        if (cursor === null) break
      }
      expect(pages).toEqual([10, 10, 5])
      expect(seen).toHaveLength(25)
      expect(new Set(seen)).toEqual(new Set(ids.slice(0, 25)))
      // a second walk gives the same order
      const again = await k.post("/v1/tags/query", { filter: { and: [{ key: "sub", value: "yes" }] }, limit: 25 })
      expect(again.body.attestations.map((x: { id: string }) => x.id)).toEqual(seen)
    })
  })
}
