/** Idempotent attestation under concurrent requests, through a real server on each store. */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { client, randomHash, startTestServer, statsOf, type TestServer } from "../helpers/server.js"

for (const dialect of await dialects()) {
  describe(`concurrent attestation (${dialect})`, () => {
    let server: TestServer

    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("50 concurrent attests of one new hash from one key: one created, 49 existing, one id, one claim", async () => {
      const { key } = await server.createKey()
      const before = (await statsOf(server.url)).total_attestations
      const hash = randomHash()
      const replies = await Promise.all(
        Array.from({ length: 50 }, (_, i) => client(server.url, key).post(i % 2 ? "/v1/attest" : "/attest", { hash_hex: hash }))
      )
      expect(replies.filter((r) => r.status === 201)).toHaveLength(1)
      expect(replies.filter((r) => r.status === 200)).toHaveLength(49)
      expect(replies.filter((r) => r.body.status === "created")).toHaveLength(1)
      expect(replies.filter((r) => r.body.status === "existing")).toHaveLength(49)
      for (const r of replies) expect(r.body.status).toBe(r.status === 201 ? "created" : "existing")
      expect(new Set(replies.map((r) => r.body.id)).size).toBe(1)
      expect(new Set(replies.map((r) => r.body.claim_id)).size).toBe(1)
      expect(new Set(replies.map((r) => r.body.signature)).size).toBe(1)
      expect(new Set(replies.map((r) => r.body.timestamp)).size).toBe(1)
      expect((await statsOf(server.url)).total_attestations).toBe(before + 1)
    })

    it("concurrent attests of one hash from several keys: one created, a claim per key", async () => {
      const keys = await Promise.all(Array.from({ length: 10 }, (_, i) => server.createKey({ label: `k${i}` })))
      const hash = randomHash()
      const replies = await Promise.all(
        keys.flatMap(({ key }) => [0, 1, 2].map(() => client(server.url, key).post("/v1/attest", { hash_hex: hash, source: key.slice(-8) })))
      )
      expect(replies.every((r) => r.status === 201 || r.status === 200)).toBe(true)
      expect(replies.filter((r) => r.status === 201)).toHaveLength(1)
      expect(new Set(replies.map((r) => r.body.id)).size).toBe(1)
      // every reply of one key has that key's claim, and claims differ between keys
      const claimByKey = new Map<string, Set<number>>()
      replies.forEach((r, i) => {
        const k = keys[Math.floor(i / 3)]!.key
        if (!claimByKey.has(k)) claimByKey.set(k, new Set())
        claimByKey.get(k)!.add(r.body.claim_id)
        expect(r.body.source).toBe(k.slice(-8))
      })
      for (const ids of claimByKey.values()) expect(ids.size).toBe(1)
      expect(new Set([...claimByKey.values()].map((s) => [...s][0])).size).toBe(keys.length)
    })

    it("two keys, sequentially: the second gets existing and its own claim_id", async () => {
      const a = await server.createKey()
      const b = await server.createKey()
      const hash = randomHash()
      const ra = await client(server.url, a.key).post("/v1/attest", { hash_hex: hash })
      const rb = await client(server.url, b.key).post("/v1/attest", { hash_hex: hash })
      expect(ra.status).toBe(201)
      expect(rb.status).toBe(200)
      expect(rb.body.status).toBe("existing")
      expect(rb.body.id).toBe(ra.body.id)
      expect(rb.body.claim_id).not.toBe(ra.body.claim_id)
    })

    it("20 concurrent batch attests overlapping in hashes: each hash created exactly once", async () => {
      const keys = await Promise.all([server.createKey(), server.createKey()])
      const before = (await statsOf(server.url)).total_attestations
      const pool = Array.from({ length: 40 }, randomHash)
      // batch i takes 15 consecutive hashes starting at 2i (mod 40): heavy overlap, different orders
      const batches = Array.from({ length: 20 }, (_, i) => {
        const hs = Array.from({ length: 15 }, (_, j) => pool[(2 * i + j) % pool.length]!)
        return i % 3 === 0 ? hs.reverse() : hs
      })
      const replies = await Promise.all(
        batches.map((hashes, i) => client(server.url, keys[i % 2]!.key).post(i % 2 ? "/v1/attest/batch" : "/attest/batch", { hashes }))
      )
      for (const r of replies) expect(r.status, r.text.slice(0, 200)).toBe(200)
      const covered = new Set(batches.flat())
      const totalCreated = replies.reduce((n, r) => n + r.body.created, 0)
      expect(totalCreated).toBe(covered.size)
      for (const [i, r] of replies.entries()) {
        expect(r.body.created + r.body.existing).toBe(batches[i]!.length)
        expect(r.body.attestations).toHaveLength(batches[i]!.length)
      }
      const idOf = new Map<string, string>()
      const createdCount = new Map<string, number>()
      const claimOf = new Map<string, number>()
      replies.forEach((r, i) => {
        for (const a of r.body.attestations) {
          const prev = idOf.get(a.hash_hex)
          if (prev) expect(a.id).toBe(prev)
          idOf.set(a.hash_hex, a.id)
          if (a.status === "created") createdCount.set(a.hash_hex, (createdCount.get(a.hash_hex) ?? 0) + 1)
          // one claim per (key, attestation)
          const ck = `${i % 2}:${a.hash_hex}`
          const prevClaim = claimOf.get(ck)
          if (prevClaim !== undefined) expect(a.claim_id).toBe(prevClaim)
          claimOf.set(ck, a.claim_id)
        }
      })
      expect(idOf.size).toBe(covered.size)
      for (const h of covered) expect(createdCount.get(h), h).toBe(1)
      expect(new Set(idOf.values()).size).toBe(covered.size)
      expect((await statsOf(server.url)).total_attestations).toBe(before + covered.size)
    })

    it("single and batch attests racing on the same hashes agree", async () => {
      const { key } = await server.createKey()
      const pool = Array.from({ length: 8 }, randomHash)
      const replies = await Promise.all([
        ...pool.map((h) => client(server.url, key).post("/v1/attest", { hash_hex: h })),
        client(server.url, key).post("/v1/attest/batch", { hashes: pool }),
        client(server.url, key).post("/v1/attest/batch", { hashes: [...pool].reverse() })
      ])
      const singles = replies.slice(0, pool.length)
      const batchReplies = replies.slice(pool.length)
      let created = singles.filter((r) => r.status === 201).length
      for (const b of batchReplies) {
        expect(b.status).toBe(200)
        created += b.body.created
      }
      expect(created).toBe(pool.length)
      for (const [i, s] of singles.entries()) {
        for (const b of batchReplies) {
          const item = b.body.attestations.find((a: any) => a.hash_hex === pool[i])
          expect(item.id).toBe(s.body.id)
          expect(item.claim_id).toBe(s.body.claim_id)
        }
      }
    })
  })
}
