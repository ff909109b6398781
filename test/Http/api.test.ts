/**
 * Every T0 endpoint through a real server, under /v1 and as its unprefixed
 * alias, on each store. Error classes are in errors.test.ts, keys and limits in
 * auth.test.ts, races in concurrency.test.ts.
 */
import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { importLines } from "../../src/Attestations/Import.js"
import { dialects } from "../helpers/databases.js"
import { historicalKey, historicalRecord } from "../helpers/historical.js"
import {
  allKeys,
  client,
  expectEnvelope,
  randomHash,
  startTestServer,
  type TestServer,
  verifyWithJwk,
  WIRE_TIME
} from "../helpers/server.js"

const PREFIXES = ["/v1", ""] as const
const PRIVATE_FIELDS = ["source", "extra_data", "tags"]

const expectNoPrivateFields = (body: unknown, where: string) => {
  const keys = allKeys(body)
  for (const f of PRIVATE_FIELDS) expect(keys.has(f), `${where} leaks ${f}`).toBe(false)
}

const sortedKeys = (o: object) => Object.keys(o).sort()

for (const dialect of await dialects()) {
  describe(`HTTP API (${dialect})`, () => {
    let server: TestServer
    let key: string
    let first: { id: string; hash_hex: string }

    beforeAll(async () => {
      server = await startTestServer(dialect)
      key = (await server.createKey({ label: "owner" })).key
      const r = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash() })
      expect(r.status).toBe(201)
      first = r.body
    })
    afterAll(async () => {
      await server?.close()
    })

    describe("POST attest", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/attest: 201 created, then 200 existing with the same id and claim`, async () => {
          const api = client(server.url, key)
          const hash = randomHash()
          const r = await api.post(`${prefix}/attest`, { hash_hex: hash, source: "erp-7", extra_data: { sku: "A-1", n: 2 } })
          expect(r.status).toBe(201)
          const b = r.body
          expect(b).toMatchObject({ hash_hex: hash, status: "created", source: "erp-7", extra_data: { sku: "A-1", n: 2 } })
          expect(b.id).toMatch(/^att_[A-Za-z0-9_-]{24}$/)
          expect(b.timestamp).toMatch(WIRE_TIME)
          expect(typeof b.signature).toBe("string")
          expect(Buffer.from(b.signature, "base64").toString("base64")).toBe(b.signature)
          expect(Number.isInteger(b.claim_id)).toBe(true)
          expect(typeof b.etag).toBe("string")
          expect(b.etag.length).toBeGreaterThan(0)
          expect(b.format_version).toBe("2.0.0")
          expect(typeof b.signing_key_id).toBe("string")
          expect(r.headers.get("content-type")).toMatch(/application\/json/)

          const again = await api.post(`${prefix}/attest`, { hash_hex: hash, source: "other", extra_data: { x: 1 } })
          expect(again.status).toBe(200)
          expect(again.body.status).toBe("existing")
          expect(again.body.id).toBe(b.id)
          expect(again.body.timestamp).toBe(b.timestamp)
          expect(again.body.signature).toBe(b.signature)
          expect(again.body.claim_id).toBe(b.claim_id)
          // a re-attest never changes an existing claim (CONTRACT §5)
          expect(again.body.source).toBe("erp-7")
          expect(again.body.extra_data).toEqual({ sku: "A-1", n: 2 })
        })
      }

      it("the alias and the prefix share one store", async () => {
        const api = client(server.url, key)
        const hash = randomHash()
        const a = await api.post("/attest", { hash_hex: hash })
        const b = await api.post("/v1/attest", { hash_hex: hash })
        expect(a.status).toBe(201)
        expect(b.status).toBe(200)
        expect(b.body.id).toBe(a.body.id)
      })

      it("without source and extra_data the claim carries nulls", async () => {
        const r = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash() })
        expect(r.status).toBe(201)
        expect(r.body.source).toBeNull()
        expect(r.body.extra_data).toBeNull()
      })

      it("a second key attesting the same hash gets existing and its own claim", async () => {
        const other = (await server.createKey({ label: "second" })).key
        const hash = randomHash()
        const a = await client(server.url, key).post("/v1/attest", { hash_hex: hash, source: "mine" })
        const b = await client(server.url, other).post("/v1/attest", { hash_hex: hash, source: "theirs" })
        expect(a.status).toBe(201)
        expect(b.status).toBe(200)
        expect(b.body.status).toBe("existing")
        expect(b.body.id).toBe(a.body.id)
        expect(b.body.claim_id).not.toBe(a.body.claim_id)
        expect(b.body.source).toBe("theirs")
      })

      it("source over 100 characters is 400 VALIDATION_ERROR naming source", async () => {
        const r = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), source: "x".repeat(101) })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
        expect(JSON.stringify(r.body.details)).toContain("source")
        const ok = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), source: "x".repeat(100) })
        expect(ok.status).toBe(201)
      })

      it("client_encrypted extra_data is stored opaque, whatever its layout", async () => {
        const api = client(server.url, key)
        for (const blob of [
          { alg: "A256GCM", iv: "AAECAwQFBgcICQoL", ciphertext: "q83vEjRWeJA" },
          { v: 1, iv: "AAECAwQFBgcICQoL", ct: "q83v+jRWeJA=", tag: "AAAAAAAAAAAAAAAAAAAAAA==" },
          { plain: "text" }
        ]) {
          const r = await api.post("/v1/attest", { hash_hex: randomHash(), extra_data: blob, client_encrypted: true })
          expect(r.status).toBe(201)
          expect(JSON.stringify(r.body.extra_data)).toBe(JSON.stringify(blob))
          expect(r.body.client_encrypted).toBe(true)
        }
      })

      it("extra_data over 16 KiB is 400 and writes nothing", async () => {
        const hash = randomHash()
        const r = await client(server.url, key).post("/v1/attest", { hash_hex: hash, extra_data: { pad: "x".repeat(17 * 1024) } })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
        expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.exists).toBe(false)
      })

      it("extra_data must be an object", async () => {
        const r = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), extra_data: [1, 2] })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
        expect(JSON.stringify(r.body.details)).toContain("extra_data")
      })
    })

    describe("POST attest/batch", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/attest/batch: counters and items`, async () => {
          const api = client(server.url, key)
          const known = randomHash()
          const pre = await api.post("/v1/attest", { hash_hex: known })
          expect(pre.status).toBe(201)
          const fresh = [randomHash(), randomHash(), randomHash()]
          const r = await api.post(`${prefix}/attest/batch`, {
            hashes: [...fresh, known],
            source: "batch-src",
            extra_data: { lot: 9 }
          })
          expect(r.status).toBe(200)
          expect(r.body.created).toBe(3)
          expect(r.body.existing).toBe(1)
          expect(r.body.attestations).toHaveLength(4)
          for (const item of r.body.attestations) {
            expect(item.id).toMatch(/^att_[A-Za-z0-9_-]{24}$/)
            expect(item.timestamp).toMatch(WIRE_TIME)
            expect(typeof item.signature).toBe("string")
            expect(typeof item.signing_key_id).toBe("string")
            expect(typeof item.etag).toBe("string")
            expect(Number.isInteger(item.claim_id)).toBe(true)
          }
          const byHash = new Map<string, any>(r.body.attestations.map((a: any) => [a.hash_hex, a]))
          expect([...byHash.keys()].sort()).toEqual([...fresh, known].sort())
          for (const h of fresh) {
            expect(byHash.get(h)).toMatchObject({ status: "created", source: "batch-src", extra_data: { lot: 9 } })
          }
          // the existing hash keeps this key's earlier claim untouched
          expect(byHash.get(known)).toMatchObject({ status: "existing", id: pre.body.id, claim_id: pre.body.claim_id, source: null })

          const again = await api.post(`${prefix}/attest/batch`, { hashes: fresh })
          expect(again.status).toBe(200)
          expect(again.body.created).toBe(0)
          expect(again.body.existing).toBe(3)
          for (const item of again.body.attestations) {
            expect(item.id).toBe(byHash.get(item.hash_hex).id)
            expect(item.claim_id).toBe(byHash.get(item.hash_hex).claim_id)
          }
        })
      }

      it("100 hashes are accepted, 101 are 400 VALIDATION_ERROR and write nothing", async () => {
        const api = client(server.url, key)
        const hundred = Array.from({ length: 100 }, randomHash)
        const ok = await api.post("/v1/attest/batch", { hashes: hundred })
        expect(ok.status).toBe(200)
        expect(ok.body.created).toBe(100)
        const before = (await api.get("/v1/stats")).body.total_attestations
        const tooMany = Array.from({ length: 101 }, randomHash)
        const r = await api.post("/v1/attest/batch", { hashes: tooMany })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
        expect(JSON.stringify(r.body.details)).toContain("hashes")
        expect((await api.get("/v1/stats")).body.total_attestations).toBe(before)
        const v = await client(server.url).post("/v1/verify", { hash_hex: tooMany[0] })
        expect(v.body.exists).toBe(false)
      })

      it("an empty list and an invalid member are 400 naming hashes", async () => {
        const api = client(server.url, key)
        expectEnvelope(await api.post("/v1/attest/batch", { hashes: [] }), 400, "VALIDATION_ERROR")
        const bad = await api.post("/v1/attest/batch", { hashes: [randomHash(), "XYZ"] })
        expectEnvelope(bad, 400, "VALIDATION_ERROR")
        expect(JSON.stringify(bad.body.details)).toContain("hashes")
        expectEnvelope(await api.post("/v1/attest/batch", {}), 400, "VALIDATION_ERROR")
      })
    })

    describe("POST verify", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/verify: public, owner and stranger views`, async () => {
          const owner = client(server.url, key)
          const hash = randomHash()
          const a = await owner.post("/v1/attest", { hash_hex: hash, source: "owner-src", extra_data: { secret: 1 } })
          expect(a.status).toBe(201)

          const pub = await client(server.url).post(`${prefix}/verify`, { hash_hex: hash })
          expect(pub.status).toBe(200)
          expect(sortedKeys(pub.body)).toEqual(["exists", "hash_hex", "id", "level", "timestamp", "verified_at"])
          expect(pub.body).toMatchObject({ exists: true, hash_hex: hash, id: a.body.id, timestamp: a.body.timestamp, level: "T0" })
          expect(pub.body.verified_at).toMatch(WIRE_TIME)
          expectNoPrivateFields(pub.body, "public verify")

          const mine = await owner.post(`${prefix}/verify`, { hash_hex: hash })
          expect(mine.status).toBe(200)
          expect(mine.body.source).toBe("owner-src")
          expect(allKeys(mine.body).has("extra_data")).toBe(false)

          const stranger = (await server.createKey({ label: "stranger" })).key
          const theirs = await client(server.url, stranger).post(`${prefix}/verify`, { hash_hex: hash })
          expect(theirs.status).toBe(200)
          expect(theirs.body.exists).toBe(true)
          expectNoPrivateFields(theirs.body, "verify by a key without a claim")

          const missing = randomHash()
          const none = await client(server.url).post(`${prefix}/verify`, { hash_hex: missing })
          expect(none.status).toBe(200)
          expect(none.body).toEqual({ exists: false, hash_hex: missing })
        })
      }

      it("an invalid bearer key on public verify is ignored, not an error", async () => {
        const hash = first.hash_hex
        const r = await client(server.url, "atk_test_" + "A".repeat(32)).post("/v1/verify", { hash_hex: hash })
        expect(r.status).toBe(200)
        expect(r.body.exists).toBe(true)
        expectNoPrivateFields(r.body, "verify with an unknown key")
      })
    })

    describe("POST verify/batch", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/verify/batch: found, count, results; detailed needs a key`, async () => {
          const owner = client(server.url, key)
          const h1 = randomHash()
          const h2 = randomHash()
          const missing = randomHash()
          await owner.post("/v1/attest", { hash_hex: h1, source: "s1", extra_data: { a: 1 } })
          const other = (await server.createKey({ label: "other-batch" })).key
          await client(server.url, other).post("/v1/attest", { hash_hex: h2, source: "not-yours" })

          const pub = await client(server.url).post(`${prefix}/verify/batch`, { hashes: [h1, missing, h2] })
          expect(pub.status).toBe(200)
          expect(pub.body.found).toBe(2)
          expect(pub.body.count).toBe(3)
          expect(pub.body.results.map((r: any) => r.hash_hex)).toEqual([h1, missing, h2])
          expect(pub.body.results[1]).toEqual({ exists: false, hash_hex: missing })
          for (const r of [pub.body.results[0], pub.body.results[2]]) {
            expect(sortedKeys(r)).toEqual(["exists", "hash_hex", "id", "level", "timestamp", "verified_at"])
          }
          expectNoPrivateFields(pub.body, "public batch verify")

          const mine = await owner.post(`${prefix}/verify/batch`, { hashes: [h1, h2] })
          expect(mine.body.results[0].source).toBe("s1")
          expect(mine.body.results[1].source).toBeUndefined()

          const noKey = await client(server.url).post(`${prefix}/verify/batch`, { hashes: [h1], detailed: true })
          expectEnvelope(noKey, 401, "AUTH_ERROR")
          const badKey = await client(server.url, "atk_test_" + "B".repeat(32)).post(`${prefix}/verify/batch`, {
            hashes: [h1],
            detailed: true
          })
          expectEnvelope(badKey, 401, "AUTH_ERROR")

          const detailed = await owner.post(`${prefix}/verify/batch`, { hashes: [h1, missing, h2], detailed: true })
          expect(detailed.status).toBe(200)
          expect(detailed.body.found).toBe(2)
          const [d1, dm, d2] = detailed.body.results
          expect(d1).toMatchObject({ exists: true, hash_hex: h1, certification_level: "T0", t1_timestamp: null, t2_timestamp: null })
          expect(d1.t0_timestamp).toMatch(WIRE_TIME)
          expect(d1.t0_timestamp).toBe(d1.timestamp)
          expect(d1.claim).toMatchObject({ source: "s1", extra_data: { a: 1 } })
          expect(Number.isInteger(d1.claim.claim_id)).toBe(true)
          expect(dm).toMatchObject({ exists: false, hash_hex: missing })
          // another key's claim never shows
          expect(d2.exists).toBe(true)
          expect(d2.source).toBeUndefined()
          expect(d2.claim ?? null).toBeNull()
          expect(JSON.stringify(detailed.body)).not.toContain("not-yours")
        })
      }

      it("more than 100 hashes is 400", async () => {
        const r = await client(server.url).post("/v1/verify/batch", { hashes: Array.from({ length: 101 }, randomHash) })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
      })
    })

    describe("lookups", () => {
      let att: any
      let hash: string
      beforeAll(async () => {
        hash = randomHash()
        const r = await client(server.url, key).post("/v1/attest", {
          hash_hex: hash,
          source: "lookup-src",
          extra_data: { hidden: true }
        })
        expect(r.status).toBe(201)
        att = r.body
      })

      for (const prefix of PREFIXES) {
        it(`${prefix}/attestation/{id}: the public proof only`, async () => {
          const r = await client(server.url).get(`${prefix}/attestation/${att.id}`)
          expect(r.status).toBe(200)
          expect(r.body).toEqual({
            id: att.id,
            hash_hex: hash,
            timestamp: att.timestamp,
            signature: att.signature,
            format_version: "2.0.0",
            signing_key_id: att.signing_key_id
          })
        })

        it(`${prefix}/attestation/{id}/status`, async () => {
          const r = await client(server.url).get(`${prefix}/attestation/${att.id}/status`)
          expect(r.status).toBe(200)
          expect(r.body).toEqual({
            id: att.id,
            hash_hex: hash,
            level: "T0",
            t0_timestamp: att.timestamp,
            t1_timestamp: null,
            t2_timestamp: null,
            t2_bitcoin_block: null,
            signature_available: true,
            merkle_proof_available: false,
            ots_available: false
          })
        })

        it(`${prefix}/attestation/{id}/signature verifies with the published JWK`, async () => {
          const r = await client(server.url).get(`${prefix}/attestation/${att.id}/signature`)
          expect(r.status).toBe(200)
          expect(sortedKeys(r.body)).toEqual(
            ["algorithm", "format_version", "id", "registered_at", "signature", "signed_payload", "signing_key_id"]
          )
          expect(r.body).toMatchObject({
            id: att.id,
            signature: att.signature,
            algorithm: "ECDSA-P256-SHA256",
            signing_key_id: att.signing_key_id,
            format_version: "2.0.0",
            registered_at: att.timestamp
          })
          expect(r.body.registered_at).toMatch(WIRE_TIME)
          expect(r.body.signed_payload).toBe(`2.0.0|${hash}|${att.timestamp}`)
          const keys = await client(server.url).get("/v1/keys")
          const jwk = keys.body.keys.find((k: any) => k.kid === r.body.signing_key_id)
          expect(jwk).toBeDefined()
          expect(await verifyWithJwk(jwk, r.body.signed_payload, r.body.signature)).toBe(true)
          // one microsecond later is another payload
          const micros = Number(att.timestamp.slice(20, 26))
          const shifted = att.timestamp.slice(0, 20) + String((micros + 1) % 1_000_000).padStart(6, "0") + "+00:00"
          expect(await verifyWithJwk(jwk, `2.0.0|${hash}|${shifted}`, r.body.signature)).toBe(false)
        })

        it(`${prefix}/attestation/{id}/evidence: t0 only, camelCase, verifiable`, async () => {
          const r = await client(server.url).get(`${prefix}/attestation/${att.id}/evidence`)
          expect(r.status).toBe(200)
          expect(sortedKeys(r.body)).toEqual(["hash_hex", "id", "level", "t0"])
          expect(r.body).toMatchObject({ id: att.id, hash_hex: hash, level: "T0" })
          const jwkListed = (await client(server.url).get(`/v1/keys/${att.signing_key_id}`)).body
          expect(r.body.t0).toEqual({
            signature: att.signature,
            algorithm: "ECDSA-P256-SHA256",
            publicKeyId: att.signing_key_id,
            registeredAt: att.timestamp,
            formatVersion: "2.0.0",
            // The signing JWK rides along for offline verification; it is the published key.
            publicKey: jwkListed
          })
          expect(r.body.t0.registeredAt).toMatch(WIRE_TIME)
          expect(r.body.t1).toBeUndefined()
          expect(r.body.t2).toBeUndefined()
          const jwk = (await client(server.url).get(`/v1/keys/${r.body.t0.publicKeyId}`)).body
          const payload = `${r.body.t0.formatVersion}|${r.body.hash_hex}|${r.body.t0.registeredAt}`
          expect(await verifyWithJwk(jwk, payload, r.body.t0.signature)).toBe(true)
        })
      }

      it("numbers are no handles of API-created attestations: /1 … /N+2 answer the unknown-id 404 on every lookup route", async () => {
        const pub = client(server.url)
        const total = (await pub.get("/v1/stats")).body.total_attestations as number
        expect(total).toBeGreaterThan(1)
        const unknown = await pub.get("/v1/attestation/att_AAAAAAAAAAAAAAAAAAAAAAAA")
        expectEnvelope(unknown, 404, "NOT_FOUND")
        for (let n = 1; n <= total + 2; n++) {
          for (const sub of n <= 3 ? ["", "/status", "/signature", "/evidence"] : [""]) {
            const r = await pub.get(`/v1/attestation/${n}${sub}`)
            expectEnvelope(r, 404, "NOT_FOUND")
            expect(r.text, `${n}${sub}`).not.toContain(first.hash_hex)
          }
        }
        // The owner's keyed routes and the T1/T2 routes: the same 404 for a number.
        const owner = client(server.url, key)
        expect((await owner.get(`/v1/attestation/${first.id}/metadata`)).status).toBe(200)
        for (const sub of ["/metadata", "/tags", "/merkle", "/tsa", "/tsa/details", "/ots", "/ots/proof"]) {
          expectEnvelope(await owner.get(`/v1/attestation/1${sub}`), 404, "NOT_FOUND")
        }
        for (const prefix of PREFIXES) {
          const r = await pub.get(`${prefix}/attestation/${first.id}`)
          expect(r.status).toBe(200)
          expect(r.body.legacy_id).toBeUndefined()
        }
      })

      it("an imported historical record's legacy number resolves on every lookup route and is returned as legacy_id", async () => {
        const record = historicalRecord(historicalKey(), { hash_hex: randomHash(), legacy_id: 424242 })
        expect(await server.run(importLines([JSON.stringify(record)]))).toMatchObject({ imported: 1, failed: 0 })
        const id = (await client(server.url).post("/v1/verify", { hash_hex: record.hash_hex })).body.id
        for (const prefix of PREFIXES) {
          for (const sub of ["", "/status", "/signature", "/evidence"]) {
            const s = await client(server.url).get(`${prefix}/attestation/424242${sub}`)
            expect(s.status, sub).toBe(200)
            expect(s.body.id, sub).toBe(id)
            expect(s.body.legacy_id, sub).toBe(424242)
            const byId = await client(server.url).get(`${prefix}/attestation/${id}${sub}`)
            expect(byId.body.legacy_id, sub).toBe(424242)
          }
          expect((await client(server.url).get(`${prefix}/attestation/%20424242%20`)).body.id).toBe(id)
          expectEnvelope(await client(server.url).get(`${prefix}/attestation/424243`), 404, "NOT_FOUND")
        }
      })

      it("surrounding whitespace around the id is trimmed", async () => {
        for (const ref of [`%20${att.id}%20`, `%20%20${att.id}`, `${att.id}%09`]) {
          const r = await client(server.url).get(`/v1/attestation/${ref}`)
          expect(r.status, ref).toBe(200)
          expect(r.body.id).toBe(att.id)
          const s = await client(server.url).get(`/attestation/${ref}/status`)
          expect(s.status, ref).toBe(200)
        }
      })

      it("no lookup ever shows source, extra_data or tags", async () => {
        const pub = client(server.url)
        for (const path of ["", "/status", "/signature", "/evidence"]) {
          for (const prefix of PREFIXES) {
            const r = await pub.get(`${prefix}/attestation/${att.id}${path}`)
            expect(r.status).toBe(200)
            expectNoPrivateFields(r.body, `GET attestation${path}`)
            expect(r.text).not.toContain("lookup-src")
            expect(r.text).not.toContain("hidden")
          }
        }
        // even when the owner asks, public lookups are the same
        const withKey = await client(server.url, key).get(`/v1/attestation/${att.id}`)
        expectNoPrivateFields(withKey.body, "lookup with the owner's key")
      })
    })

    describe("keys", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/keys and ${prefix}/keys/{kid}`, async () => {
          const r = await client(server.url).get(`${prefix}/keys`)
          expect(r.status).toBe(200)
          expect(sortedKeys(r.body)).toEqual(["keys"])
          expect(r.body.keys.length).toBeGreaterThanOrEqual(1)
          for (const jwk of r.body.keys) {
            expect(jwk).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256" })
            expect(typeof jwk.kid).toBe("string")
            expect(Buffer.from(jwk.x, "base64url")).toHaveLength(32)
            expect(Buffer.from(jwk.y, "base64url")).toHaveLength(32)
            expect(jwk.x).toMatch(/^[A-Za-z0-9_-]+$/)
            expect(jwk.d).toBeUndefined()
            const one = await client(server.url).get(`${prefix}/keys/${encodeURIComponent(jwk.kid)}`)
            expect(one.status).toBe(200)
            expect(one.body).toEqual(jwk)
          }
          const signedBy = (await client(server.url).get(`/v1/attestation/${first.id}`)).body.signing_key_id
          expect(r.body.keys.map((k: any) => k.kid)).toContain(signedBy)
        })
      }

      it("an unknown kid is 404 NOT_FOUND", async () => {
        expectEnvelope(await client(server.url).get("/v1/keys/nope"), 404, "NOT_FOUND")
        expectEnvelope(await client(server.url).get("/keys/" + "A".repeat(43)), 404, "NOT_FOUND")
      })
    })

    describe("info, health, stats", () => {
      for (const prefix of PREFIXES) {
        it(`${prefix}/info`, async () => {
          const r = await client(server.url).get(`${prefix}/info`)
          expect(r.status).toBe(200)
          expect(r.body).toMatchObject({ name: "attestd", api_version: "v1", mode: "demo", environment: "test" })
          expect(r.body.version).toMatch(/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/)
          expect(Array.isArray(r.body.features)).toBe(true)
          expect(r.body.features.every((f: unknown) => typeof f === "string")).toBe(true)
          const keys = (await client(server.url).get("/v1/keys")).body.keys.map((k: any) => k.kid)
          expect(r.body.signing_key_ids).toEqual(keys)
          // CONTRACT §4, exactly
          expect(r.body.assurance).toEqual({
            identifier: "service-public-assurance-v1",
            t1_cms_pki_checks: "NOT_PERFORMED",
            t2_bitcoin_checks: "NOT_PERFORMED",
            qualification: "UNVERIFIED"
          })
          expectNoPrivateFields(r.body, "info")
        })

        it(`${prefix}/healthz`, async () => {
          const r = await client(server.url).get(`${prefix}/healthz`)
          expect(r.status).toBe(200)
          expect(r.body.status).toBe("ok")
          expect(r.body.checks).toMatchObject({ database: "ok", signer: "ok" })
          expect(sortedKeys(r.body)).toEqual(["checks", "status"])
        })

        it(`${prefix}/stats counts attestations`, async () => {
          const before = await client(server.url).get(`${prefix}/stats`)
          expect(before.status).toBe(200)
          expect(sortedKeys(before.body)).toEqual(["batches", "by_level", "daily_roots", "total_attestations"])
          expect(sortedKeys(before.body.by_level)).toEqual(["T0", "T1", "T2"])
          expect(before.body.by_level.T0 + before.body.by_level.T1 + before.body.by_level.T2).toBe(before.body.total_attestations)
          expect(before.body.batches).toBe(0)
          expect(before.body.daily_roots).toBe(0)
          await client(server.url, key).post("/v1/attest/batch", { hashes: [randomHash(), randomHash()] })
          const after = await client(server.url).get(`${prefix}/stats`)
          expect(after.body.total_attestations).toBe(before.body.total_attestations + 2)
          expect(after.body.by_level.T0).toBe(before.body.by_level.T0 + 2)
        })
      }
    })

    describe("documents", () => {
      it("/v1/openapi.json is OpenAPI 3.1 with the /v1 paths", async () => {
        for (const path of ["/v1/openapi.json", "/openapi.json"]) {
          const r = await client(server.url).get(path)
          expect(r.status).toBe(200)
          expect(r.body.openapi).toBe("3.1.0")
          const paths = Object.keys(r.body.paths)
          for (
            const p of [
              "/v1/attest",
              "/v1/attest/batch",
              "/v1/verify",
              "/v1/verify/batch",
              "/v1/attestation/{id}",
              "/v1/attestation/{id}/status",
              "/v1/attestation/{id}/signature",
              "/v1/attestation/{id}/evidence",
              "/v1/keys",
              "/v1/keys/{key_id}",
              "/v1/info",
              "/v1/healthz",
              "/v1/stats"
            ]
          ) expect(paths, p).toContain(p)
          expect(r.headers.get("x-request-id")).toBeTruthy()
        }
      })

      it("/docs serves HTML", async () => {
        const r = await client(server.url).get("/docs")
        expect(r.status).toBe(200)
        expect(r.headers.get("content-type")).toMatch(/text\/html/)
        expect(r.text.toLowerCase()).toContain("<html")
        expect(r.headers.get("x-request-id")).toBeTruthy()
      })

      it("/test-vectors.json: labelled, its T0 example and Merkle proofs check independently", async () => {
        const r = await client(server.url).get("/test-vectors.json")
        expect(r.status).toBe(200)
        const v = r.body
        expect(v.not_acceptance_vectors).toBe(true)
        expect(String(v.description)).toMatch(/not acceptance vectors/i)
        expectNoPrivateFields(v, "test vectors")

        const t0 = v.t0
        const sha = (s: string | Buffer) => createHash("sha256").update(s).digest("hex")
        expect(t0.hash_hex).toBe(sha(Buffer.from(t0.input_utf8, "utf8")))
        expect(t0.signed_payload).toBe(`${t0.format_version}|${t0.hash_hex}|${t0.registered_at}`)
        expect(t0.registered_at).toMatch(WIRE_TIME)
        expect(t0.signed_payload_sha256).toBe(sha(Buffer.from(t0.signed_payload, "utf8")))
        expect(t0.public_key).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256" })
        expect(await verifyWithJwk(t0.public_key, t0.signed_payload, t0.signature)).toBe(true)
        expect(await verifyWithJwk(t0.public_key, t0.signed_payload + " ", t0.signature)).toBe(false)

        const m = v.merkle_v2
        expect([...m.leaves_unsorted].sort()).toEqual(m.leaves_sorted)
        const node = (l: string, rr: string) => sha(Buffer.concat([Buffer.from([1]), Buffer.from(l, "hex"), Buffer.from(rr, "hex")]))
        expect(m.proofs).toHaveLength(m.leaves_sorted.length)
        for (const { leaf, proof } of m.proofs) {
          let cur = leaf
          for (const step of proof) {
            expect(step.hash).toMatch(/^[0-9a-f]{64}$/)
            expect(["left", "right"]).toContain(step.position)
            cur = step.position === "left" ? node(step.hash, cur) : node(cur, step.hash)
          }
          expect(cur).toBe(m.root)
        }
        // the root from scratch: sorted leaves, odd node duplicated
        let level: Array<string> = [...m.leaves_sorted]
        while (level.length > 1) {
          const next: Array<string> = []
          for (let i = 0; i < level.length; i += 2) next.push(node(level[i]!, level[i + 1] ?? level[i]!))
          level = next
        }
        expect(level[0]).toBe(m.root)

        const d = v.derived_list
        const { createHmac } = await import("node:crypto")
        expect(d.derived_value).toBe(createHmac("sha256", Buffer.from(d.list_key, "hex")).update(d.hash_hex, "ascii").digest("hex"))
      })
    })

    it("public GET endpoints never return source, extra_data or tags", async () => {
      const hash = randomHash()
      const a = await client(server.url, key).post("/v1/attest", { hash_hex: hash, source: "S", extra_data: { tags: ["x"] } })
      const pub = client(server.url)
      for (
        const path of [
          `/v1/attestation/${a.body.id}`,
          `/v1/attestation/${a.body.id}/status`,
          `/v1/attestation/${a.body.id}/signature`,
          `/v1/attestation/${a.body.id}/evidence`,
          "/v1/keys",
          "/v1/info",
          "/v1/healthz",
          "/v1/stats",
          "/test-vectors.json"
        ]
      ) {
        const r = await pub.get(path)
        expect(r.status, path).toBe(200)
        expectNoPrivateFields(r.body, path)
      }
      for (const [path, body] of [["/v1/verify", { hash_hex: hash }], ["/v1/verify/batch", { hashes: [hash] }]] as const) {
        const r = await pub.post(path, body)
        expect(r.status, path).toBe(200)
        expectNoPrivateFields(r.body, path)
      }
    })
  })
}
