/**
 * Property test (fast-check, ~100 runs per dialect): random attestation
 * references in paths (URL-encoded, and raw with stray % escapes), random tag
 * keys, random share-token / API-key strings in Authorization, random If-Match
 * values — the server never answers 5xx.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import { attestWith, expectNo5xx } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { client, startTestServer, type TestServer } from "../helpers/server.js"

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

/** Strings shaped like credentials: right prefixes, right or wrong lengths, odd characters. */
const credential = fc.oneof(
  fc.string({ maxLength: 80 }),
  fc.tuple(
    fc.constantFrom("shr_", "atk_live_", "atk_test_", "atk_", "Bearer ", ""),
    fc.stringOf(fc.constantFrom(...B64URL.split(""), "=", ".", "+", "/"), { minLength: 0, maxLength: 40 })
  ).map(([p, s]) => p + s),
  fc.stringOf(fc.constantFrom(...B64URL.split("")), { minLength: 32, maxLength: 32 }).map((s) => `shr_${s}`),
  fc.stringOf(fc.constantFrom(...B64URL.split("")), { minLength: 32, maxLength: 32 }).map((s) => `atk_live_${s}`)
)

/** A path segment: URL-encoded unicode, or raw characters including stray / broken % escapes. */
const segment = fc.oneof(
  fc.fullUnicodeString({ maxLength: 40 }).map(encodeURIComponent),
  fc.stringOf(fc.constantFrom("%", "%2", "%zz", "%E0%A4%A", "%C0%AF", "%00", "%2F", "%20", "att_", "1", "0", "9".repeat(17), "a", "_", "-", "~", "."), {
    maxLength: 12
  }),
  fc.stringOf(fc.constantFrom(...B64URL.split("")), { minLength: 24, maxLength: 24 }).map((s) => `att_${s}`),
  fc.bigInt({ min: -10n, max: 10n ** 20n }).map(String)
).filter((s) => s !== "" && s !== "." && s !== "..")

const tagKey = fc.oneof(fc.string({ maxLength: 70 }), fc.stringMatching(/^[a-z_][a-z0-9_-]{0,70}$/), fc.fullUnicodeString({ maxLength: 10 }))

for (const dialect of await dialects()) {
  describe(`fuzz: never a 5xx (${dialect})`, () => {
    let server: TestServer
    let api: ReturnType<typeof client>
    let id = ""
    beforeAll(async () => {
      server = await startTestServer(dialect)
      api = client(server.url, (await server.createKey({ rateLimit: 1_000_000 })).key)
      id = (await attestWith(api, { source: "fuzz" })).id
      await api.put(`/v1/attestation/${id}/tags`, { tags: [{ key: "env", value: "prod" }] })
    })
    afterAll(async () => {
      await server?.close()
    })

    it("random ids in paths, tag keys, credentials and If-Match values", async () => {
      await fc.assert(
        fc.asyncProperty(segment, tagKey, credential, fc.string({ maxLength: 40 }), async (seg, key, cred, ifMatch) => {
          const anon = client(server.url)
          const bearer = client(server.url, cred)
          const replies = await Promise.all([
            api.get(`/v1/attestation/${seg}/metadata`),
            api.get(`/v1/attestation/${seg}/tags`),
            api.patch(`/v1/attestation/${seg}/metadata`, { source: "x" }, { "if-match": ifMatch }),
            api.delete(`/v1/attestation/${id}/tags/${encodeURIComponent(key) || "x"}`),
            api.delete(`/v1/attestation/${seg}/tags/${seg}`),
            api.put(`/v1/attestation/${id}/tags`, { tags: [{ key, value: "v" }] }),
            api.post("/v1/tags/query", { filter: { and: [{ key, value: key }] } }),
            api.post("/v1/share-tokens", { attestation_ids: [decodeSafe(seg)], expires_in: 60 }),
            anon.get(`/v1/attestation/${seg}`),
            anon.get(`/attestation/${seg}/evidence`),
            bearer.get(`/v1/attestation/${id}/metadata`),
            bearer.get(`/v1/attestation/${seg}/tags`),
            bearer.post("/v1/verify", { hash_hex: "0".repeat(64) }),
            bearer.post("/v1/verify/batch", { hashes: ["0".repeat(64)], detailed: true }),
            anon.get(`/v1/share-tokens/${seg}`, { authorization: cred }),
            anon.get(`/v1/webhook/${seg}/deliveries`, { authorization: `Bearer ${cred}` })
          ])
          replies.forEach((r, i) => expectNo5xx(`request #${i} (seg=${JSON.stringify(seg)}, key=${JSON.stringify(key)}, cred=${JSON.stringify(cred)})`, r))
        }),
        { numRuns: 100, interruptAfterTimeLimit: 40_000 }
      )
      // the real claim and tag survived the fuzzing untouched where it matters
      const m = await api.get(`/v1/attestation/${id}/metadata`)
      expectNo5xx("final metadata", m)
    })
  })
}

function decodeSafe(s: string): string {
  try {
    return decodeURIComponent(s)
  } catch {
    return s
  }
}
