/**
 * Every operation of the Promise client (`attestd/client`), typed from the
 * contract, against a real demo server with short windows on both stores:
 * attest to T2, then each read, the caller's claim, share tokens, webhooks,
 * inventory and derived lists, the simulated chain, and the portable verifier
 * re-exported beside the client.
 */
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AttestdError, createClient, deriveValues, hashString, verifyBundle, verifyWebhook } from "../../src/client.js"
import { poll, randomHash } from "../helpers/anchoring.js"
import { dialects } from "../helpers/databases.js"
import { startTestServer, type TestServer } from "../helpers/server.js"
import { startReceiver } from "../helpers/webhookReceiver.js"

const HEX64 = /^[0-9a-f]{64}$/

for (const dialect of await dialects()) {
  describe(`Promise client, every operation (${dialect})`, () => {
    let server: TestServer
    let c: ReturnType<typeof createClient>
    let id = ""
    let hash = ""
    beforeAll(async () => {
      server = await startTestServer(dialect, {
        sealInterval: Duration.millis(300),
        anchorInterval: Duration.seconds(1),
        otsUpgradeInterval: Duration.millis(300),
        demoConfirmDelay: Duration.seconds(2)
      })
      c = createClient({ baseUrl: server.url, apiKey: (await server.createKey({ orgId: `org-${dialect}` })).key })
      hash = await hashString(`operations ${dialect} ${Math.random()}`)
      const a = await c.attest({ hash_hex: hash, source: "ops" })
      id = a.id
      await poll("T2", async () => (await c.status(id)).level === "T2", 30_000, 200)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("info, healthz, keys, key, stats, tsa certificates, test vectors", async () => {
      expect((await c.info()).features).toBeTypeOf("object")
      expect(await c.healthz()).toHaveProperty("status")
      const keys = await c.keys()
      const kid = String(keys.keys[0]!.kid)
      expect((await c.key(kid)).kid).toBe(kid)
      expect(await c.stats()).toBeTypeOf("object")
      expect(await c.tsaCertificates()).toBeTypeOf("object")
      expect(Object.keys(await c.testVectors()).length).toBeGreaterThan(0)
    })

    it("lookup, status, signature, evidence, merkle, tsa, tsa details, ots, ots proof; the evidence verifies", async () => {
      expect((await c.lookup(id)).hash_hex).toBe(hash)
      expect((await c.status(id)).level).toBe("T2")
      expect(await c.signature(id)).toHaveProperty("signature")
      const evidence = await c.evidence(id)
      expect([evidence.id, evidence.level]).toEqual([id, "T2"])
      expect(await c.merkle(id)).toBeTypeOf("object")
      expect(await c.tsa(id)).toBeTypeOf("object")
      expect(await c.tsaDetails(id)).toBeTypeOf("object")
      expect(await c.ots(id)).toBeTypeOf("object")
      const proof = await c.otsProof(id)
      expect(proof).toBeInstanceOf(Uint8Array)
      // the OpenTimestamps magic header
      expect(Array.from(proof.slice(0, 8))).toEqual([0x00, 0x4f, 0x70, 0x65, 0x6e, 0x54, 0x69, 0x6d])
      // the portable verifier, trusting the instance's keys and its simulated chain
      const report = await verifyBundle(evidence, {
        hash,
        keys: (await c.keys()).keys,
        tsaCaPem: (await c.tsaCertificates()).certificates.map((x) => x.pem),
        simulatedSources: [`${server.url}/v1/simulated-chain`]
      })
      expect([report.verdict, report.verified_level]).toEqual(["verified", "T2"])
      const tampered = await verifyBundle(evidence, { hash: randomHash(), keys: (await c.keys()).keys })
      expect(tampered.verdict).toBe("failed")
    })

    it("verify, verify batch, attest batch", async () => {
      expect((await c.verify({ hash_hex: hash })).level).toBe("T2")
      const other = randomHash()
      const batch = await c.attestBatch({ hashes: [hash, other] })
      expect([batch.created, batch.existing]).toEqual([1, 1])
      const v = await c.verifyBatch({ hashes: [hash, other, randomHash()] })
      expect([v.found, v.count]).toEqual([2, 3])
    })

    it("metadata (If-Match), tags, tag query", async () => {
      const m = await c.getMetadata(id)
      expect(m.source).toBe("ops")
      expect((await c.patchMetadata(id, { extra_data: { po: 7 } }, m.etag)).extra_data).toEqual({ po: 7 })
      const stale = await c.patchMetadata(id, { source: "x" }, m.etag).catch((e) => e)
      expect([stale instanceof AttestdError, stale.status]).toEqual([true, 412])
      await c.putTags(id, { tags: [{ key: "env", value: "prod" }] })
      expect((await c.getTags(id)).tags).toEqual([{ key: "env", value: "prod" }])
      const q = await c.queryTags({ filter: { and: [{ key: "env", value: "prod" }] } })
      expect(JSON.stringify(q)).toContain(hash)
      expect((await c.deleteTag(id, "env")).deleted).toBe(true)
      expect((await c.getTags(id)).tags).toEqual([])
      const gone = await c.attest({ hash_hex: randomHash(), source: "to delete" })
      expect((await c.deleteMetadata(gone.id)).deleted).toBe(true)
      expect([(await c.getMetadata(gone.id).catch((e) => e)).status]).toEqual([404])
    })

    it("share tokens: create, use, list, get, access log, revoke", async () => {
      await c.patchMetadata(id, { source: "shared" })
      const t = await c.createShareToken({ attestation_ids: [id], expires_in: 600, recipient_label: "auditor" })
      const recipient = createClient({ baseUrl: server.url, apiKey: t.share_token })
      expect((await recipient.getMetadata(id)).source).toBe("shared")
      expect((await c.listShareTokens()).share_tokens.map((x) => x.id)).toContain(t.id)
      expect((await c.getShareToken(t.id)).uses).toBe(1)
      expect(await c.shareTokenAccessLog(t.id)).toBeTypeOf("object")
      expect((await c.revokeShareToken(t.id)).revoked).toBe(true)
      const e = await recipient.getMetadata(id).catch((x) => x)
      expect([e instanceof AttestdError, e.status]).toEqual([true, 401])
    })

    it("webhooks: register, list, deliveries, remove; verifyWebhook is the portable one", async () => {
      const receiver = await startReceiver()
      try {
        const w = await c.registerWebhook({ url: receiver.url, events: ["t1_complete"] })
        expect(w.signing_secret).toMatch(HEX64)
        expect((await c.listWebhooks()).webhooks.map((x) => x.id)).toContain(w.id)
        await c.attest({ hash_hex: randomHash() })
        const [got] = await receiver.waitForRequests(1, 15_000)
        expect(verifyWebhook(new Uint8Array(got!.raw), got!.headers as Record<string, string>, w.signing_secret, { toleranceSeconds: 600 }).ok).toBe(true)
        expect((await c.webhookDeliveries(w.id)).deliveries.length).toBeGreaterThan(0)
        expect((await c.removeWebhook(w.id)).deleted).toBe(true)
      } finally {
        await receiver.close()
      }
    })

    it("scan, inventory stats, derived lists (create, list, get, match, signature, access log, revoke)", async () => {
      const s = await c.scan({ hashes: [hash, randomHash()] })
      expect([s.matched, s.total_scanned]).toEqual([1, 2])
      expect((await c.inventoryStats()).total_claims).toBeGreaterThan(0)
      const list = await c.createDerivedList({ hashes: [hash], expires_in_hours: 1 })
      expect((await c.listDerivedLists()).derived_lists.map((x) => x.id)).toContain(list.id)
      expect((await c.getDerivedList(list.id)).item_count).toBe(1)
      const anon = createClient({ baseUrl: server.url })
      const m = await anon.matchDerivedList(list.id, { list_key: list.list_key, values: deriveValues(list.list_key, [hash, randomHash()]) })
      expect([m.matched, m.total]).toEqual([1, 2])
      expect(await anon.derivedListSignature(list.id)).toBeTypeOf("object")
      expect(await c.derivedListAccessLog(list.id)).toHaveProperty("access_log")
      expect((await c.revokeDerivedList(list.id)).revoked).toBe(true)
    })

    it("simulated chain, brand; errors are AttestdError with the envelope's code", async () => {
      const chain = await c.simulatedChainHeaders()
      const { hash: blockHash, header, height } = chain.headers.at(-1)!
      expect(await c.simulatedBlockHash(height)).toBe(blockHash)
      expect(await c.simulatedBlockHeader(blockHash)).toBe(header)
      const b = await c.brand("no-such-brand").catch((x) => x)
      expect([b instanceof AttestdError, b.status, b.code]).toEqual([true, 404, "NOT_FOUND"])
      const bad = await c.attest({ hash_hex: "not a hash" }).catch((x) => x)
      expect([bad.status, bad.code]).toEqual([400, "VALIDATION_ERROR"])
    })
  })
}
