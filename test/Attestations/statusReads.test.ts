/**
 * Verifies sent together are read together (Attestations/StatusReads.ts): many concurrent
 * POST /v1/verify, public and from two keys with claims of their own on the same digests,
 * mixed with digests nobody attested, each get their own answer — the attestation, and the
 * `source` of the asking key's claim only — on both stores.
 */
import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { client, startTestServer, type TestServer } from "../helpers/server.js"

const hashOf = (text: string) => createHash("sha256").update(text).digest("hex")

for (const dialect of await dialects()) {
  describe(`concurrent verifies read together (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("each of 120 concurrent verifies gets its own digest's answer and its own key's source", async () => {
      const [a, b] = [await server.createKey(), await server.createKey()]
      const shared = Array.from({ length: 10 }, (_, i) => hashOf(`shared ${dialect} ${i} ${Math.random()}`))
      const onlyA = Array.from({ length: 5 }, (_, i) => hashOf(`only a ${dialect} ${i} ${Math.random()}`))
      const unknown = Array.from({ length: 5 }, (_, i) => hashOf(`unknown ${dialect} ${i} ${Math.random()}`))
      const ids = new Map<string, string>()
      for (const h of [...shared, ...onlyA]) {
        const r = await client(server.url, a.key).post("/v1/attest", { hash_hex: h, source: `a:${h.slice(0, 8)}` })
        expect([200, 201]).toContain(r.status)
        ids.set(h, r.body.id)
      }
      for (const h of shared) {
        const r = await client(server.url, b.key).post("/v1/attest", { hash_hex: h, source: `b:${h.slice(0, 8)}` })
        expect(r.status).toBe(200)
      }

      const asks = [...shared, ...onlyA, ...unknown].flatMap((hash) =>
        (["public", "a", "b"] as const).flatMap((who) => [{ hash, who }, { hash, who }]))
      const answers = await Promise.all(asks.map(({ hash, who }) =>
        client(server.url, who === "public" ? undefined : who === "a" ? a.key : b.key).post("/v1/verify", { hash_hex: hash })))

      asks.forEach(({ hash, who }, i) => {
        const r = answers[i]!
        expect(r.status).toBe(200)
        if (unknown.includes(hash)) {
          expect(r.body).toEqual({ exists: false, hash_hex: hash })
          return
        }
        expect(r.body).toMatchObject({ exists: true, hash_hex: hash, id: ids.get(hash) })
        const holds = who === "a" || (who === "b" && shared.includes(hash))
        if (holds) expect(r.body.source).toBe(`${who}:${hash.slice(0, 8)}`)
        else expect(r.body).not.toHaveProperty("source")
      })
    })
  })
}
