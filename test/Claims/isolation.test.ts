/**
 * The isolation matrix (spec 1.5, 5.8): keys A and B claim the same hash with
 * different source / extra_data / tags; A also holds a share token (used, so
 * it has an access log) and a webhook. No endpoint ever returns any of A's
 * private strings to B, nor on public endpoints — checked recursively over
 * every property name and string value, the raw text and the headers.
 */
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { attestWith, expectNoSecrets, marker } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, type Reply, startTestServer, type TestServer } from "../helpers/server.js"
import { sleep } from "../helpers/process.js"

const lower = (s: string) => s.toLowerCase().replace(/[^a-z0-9]/g, "")

for (const dialect of await dialects()) {
  describe(`isolation of private claim data (${dialect})`, () => {
    let server: TestServer
    let A: ReturnType<typeof client>
    let B: ReturnType<typeof client>
    let hash: string
    let id: string
    let hashB2: string
    const secrets: Array<string> = []
    let aToken = ""
    let aTokenId = ""
    let aWebhookId = ""
    let bSource = ""
    let kid = ""

    beforeAll(async () => {
      // short seal interval, so T1 endpoints (tsa, merkle, evidence.t1) have something to show
      server = await startTestServer(dialect, { sealInterval: Duration.millis(400) })
    })
    afterAll(async () => {
      await server?.close()
    })

    it("setup: A and B claim the same hash with different private data", async () => {
      A = client(server.url, (await server.createKey({ label: "A" })).key)
      B = client(server.url, (await server.createKey({ label: "B" })).key)
      hash = randomHash()
      const sA = marker("A-SOURCE")
      const xKeyA = marker("A-EXTRA-KEY")
      const xValA = marker("A-EXTRA-VAL")
      const tagKeyA = "asecret" + lower(marker("k")).slice(0, 20)
      const tagValA = marker("A-TAG-VAL")
      const encA = Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString("hex")
      const nonceA = Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("hex")

      const a = await attestWith(A, { hash_hex: hash, source: sA, extra_data: { [xKeyA]: xValA, nested: { deep: [xValA + "-deep"] } } })
      id = a.id
      bSource = marker("B-SOURCE")
      const b = await attestWith(B, { hash_hex: hash, source: bSource, extra_data: { b: marker("B-EXTRA") } })
      expect(b.id).toBe(id)
      expect(b.status).toBe("existing")
      const tags = await A.put(`/v1/attestation/${id}/tags`, {
        tags: [{ key: tagKeyA, value: tagValA }, { key: "shared-key", value: tagValA + "-2" }, { key: "enc", value_enc: encA, value_nonce: nonceA }]
      })
      expect(tags.status).toBe(200)
      expect((await B.put(`/v1/attestation/${id}/tags`, { tags: [{ key: "shared-key", value: "b-value" }] })).status).toBe(200)
      // A's claim is updated once more, so its etag is the PATCHed one
      const p = await A.patch(`/v1/attestation/${id}/metadata`, { source: sA })
      expect(p.status).toBe(200)
      const label = marker("A-TOKEN-LABEL")
      const tok = await A.post("/v1/share-tokens", { attestation_ids: [id], expires_in: 3600, recipient_label: label })
      expect(tok.status).toBe(201)
      aToken = tok.body.share_token
      aTokenId = tok.body.id
      expect((await client(server.url, aToken).get(`/v1/attestation/${id}/metadata`)).status).toBe(200)
      const hookPath = marker("A-HOOK-PATH")
      const hookLabel = marker("A-HOOK-LABEL")
      const wh = await A.post("/v1/webhook/register", { url: `http://127.0.0.1:9/${hookPath}`, events: ["t1_complete"], label: hookLabel })
      expect(wh.status).toBe(201)
      aWebhookId = wh.body.id
      // a second hash only B claims
      hashB2 = randomHash()
      await attestWith(B, { hash_hex: hashB2, source: marker("B2") })
      // wait until T1 (sealed) so the T1 proof endpoints answer with data
      const deadline = Date.now() + 20_000
      while ((await client(server.url).get(`/v1/attestation/${id}/status`)).body.level === "T0") {
        if (Date.now() > deadline) throw new Error("not sealed")
        await sleep(100)
      }
      kid = (await client(server.url).get(`/v1/attestation/${id}`)).body.signing_key_id
      secrets.push(
        sA, xKeyA, xValA, tagKeyA, tagValA, encA, nonceA, aToken, aToken.slice(4), aTokenId, label,
        a.etag, p.body.etag, hookPath, hookLabel, aWebhookId, wh.body.signing_secret
      )
    })

    it("B's authenticated endpoints never return A's private data", async () => {
      expect(secrets.length).toBeGreaterThan(10)
      /** `sent`: what the request itself carried (an error message may echo B's own input back). */
      const check = (what: string, r: Reply, sent = "") => {
        expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBeLessThan(500)
        expectNoSecrets(`B ${what}`, r, secrets.filter((s) => !sent.includes(s)))
        return r
      }
      const m = check("GET metadata", await B.get(`/v1/attestation/${id}/metadata`))
      expect(m.body.source).toBe(bSource)
      check("GET metadata (alias)", await B.get(`/attestation/${id}/metadata`))
      check("PATCH metadata", await B.patch(`/v1/attestation/${id}/metadata`, { extra_data: { b: "patched" } }))
      check("PATCH metadata stale If-Match", await B.patch(`/v1/attestation/${id}/metadata`, { source: "z" }, { "if-match": '"stale"' }))
      const t = check("GET tags", await B.get(`/v1/attestation/${id}/tags`))
      expect(t.body.tags).toEqual([{ key: "shared-key", value: "b-value" }])
      check("PUT tags", await B.put(`/v1/attestation/${id}/tags`, { tags: [{ key: "more", value: "b" }] }))
      check("query shared-key", await B.post("/v1/tags/query", { filter: { and: [{ key: "shared-key", value: "b-value" }] } }))
      check("query more", await B.post("/v1/tags/query", { filter: { and: [{ key: "more", value: "b" }] }, limit: 1000 }))
      // B guessing A's tag (request carries the secret; the answer must be empty)
      const guess = await B.post("/v1/tags/query", { filter: { and: [{ key: "shared-key", value: secrets[4]! + "-2" }] } })
      expect(guess.body.attestations).toEqual([])
      // B deleting A's tag key: 404 (B has no such tag), and A's tag stays
      expectEnvelope(await B.delete(`/v1/attestation/${id}/tags/${secrets[3]}`), 404, "NOT_FOUND")
      expect((await A.get(`/v1/attestation/${id}/tags`)).body.tags).toHaveLength(3)
      const v = check("verify", await B.post("/v1/verify", { hash_hex: hash }))
      expect(v.body.source).toBe(bSource)
      check("verify/batch", await B.post("/v1/verify/batch", { hashes: [hash, hashB2, randomHash()] }))
      const d = check("verify/batch detailed", await B.post("/v1/verify/batch", { hashes: [hash, hashB2], detailed: true }))
      expect(d.body.results[0].source).toBe(bSource)
      check("attest again", await B.post("/v1/attest", { hash_hex: hash }))
      check("attest batch", await B.post("/v1/attest/batch", { hashes: [hash, hashB2] }))
      check("share-tokens list", await B.get("/v1/share-tokens"))
      expectEnvelope(check("share-token get", await B.get(`/v1/share-tokens/${aTokenId}`), aTokenId), 404, "NOT_FOUND")
      expectEnvelope(check("share-token log", await B.get(`/v1/share-tokens/${aTokenId}/access-log`), aTokenId), 404, "NOT_FOUND")
      expectEnvelope(check("share-token revoke", await B.delete(`/v1/share-tokens/${aTokenId}`), aTokenId), 404, "NOT_FOUND")
      const bTok = check("share-token create", await B.post("/v1/share-tokens", { attestation_ids: [id], expires_in: 60 }))
      const bHolder = client(server.url, bTok.body.share_token)
      expect(check("B's token: metadata", await bHolder.get(`/v1/attestation/${id}/metadata`)).body.source).toBe(bSource)
      check("B's token: tags", await bHolder.get(`/v1/attestation/${id}/tags`))
      check("B's token: log", await B.get(`/v1/share-tokens/${bTok.body.id}/access-log`))
      check("B's token: info", await B.get(`/v1/share-tokens/${bTok.body.id}`))
      check("webhooks list", await B.get("/v1/webhooks"))
      expectEnvelope(check("webhook deliveries", await B.get(`/v1/webhook/${aWebhookId}/deliveries`), aWebhookId), 404, "NOT_FOUND")
      expectEnvelope(check("webhook delete", await B.delete(`/v1/webhook/${aWebhookId}`), aWebhookId), 404, "NOT_FOUND")
      expect((await A.get("/v1/webhooks")).body.webhooks.map((w: { id: string }) => w.id)).toEqual([aWebhookId])
      // A's data is still A's
      expect((await A.get(`/v1/attestation/${id}/metadata`)).body.source).toBe(secrets[0])
      expect((await A.get(`/v1/share-tokens/${aTokenId}`)).body.status).toBe("active")
    })

    it("public endpoints (no key, B's key, A's share token as bearer, junk bearer) never return A's private data", async () => {
      const callers: Array<[string, ReturnType<typeof client>]> = [
        ["anonymous", client(server.url)],
        ["B", B],
        ["A's share token", client(server.url, aToken)],
        ["junk bearer", client(server.url, "atk_live_" + "z".repeat(32))]
      ]
      const gets = [
        `/v1/attestation/${id}`,
        `/v1/attestation/${id}/status`,
        `/v1/attestation/${id}/signature`,
        `/v1/attestation/${id}/tsa`,
        `/v1/attestation/${id}/tsa/details`,
        `/v1/attestation/${id}/merkle`,
        `/v1/attestation/${id}/ots`,
        `/v1/attestation/${id}/evidence`,
        `/attestation/${id}/evidence`,
        "/v1/keys",
        `/v1/keys/${kid}`,
        "/v1/info",
        "/v1/stats",
        "/v1/healthz",
        "/info",
        "/stats"
      ]
      for (const [who, c] of callers) {
        for (const path of gets) {
          const r = await c.get(path)
          expect(r.status, `${who} GET ${path}: ${r.text.slice(0, 200)}`).toBeLessThan(500)
          expectNoSecrets(`${who} GET ${path}`, r, secrets)
        }
        const v = await c.post("/v1/verify", { hash_hex: hash })
        expect(v.status).toBe(200)
        expect(v.body.exists).toBe(true)
        expectNoSecrets(`${who} verify`, v, secrets)
        if (who !== "B") expect(v.body).not.toHaveProperty("source")
        const vb = await c.post("/v1/verify/batch", { hashes: [hash, hashB2] })
        expect(vb.status).toBe(200)
        expectNoSecrets(`${who} verify/batch`, vb, secrets)
        if (who !== "B") for (const item of vb.body.results) expect(item).not.toHaveProperty("source")
        const alias = await c.post("/verify", { hash_hex: hash })
        expectNoSecrets(`${who} /verify`, alias, secrets)
      }
      // the T1 endpoints really answered with data (so the scan covered something)
      expect((await client(server.url).get(`/v1/attestation/${id}/merkle`)).status).toBe(200)
      expect((await client(server.url).get(`/v1/attestation/${id}/evidence`)).body.t1).toBeTruthy()
    })
  })
}
