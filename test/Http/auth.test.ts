/**
 * Keys through a real server: scopes, environment, IP allowlists (with and
 * without a trusted proxy), the per-key rate limit and the monthly quota.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hasScope, SCOPES, type Scope } from "../../src/Auth/Domain.js"
import { secondsToNextUtcMonth } from "../../src/Domain/Time.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, startTestServer, statsOf, type TestServer } from "../helpers/server.js"

describe("hasScope", () => {
  it("write implies read, never the reverse", () => {
    expect(hasScope({ scopes: ["metadata:write"] }, "metadata:read")).toBe(true)
    expect(hasScope({ scopes: ["metadata:write"] }, "metadata:write")).toBe(true)
    expect(hasScope({ scopes: ["metadata:read"] }, "metadata:write")).toBe(false)
    expect(hasScope({ scopes: ["tags:write"] }, "tags:read")).toBe(true)
    expect(hasScope({ scopes: ["tags:read"] }, "tags:write")).toBe(false)
    expect(hasScope({ scopes: ["tags:write"] }, "metadata:read")).toBe(false)
    expect(hasScope({ scopes: ["metadata:write"] }, "tags:read")).toBe(false)
  })

  it("a scope grants only itself otherwise", () => {
    for (const granted of SCOPES) {
      for (const wanted of SCOPES) {
        const implied = (granted === "metadata:write" && wanted === "metadata:read") ||
          (granted === "tags:write" && wanted === "tags:read")
        expect(hasScope({ scopes: [granted] }, wanted), `${granted} → ${wanted}`).toBe(granted === wanted || implied)
      }
    }
  })

  it("a key from before scopes (scopes null) holds all", () => {
    for (const s of SCOPES) expect(hasScope({ scopes: null }, s)).toBe(true)
  })

  it("an explicitly empty scope list holds nothing (least privilege; only null means a pre-scope key)", () => {
    for (const s of SCOPES) expect(hasScope({ scopes: [] }, s), s).toBe(false)
  })
})

for (const dialect of await dialects()) {
  describe(`keys over HTTP (${dialect})`, () => {
    let server: TestServer
    /** trustProxy on, environment production. */
    let proxied: TestServer

    beforeAll(async () => {
      ;[server, proxied] = await Promise.all([
        startTestServer(dialect),
        startTestServer(dialect, { trustProxy: true, environment: "production" })
      ])
    })
    afterAll(async () => {
      await Promise.all([server?.close(), proxied?.close()])
    })

    const attest = (base: string, key: string, headers: Record<string, string> = {}) =>
      client(base, key).post("/v1/attest", { hash_hex: randomHash() }, headers)

    describe("scopes", () => {
      const allBut = (s: Scope) => SCOPES.filter((x) => x !== s)

      it("attest needs attest", async () => {
        for (const scopes of [["batch"], allBut("attest"), ["metadata:write", "tags:write"]] as Array<Array<Scope>>) {
          const { key } = await server.createKey({ scopes })
          const hash = randomHash()
          const r = await client(server.url, key).post("/v1/attest", { hash_hex: hash })
          expectEnvelope(r, 403, "FORBIDDEN")
          expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.exists).toBe(false)
          expectEnvelope(await client(server.url, key).post("/attest", { hash_hex: hash }), 403, "FORBIDDEN")
        }
        const { key } = await server.createKey({ scopes: ["attest"] })
        expect((await attest(server.url, key)).status).toBe(201)
      })

      it("attest/batch needs attest or batch", async () => {
        for (const scopes of [["attest"], ["batch"]] as Array<Array<Scope>>) {
          const { key } = await server.createKey({ scopes })
          const r = await client(server.url, key).post("/v1/attest/batch", { hashes: [randomHash()] })
          expect(r.status, scopes.join()).toBe(200)
          expect(r.body.created).toBe(1)
        }
        for (const scopes of [["metadata:write"], SCOPES.filter((s) => s !== "attest" && s !== "batch")] as Array<Array<Scope>>) {
          const { key } = await server.createKey({ scopes })
          const hash = randomHash()
          expectEnvelope(await client(server.url, key).post("/v1/attest/batch", { hashes: [hash] }), 403, "FORBIDDEN")
          expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.exists).toBe(false)
        }
      })

      it("detailed verify/batch needs any valid key, whatever its scopes", async () => {
        const { key } = await server.createKey({ scopes: ["webhook"] })
        const r = await client(server.url, key).post("/v1/verify/batch", { hashes: [randomHash()], detailed: true })
        expect(r.status).toBe(200)
        expect(r.body.count).toBe(1)
      })

      it("a key with scopes null holds all", async () => {
        const { key } = await server.createKey({ scopes: null })
        expect((await attest(server.url, key)).status).toBe(201)
        expect((await client(server.url, key).post("/v1/attest/batch", { hashes: [randomHash()] })).status).toBe(200)
      })
    })

    describe("environment", () => {
      it("key prefixes follow the environment", async () => {
        expect((await server.createKey({ env: "test" })).key).toMatch(/^atk_test_[A-Za-z0-9_-]{32}$/)
        expect((await server.createKey({ env: "production" })).key).toMatch(/^atk_live_[A-Za-z0-9_-]{32}$/)
        expect((await server.createKey({ env: null })).key).toMatch(/^atk_live_[A-Za-z0-9_-]{32}$/)
      })

      it("a production key against a test server is 403, a test key is fine", async () => {
        const prod = await server.createKey({ env: "production" })
        expectEnvelope(await attest(server.url, prod.key), 403, "FORBIDDEN")
        expectEnvelope(
          await client(server.url, prod.key).post("/v1/verify/batch", { hashes: [randomHash()], detailed: true }),
          403,
          "FORBIDDEN"
        )
        const test = await server.createKey({ env: "test" })
        expect((await attest(server.url, test.key)).status).toBe(201)
        const any = await server.createKey({ env: null })
        expect((await attest(server.url, any.key)).status).toBe(201)
      })

      it("a test key against a production server is 403", async () => {
        const test = await proxied.createKey({ env: "test" })
        expectEnvelope(await attest(proxied.url, test.key), 403, "FORBIDDEN")
        const prod = await proxied.createKey({ env: "production" })
        expect((await attest(proxied.url, prod.key)).status).toBe(201)
      })
    })

    describe("IP allowlist", () => {
      it("addresses outside the list get 403; inside are admitted", async () => {
        const ten = await server.createKey({ allowIps: ["10.0.0.0/8"] })
        const hash = randomHash()
        expectEnvelope(await client(server.url, ten.key).post("/v1/attest", { hash_hex: hash }), 403, "FORBIDDEN")
        expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.exists).toBe(false)
        const loop = await server.createKey({ allowIps: ["127.0.0.1/32"] })
        expect((await attest(server.url, loop.key)).status).toBe(201)
        const both = await server.createKey({ allowIps: ["::1/128", "127.0.0.0/8"] })
        expect((await attest(server.url, both.key)).status).toBe(201)
        const single = await server.createKey({ allowIps: ["127.0.0.1"] })
        expect((await attest(server.url, single.key)).status).toBe(201)
      })

      it("without trustProxy, X-Forwarded-For is ignored", async () => {
        const ten = await server.createKey({ allowIps: ["10.0.0.0/8"] })
        expectEnvelope(await attest(server.url, ten.key, { "x-forwarded-for": "10.1.2.3" }), 403, "FORBIDDEN")
        const loop = await server.createKey({ allowIps: ["127.0.0.1/32"] })
        expect((await attest(server.url, loop.key, { "x-forwarded-for": "10.1.2.3" })).status).toBe(201)
      })

      it("with trustProxy (1 hop), the last X-Forwarded-For address — the one the proxy wrote — is the client", async () => {
        const ten = await proxied.createKey({ env: "production", allowIps: ["10.0.0.0/8"] })
        expect((await attest(proxied.url, ten.key, { "x-forwarded-for": "10.1.2.3" })).status).toBe(201)
        expect((await attest(proxied.url, ten.key, { "x-forwarded-for": "192.168.7.7, 10.1.2.3" })).status).toBe(201)
        // the leftmost entry is whatever the client wrote: it must not unlock the allowlist
        expectEnvelope(await attest(proxied.url, ten.key, { "x-forwarded-for": "10.1.2.3, 192.168.7.7" }), 403, "FORBIDDEN")
        expectEnvelope(await attest(proxied.url, ten.key), 403, "FORBIDDEN")
        const loop = await proxied.createKey({ env: "production", allowIps: ["127.0.0.1/32"] })
        expectEnvelope(await attest(proxied.url, loop.key, { "x-forwarded-for": "10.1.2.3" }), 403, "FORBIDDEN")
        expect((await attest(proxied.url, loop.key)).status).toBe(201)
      })
    })

    describe("rate limit", () => {
      it("fills the window: X-RateLimit-* on every call, 429 RATE_LIMIT after the limit", async () => {
        const { key } = await server.createKey({ rateLimit: 5 })
        const api = client(server.url, key)
        const remaining: Array<string | null> = []
        for (let i = 0; i < 2; i++) {
          const r = await attest(server.url, key)
          expect(r.status).toBe(201)
          expect(r.headers.get("x-ratelimit-limit")).toBe("5")
          remaining.push(r.headers.get("x-ratelimit-remaining"))
        }
        // public verify calls presenting the key are not counted
        for (let i = 0; i < 6; i++) {
          const v = await api.post("/v1/verify", { hash_hex: randomHash() })
          expect(v.status).toBe(200)
          expect((await api.post("/v1/verify/batch", { hashes: [randomHash()] })).status).toBe(200)
        }
        for (let i = 0; i < 3; i++) {
          const r = await attest(server.url, key)
          expect(r.status).toBe(201)
          expect(r.headers.get("x-ratelimit-limit")).toBe("5")
          remaining.push(r.headers.get("x-ratelimit-remaining"))
        }
        expect(remaining).toEqual(["4", "3", "2", "1", "0"])

        const nowSeconds = Math.floor(Date.now() / 1000)
        const hash = randomHash()
        const limited = await client(server.url, key).post("/v1/attest", { hash_hex: hash })
        expectEnvelope(limited, 429, "RATE_LIMIT")
        const retryAfter = Number(limited.headers.get("retry-after"))
        expect(Number.isInteger(retryAfter)).toBe(true)
        expect(retryAfter).toBeGreaterThanOrEqual(1)
        expect(retryAfter).toBeLessThanOrEqual(60)
        expect(limited.headers.get("x-ratelimit-limit")).toBe("5")
        expect(limited.headers.get("x-ratelimit-remaining")).toBe("0")
        const reset = Number(limited.headers.get("x-ratelimit-reset"))
        expect(Number.isInteger(reset)).toBe(true)
        expect(reset).toBeGreaterThanOrEqual(nowSeconds)
        expect(reset).toBeLessThanOrEqual(nowSeconds + 61)
        expect((await client(server.url).post("/v1/verify", { hash_hex: hash })).body.exists).toBe(false)

        expectEnvelope(await api.post("/v1/attest/batch", { hashes: [randomHash()] }), 429, "RATE_LIMIT")
        // public verify still answers the exhausted key
        const v = await api.post("/v1/verify", { hash_hex: hash })
        expect(v.status).toBe(200)
        // another key is not affected
        const other = await server.createKey({ rateLimit: 5 })
        expect((await attest(server.url, other.key)).status).toBe(201)
      })
    })

    describe("monthly quota", () => {
      it("three hashes pass, a batch of two more is 429 QUOTA_EXCEEDED and writes nothing", async () => {
        const { key } = await server.createKey({ monthlyQuota: 3 })
        const api = client(server.url, key)
        const firstThree = [randomHash(), randomHash(), randomHash()]
        for (const h of firstThree) expect((await api.post("/v1/attest", { hash_hex: h })).status).toBe(201)
        const before = (await statsOf(server.url)).total_attestations
        const more = [randomHash(), randomHash()]
        const r = await api.post("/v1/attest/batch", { hashes: more })
        expectEnvelope(r, 429, "QUOTA_EXCEEDED")
        const retryAfter = Number(r.headers.get("retry-after"))
        const expected = secondsToNextUtcMonth(Date.now())
        expect(Math.abs(retryAfter - expected)).toBeLessThanOrEqual(5)
        expect((await statsOf(server.url)).total_attestations).toBe(before)
        for (const h of more) expect((await client(server.url).post("/v1/verify", { hash_hex: h })).body.exists).toBe(false)
        expectEnvelope(await api.post("/v1/attest", { hash_hex: more[0] }), 429, "QUOTA_EXCEEDED")
        // re-submitting an attested hash is still a hash submitted for attestation
        expectEnvelope(await api.post("/v1/attest", { hash_hex: firstThree[0] }), 429, "QUOTA_EXCEEDED")
      })

      it("a refused batch consumes nothing", async () => {
        const { key } = await server.createKey({ monthlyQuota: 3 })
        const api = client(server.url, key)
        expect((await api.post("/v1/attest", { hash_hex: randomHash() })).status).toBe(201)
        expectEnvelope(await api.post("/v1/attest/batch", { hashes: [randomHash(), randomHash(), randomHash()] }), 429, "QUOTA_EXCEEDED")
        const ok = await api.post("/v1/attest/batch", { hashes: [randomHash(), randomHash()] })
        expect(ok.status).toBe(200)
        expect(ok.body.created).toBe(2)
        expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash() }), 429, "QUOTA_EXCEEDED")
      })

      it("a batch larger than the whole quota is refused at once", async () => {
        const { key } = await server.createKey({ monthlyQuota: 3 })
        const r = await client(server.url, key).post("/v1/attest/batch", { hashes: Array.from({ length: 4 }, randomHash) })
        expectEnvelope(r, 429, "QUOTA_EXCEEDED")
        expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expect((await client(server.url, key).post("/v1/attest/batch", { hashes: Array.from({ length: 3 }, randomHash) })).status)
          .toBe(200)
      })

      it("concurrent submissions never exceed the quota", async () => {
        const { key } = await server.createKey({ monthlyQuota: 5 })
        const replies = await Promise.all(Array.from({ length: 15 }, () => attest(server.url, key)))
        const statuses = replies.map((r) => r.status).sort()
        expect(statuses.filter((s) => s === 201)).toHaveLength(5)
        for (const r of replies.filter((x) => x.status !== 201)) expectEnvelope(r, 429, "QUOTA_EXCEEDED")
      })
    })
  })
}
