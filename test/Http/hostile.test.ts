/**
 * Issue 11 §1/§2: U+0000 and deep JSON are refused at the edge the same way on
 * both stores and both HTTP paths, and one bad item never fails the other
 * requests sharing its group-commit transaction.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, rawRequest, startTestServer, type TestServer } from "../helpers/server.js"

const NUL = "a\u0000b"

for (const dialect of await dialects()) {
  describe(`hostile input (${dialect})`, () => {
    let server: TestServer

    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("public routes with U+0000 in a path id answer VALIDATION_ERROR, not 500", async () => {
      for (const path of ["/v1/brand/a%00b", "/v1/derived-lists/a%00b/signature", "/brand/a%00b"]) {
        const r = await client(server.url).get(path)
        expectEnvelope(r, 400, "VALIDATION_ERROR")
      }
    })

    it("U+0000 in source, extra_data, its keys, tags and labels is VALIDATION_ERROR and stores nothing", async () => {
      const { key } = await server.createKey()
      const c = client(server.url, key)
      const hash = randomHash()
      for (const body of [
        { hash_hex: hash, source: NUL },
        { hash_hex: hash, extra_data: { note: NUL } },
        { hash_hex: hash, extra_data: { [NUL]: 1 } },
        { hashes: [hash], source: NUL }
      ]) {
        const path = "hashes" in body ? "/v1/attest/batch" : "/v1/attest"
        expectEnvelope(await c.post(path, body), 400, "VALIDATION_ERROR")
      }
      expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.found ?? false).toBe(false)
      const ok = await c.post("/v1/attest", { hash_hex: hash })
      expect(ok.status).toBe(201)
      expectEnvelope(await c.put(`/v1/attestation/${ok.body.id}/tags`, { tags: [{ key: NUL, value: "x" }] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await c.put(`/v1/attestation/${ok.body.id}/tags`, { tags: [{ key: "k", value: NUL }] }), 400, "VALIDATION_ERROR")
      // an escaped backslash followed by u0000 is ordinary text
      const literal = await c.post("/v1/attest", { hash_hex: randomHash(), source: "\\u0000" })
      expect(literal.status).toBe(201)
      expect(literal.body.source).toBe("\\u0000")
    })

    it("source length counts code points: 100 emoji fit, 101 do not", async () => {
      const { key } = await server.createKey()
      const ok = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), source: "😀".repeat(100) })
      expect(ok.status).toBe(201)
      expect(ok.body.source).toBe("😀".repeat(100))
      expectEnvelope(await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), source: "😀".repeat(101) }), 400, "VALIDATION_ERROR")
    })

    it("JSON nested 3,000 deep (also inside extra_data) is VALIDATION_ERROR, not 500", async () => {
      const { key } = await server.createKey()
      const deep = "[".repeat(3000) + "]".repeat(3000)
      expectEnvelope(await client(server.url).post("/v1/verify", deep), 400, "VALIDATION_ERROR")
      expectEnvelope(await client(server.url, key).post("/v1/attest", deep), 400, "VALIDATION_ERROR")
      const inExtra = `{"hash_hex":"${randomHash()}","extra_data":{"a":${"[".repeat(4100)}${"]".repeat(4100)}}}`
      expectEnvelope(await client(server.url, key).post("/v1/attest", inExtra), 400, "VALIDATION_ERROR")
      // chunked (no Content-Length, measured as it arrives): same answer
      const chunked = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/attest",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "transfer-encoding": "chunked" },
        chunks: [`{"hash_hex":"${randomHash()}","source":"a\\u0000b"}`]
      })
      expectEnvelope(chunked, 400, "VALIDATION_ERROR")
    })

    it("property: valid and invalid attests mixed in one group-commit batch — valid ones succeed, invalid ones get 4xx", async () => {
      const keys = await Promise.all([0, 1, 2].map(() => server.createKey()))
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.record({ bad: fc.boolean(), key: fc.integer({ min: 0, max: 2 }), field: fc.constantFrom("source", "extra", "tag") }), {
            minLength: 2,
            maxLength: 30
          }),
          async (items) => {
            const replies = await Promise.all(items.map((item) => {
              const value = item.bad ? NUL : "fine"
              const body = item.field === "source"
                ? { hash_hex: randomHash(), source: value }
                : { hash_hex: randomHash(), extra_data: item.field === "extra" ? { v: value } : { [value]: true } }
              return client(server.url, keys[item.key]!.key).post("/v1/attest", body)
            }))
            replies.forEach((r, i) => {
              if (items[i]!.bad) {
                expect(r.status).toBeGreaterThanOrEqual(400)
                expect(r.status).toBeLessThan(500)
              } else {
                expect(r.status).toBe(201)
              }
            })
          }
        ),
        { numRuns: 15 }
      )
    })
  })
}
