import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

for (const dialect of await dialects()) {
  describe(`smoke (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("attests and verifies", async () => {
      const { key } = await server.createKey()
      const api = client(server.url, key)
      const hash = randomHash()
      const r = await api.post("/v1/attest", { hash_hex: hash, source: "s" })
      expect(r.status).toBe(201)
      expect(r.body.status).toBe("created")
      const again = await api.post("/attest", { hash_hex: hash })
      expect(again.status).toBe(200)
      expect(again.body.id).toBe(r.body.id)
      const v = await client(server.url).post("/v1/verify", { hash_hex: hash })
      expect(v.body.exists).toBe(true)
      expect(v.body.source).toBeUndefined()
    })
  })
}
