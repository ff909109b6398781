/**
 * HMAC-derived lists over the real server (spec 1.6, 2.14, 3.3, 4.9, 5.2–5.3, 8;
 * CONTRACT §3, §5): create from explicit hashes or a tag filter (scope census,
 * key with org_id), list/get/access log/revoke, the public match (the caller
 * sends only HMAC values) and the public signature, checked with node:crypto
 * only. Expiry is checked with a list row written straight into the table.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { createHash, createHmac, randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { deriveValues } from "../../src/Client/DerivedLists.js"
import { attestWith, expectNoSecrets } from "../helpers/claims.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer, verifyWithJwk, WIRE_TIME } from "../helpers/server.js"

type Api = ReturnType<typeof client>

/** Independent derivation (spec 2.14): HMAC-SHA256 keyed with the raw bytes of the hex list_key, over the ASCII hash_hex. */
const hmacHex = (listKey: string, hash: string): string =>
  createHmac("sha256", Buffer.from(listKey, "hex")).update(Buffer.from(hash, "ascii")).digest("hex")

const sha256Hex = (s: string): string => createHash("sha256").update(s, "utf8").digest("hex")

/** The wire time format of a millisecond instant. */
const wireTime = (ms: number): string => new Date(ms).toISOString().slice(0, 23) + "000+00:00"

const randomHexValues = (n: number): Array<string> => {
  const buf = randomBytes(32 * n).toString("hex")
  return Array.from({ length: n }, (_, i) => buf.slice(i * 64, i * 64 + 64))
}

const orgName = (label: string): string => `${label}-${Math.random().toString(36).slice(2, 10)}`

const rowsOf = (server: TestServer, table: "derived_values" | "derived_lists" | "derived_list_access") =>
  server.run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<Record<string, unknown>>`SELECT * FROM ${sql(table)}`))

for (const dialect of await dialects()) {
  describe(`derived lists (${dialect})`, () => {
    let server: TestServer
    const org = orgName("org-d")
    const otherOrg = orgName("org-e")
    let census: Api
    let censusKeyId: string
    let t1: Api
    let t2: Api
    let other: Api
    const anon = () => client(server.url)

    /** POST /v1/derived-lists with the census key; expects 201. */
    const createList = async (body: Record<string, unknown>, api: Api = census) => {
      const r = await api.post("/v1/derived-lists", { expires_in_hours: 24, ...body })
      expect(r.status, r.text).toBe(201)
      return r.body as { id: string; list_key: string; item_count: number; expires_at: string; label: string | null }
    }

    beforeAll(async () => {
      server = await startTestServer(dialect)
      const c = await server.createKey({ scopes: ["census"], orgId: org })
      censusKeyId = c.id
      census = client(server.url, c.key)
      t1 = client(server.url, (await server.createKey({ scopes: ["attest", "tags:write", "metadata:write", "census"], orgId: org })).key)
      t2 = client(server.url, (await server.createKey({ scopes: ["attest", "tags:write", "metadata:write", "census"], orgId: org })).key)
      other = client(server.url, (await server.createKey({ scopes: ["attest", "tags:write", "census"], orgId: otherOrg })).key)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("create from explicit hashes → id, list_key (64 hex, once), item_count, expires_at; list/get never show list_key or values", async () => {
      const hashes = [randomHash(), randomHash(), randomHash()]
      const before = Date.now()
      const created = await createList({ hashes: [...hashes, hashes[0]], label: "suppliers", expires_in_hours: 48 })
      expect(created.id).toMatch(/^\S+$/)
      expect(created.list_key).toMatch(/^[0-9a-f]{64}$/)
      expect(created.item_count).toBe(3) // duplicates collapse
      expect(created.label).toBe("suppliers")
      expect(created.expires_at).toMatch(WIRE_TIME)
      const expiresMs = Date.parse(created.expires_at.replace(/(\.\d{3})\d{3}\+00:00$/, "$1Z"))
      expect(expiresMs).toBeGreaterThanOrEqual(before + 48 * 3600_000 - 1000)
      expect(expiresMs).toBeLessThanOrEqual(Date.now() + 48 * 3600_000 + 1000)

      const values = hashes.map((h) => hmacHex(created.list_key, h))
      const secrets = [created.list_key, ...hashes, ...values]

      const list = await census.get("/v1/derived-lists")
      expect(list.status, list.text).toBe(200)
      const item = (list.body.derived_lists as Array<any>).find((l) => l.id === created.id)
      expect(item).toMatchObject({ id: created.id, label: "suppliers", item_count: 3, expires_at: created.expires_at, status: "active", revoked_at: null })
      expectNoSecrets("list", list, secrets)

      const one = await census.get(`/v1/derived-lists/${created.id}`)
      expect(one.status, one.text).toBe(200)
      expect(one.body).toMatchObject({ id: created.id, label: "suppliers", item_count: 3, status: "active", revoked_at: null })
      expect(one.body.created_at).toMatch(WIRE_TIME)
      expect(one.body).not.toHaveProperty("list_key")
      expect(one.body).not.toHaveProperty("values")
      expectNoSecrets("get", one, secrets)
      expect((await census.get(`/derived-lists/${created.id}`)).body).toEqual(one.body) // unprefixed alias

      // another org's census key sees neither the list nor its log, and cannot revoke it
      expectEnvelope(await other.get(`/v1/derived-lists/${created.id}`), 404, "NOT_FOUND")
      expectEnvelope(await other.get(`/v1/derived-lists/${created.id}/access-log`), 404, "NOT_FOUND")
      expectEnvelope(await other.delete(`/v1/derived-lists/${created.id}`), 404, "NOT_FOUND")
      expect(((await other.get("/v1/derived-lists")).body.derived_lists as Array<any>).map((l) => l.id)).not.toContain(created.id)
      expectEnvelope(await census.get("/v1/derived-lists/dl_doesnotexist"), 404, "NOT_FOUND")
    })

    it("create from tag_filter: only hashes of the caller's own live claims whose tags match every condition (spec 5.8)", async () => {
      const g = Array.from({ length: 7 }, randomHash)
      const att = async (api: Api, hash: string, tags: Record<string, string>) => {
        const a = await attestWith(api, { hash_hex: hash })
        const r = await api.put(`/v1/attestation/${a.id}/tags`, { tags: Object.entries(tags).map(([key, value]) => ({ key, value })) })
        expect(r.status, r.text).toBe(200)
        return a
      }
      const marker = `m${Math.random().toString(36).slice(2, 8)}`
      await att(t1, g[0]!, { run: marker, env: "prod", team: "a" }) // match for t1
      await att(t1, g[1]!, { run: marker, env: "prod", team: "b" }) // team differs
      await att(t1, g[2]!, { run: marker, env: "dev" }) // env differs
      await att(t2, g[3]!, { run: marker, env: "prod", team: "a" }) // match for t2 only: another key of the same org
      await att(other, g[4]!, { run: marker, env: "prod", team: "a" }) // other org
      const gone = await att(t1, g[5]!, { run: marker, env: "prod", team: "a" }) // soft-deleted below
      expect((await t1.delete(`/v1/attestation/${gone.id}/metadata`)).status).toBe(200)
      // conditions must hold within one claim: env on t1's claim, team on t2's claim
      await att(t1, g[6]!, { run: marker, env: "prod" })
      await att(t2, g[6]!, { run: marker, team: "a" })

      const filter = { and: [{ key: "run", value: marker }, { key: "env", value: "prod" }, { key: "team", value: "a" }] }
      const created = await createList({ tag_filter: filter }, t1)
      expect(created.item_count).toBe(1) // g0 only: t2's matching claim on g3 is not t1's to select
      const values = deriveValues(created.list_key, g)
      const m1 = await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: [values[0], values[3]] })
      expect(m1.status, m1.text).toBe(200)
      expect(m1.body).toEqual({ matched: 1, total: 2 })
      const m2 = await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: [values[1], values[2], values[4], values[5], values[6]] })
      expect(m2.body).toEqual({ matched: 0, total: 5 })
      // t2's own filter selects its own claim only
      const ofT2 = await createList({ tag_filter: filter }, t2)
      expect(ofT2.item_count).toBe(1)
      const m4 = await anon().post(`/v1/derived-lists/${ofT2.id}/match`, { list_key: ofT2.list_key, values: deriveValues(ofT2.list_key, g) })
      expect(m4.body).toEqual({ matched: 1, total: 7 }) // g3
      const onlyG3 = await anon().post(`/v1/derived-lists/${ofT2.id}/match`, { list_key: ofT2.list_key, values: deriveValues(ofT2.list_key, [g[3]!]) })
      expect(onlyG3.body).toEqual({ matched: 1, total: 1 })
      // a key of the org with no claims of its own learns nothing about other keys' tag values
      expect((await createList({ tag_filter: filter })).item_count).toBe(0)
      expect((await createList({ tag_filter: { and: [{ key: "run", value: marker }] } })).item_count).toBe(0)

      // a one-condition filter
      const prod = await createList({ tag_filter: { and: [{ key: "run", value: marker }, { key: "env", value: "prod" }] } }, t1)
      expect(prod.item_count).toBe(3) // g0, g1, g6 (not g3: t2's; not g4: other org; not g5: deleted)
      const pv = deriveValues(prod.list_key, g)
      const m3 = await anon().post(`/v1/derived-lists/${prod.id}/match`, { list_key: prod.list_key, values: pv })
      expect(m3.body).toEqual({ matched: 3, total: 7 })
      // a filter matching nothing gives an empty list
      expect((await createList({ tag_filter: { and: [{ key: "run", value: marker + "-none" }] } }, t1)).item_count).toBe(0)
    })

    it("validation: exactly one of hashes / tag_filter, expires_in_hours 1..2160, hex hashes, filter shape", async () => {
      const h = randomHash()
      const filter = { and: [{ key: "env", value: "prod" }] }
      const bad: Array<Record<string, unknown>> = [
        { hashes: [h], tag_filter: filter, expires_in_hours: 1 },
        { expires_in_hours: 1 },
        { hashes: [h], expires_in_hours: 2161 },
        { hashes: [h], expires_in_hours: 0 },
        { hashes: [h], expires_in_hours: -1 },
        { hashes: [h], expires_in_hours: 1.5 },
        { hashes: [h] },
        { hashes: [], expires_in_hours: 1 },
        { hashes: [h.toUpperCase()], expires_in_hours: 1 },
        { hashes: ["xyz"], expires_in_hours: 1 },
        { tag_filter: { and: [] }, expires_in_hours: 1 },
        { tag_filter: { or: [{ key: "a", value: "b" }] }, expires_in_hours: 1 },
        { tag_filter: { and: Array.from({ length: 11 }, (_, i) => ({ key: `k${i}`, value: "v" })) }, expires_in_hours: 1 }
      ]
      for (const body of bad) {
        const r = await census.post("/v1/derived-lists", body)
        expect(r.status, `${JSON.stringify(body).slice(0, 120)} → ${r.text}`).toBe(400)
        expectEnvelope(r, 400, "VALIDATION_ERROR")
      }
      const max = await createList({ hashes: [h], expires_in_hours: 2160 })
      const expiresMs = Date.parse(max.expires_at.replace(/(\.\d{3})\d{3}\+00:00$/, "$1Z"))
      expect(Math.abs(expiresMs - (Date.now() + 2160 * 3600_000))).toBeLessThan(60_000)
      expect((await createList({ hashes: [h], expires_in_hours: 1 })).item_count).toBe(1)
    })

    it("needs a key (401), scope census (403) and an org_id (403)", async () => {
      const body = { hashes: [randomHash()], expires_in_hours: 1 }
      expectEnvelope(await anon().post("/v1/derived-lists", body), 401, "AUTH_ERROR")
      expectEnvelope(await anon().get("/v1/derived-lists"), 401, "AUTH_ERROR")
      const noOrg = client(server.url, (await server.createKey({ scopes: ["census"] })).key)
      const noScope = client(server.url, (await server.createKey({ scopes: ["scan", "batch", "attest", "tags:write"], orgId: org })).key)
      for (const api of [noOrg, noScope]) {
        expectEnvelope(await api.post("/v1/derived-lists", body), 403, "FORBIDDEN")
        expectEnvelope(await api.get("/v1/derived-lists"), 403, "FORBIDDEN")
      }
      const created = await createList(body)
      for (const api of [noOrg, noScope]) {
        expectEnvelope(await api.get(`/v1/derived-lists/${created.id}`), 403, "FORBIDDEN")
        expectEnvelope(await api.get(`/v1/derived-lists/${created.id}/access-log`), 403, "FORBIDDEN")
        expectEnvelope(await api.delete(`/v1/derived-lists/${created.id}`), 403, "FORBIDDEN")
      }
    })

    it("match (public): the caller sends HMAC values only → {matched, total}; a wrong list_key is 401 and logged", async () => {
      const listed = [randomHash(), randomHash(), randomHash(), randomHash()]
      const created = await createList({ hashes: listed })
      const mine = [listed[0]!, listed[2]!, randomHash(), randomHash(), randomHash()]
      const values = deriveValues(created.list_key, mine)
      expect(values).toEqual(mine.map((h) => hmacHex(created.list_key, h)))
      const body = { list_key: created.list_key, values }
      const wire = JSON.stringify(body)
      for (const h of [...mine, ...listed]) expect(wire).not.toContain(h)

      const r = await anon().post(`/v1/derived-lists/${created.id}/match`, body)
      expect(r.status, r.text).toBe(200)
      expect(r.body).toEqual({ matched: 2, total: 5 })
      // an API key is not needed, and does not change anything
      expect((await census.post(`/derived-lists/${created.id}/match`, body)).body).toEqual({ matched: 2, total: 5 })
      // duplicates count once
      expect((await anon().post(`/v1/derived-lists/${created.id}/match`, { ...body, values: [...values, values[0]] })).body).toEqual({
        matched: 2,
        total: 5
      })
      // the raw hashes themselves are not derived values
      expect((await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: listed })).body).toEqual({
        matched: 0,
        total: 4
      })

      const wrongKey = randomBytes(32).toString("hex")
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { ...body, list_key: wrongKey }), 401, "AUTH_ERROR")
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { ...body, list_key: created.list_key.toUpperCase() }), 401, "AUTH_ERROR")
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { ...body, list_key: "" }), 401, "AUTH_ERROR")
      // malformed values
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: [] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: ["nothex"] }), 400, "VALIDATION_ERROR")
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, { values }), 400, "VALIDATION_ERROR")
      // unknown list
      expectEnvelope(await anon().post(`/v1/derived-lists/dl_nope/match`, body), 404, "NOT_FOUND")

      const log = await census.get(`/v1/derived-lists/${created.id}/access-log`)
      expect(log.status, log.text).toBe(200)
      const entries = log.body.access_log as Array<{ at: string; client_ip: string; outcome: string; matched: number | null; total: number | null }>
      expect(entries.map((e) => e.outcome)).toEqual(["ok", "ok", "ok", "ok", "unauthorized", "unauthorized", "unauthorized"])
      expect(entries[0]).toMatchObject({ matched: 2, total: 5 })
      expect(entries[3]).toMatchObject({ matched: 0, total: 4 })
      expect(entries[4]).toMatchObject({ matched: null, total: null })
      for (const e of entries) {
        expect(e.at).toMatch(WIRE_TIME)
        expect(e.client_ip).toMatch(/127\.0\.0\.1|::1/)
      }
      expectNoSecrets("access log", log, [created.list_key, wrongKey, ...values, ...mine])
    })

    it("signature (public): ECDSA P-256 over the sorted derived values joined by \\n, verified with node:crypto and the JWK", async () => {
      const hashes = Array.from({ length: 6 }, randomHash)
      const created = await createList({ hashes })
      const r = await anon().get(`/v1/derived-lists/${created.id}/signature`)
      expect(r.status, r.text).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(["list_id", "signature", "signed_payload_sha256", "signing_key_id"])
      expect(r.body.list_id).toBe(created.id)
      const payload = hashes.map((h) => hmacHex(created.list_key, h)).sort().join("\n")
      expect(r.body.signed_payload_sha256).toBe(sha256Hex(payload))
      const jwk = await anon().get(`/v1/keys/${encodeURIComponent(r.body.signing_key_id)}`)
      expect(jwk.status, jwk.text).toBe(200)
      expect(jwk.body).toMatchObject({ kty: "EC", crv: "P-256", kid: r.body.signing_key_id })
      expect(await verifyWithJwk(jwk.body, payload, r.body.signature)).toBe(true)
      // unsorted, or with one value changed, it does not verify
      const unsorted = hashes.map((h) => hmacHex(created.list_key, h)).join("\n")
      if (unsorted !== payload) expect(await verifyWithJwk(jwk.body, unsorted, r.body.signature)).toBe(false)
      expect(await verifyWithJwk(jwk.body, payload.slice(0, -1) + (payload.endsWith("0") ? "1" : "0"), r.body.signature)).toBe(false)
      // unprefixed alias
      expect((await anon().get(`/derived-lists/${created.id}/signature`)).body).toEqual(r.body)
      expectEnvelope(await anon().get(`/v1/derived-lists/dl_nope/signature`), 404, "NOT_FOUND")
    })

    it("revoke: the owner sees status revoked; match and signature become 404", async () => {
      const hashes = [randomHash(), randomHash()]
      const created = await createList({ hashes })
      const body = { list_key: created.list_key, values: deriveValues(created.list_key, hashes) }
      expect((await anon().post(`/v1/derived-lists/${created.id}/match`, body)).body).toEqual({ matched: 2, total: 2 })
      const del = await census.delete(`/v1/derived-lists/${created.id}`)
      expect(del.status, del.text).toBe(200)
      expect(del.body).toEqual({ id: created.id, revoked: true })
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, body), 404, "NOT_FOUND")
      expectEnvelope(await anon().get(`/v1/derived-lists/${created.id}/signature`), 404, "NOT_FOUND")
      const info = await census.get(`/v1/derived-lists/${created.id}`)
      expect(info.body.status).toBe("revoked")
      expect(info.body.revoked_at).toMatch(WIRE_TIME)
    })

    it("an expired list (row with expires_at in the past) is 404 for match and signature; a control row still in date answers", async () => {
      const hash = randomHash()
      const insert = async (expiresAt: string) => {
        const listKey = randomBytes(32).toString("hex")
        const id = `dl_test_${randomBytes(8).toString("hex")}`
        const value = hmacHex(listKey, hash)
        await server.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.zipRight(
            sql`INSERT INTO derived_lists (id, api_key_id, org_id, label, key_hash, item_count, signing_key_id, signature,
                signed_payload_sha256, created_at, expires_at)
              VALUES (${id}, ${censusKeyId}, ${org}, ${"inserted"}, ${sha256Hex(listKey)}, ${1}, ${"kid"}, ${"sig"},
                ${sha256Hex(value)}, ${wireTime(Date.now() - 48 * 3600_000)}, ${expiresAt})`,
            sql`INSERT INTO derived_values (list_id, value) VALUES (${id}, ${value})`
          )))
        return { id, body: { list_key: listKey, values: [value] } }
      }
      const live = await insert(wireTime(Date.now() + 3600_000))
      expect((await anon().post(`/v1/derived-lists/${live.id}/match`, live.body)).body).toEqual({ matched: 1, total: 1 })
      expect((await anon().get(`/v1/derived-lists/${live.id}/signature`)).status).toBe(200)

      const expired = await insert(wireTime(Date.now() - 1000))
      expectEnvelope(await anon().post(`/v1/derived-lists/${expired.id}/match`, expired.body), 404, "NOT_FOUND")
      expectEnvelope(await anon().get(`/v1/derived-lists/${expired.id}/signature`), 404, "NOT_FOUND")
      expect((await census.get(`/v1/derived-lists/${expired.id}`)).body.status).toBe("expired")

      // Creating the next list drops the values of expired lists; the live one keeps its own.
      await createList({ hashes: [randomHash()] })
      const left = (id: string) =>
        server.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM derived_values WHERE list_id = ${id}`))
      expect(Number((await left(expired.id))[0]!.n)).toBe(0)
      expect(Number((await left(live.id))[0]!.n)).toBe(1)
    })

    it("the 21st match within an hour on one list is 429 RATE_LIMIT with Retry-After, logged; other lists are unaffected", async () => {
      const hashes = [randomHash()]
      const created = await createList({ hashes })
      const body = { list_key: created.list_key, values: deriveValues(created.list_key, hashes) }
      const wrong = { ...body, list_key: randomBytes(32).toString("hex") }
      // Wrong keys are limited per address on their own budget: they do not spend the list's 20.
      for (let i = 0; i < 24; i++) {
        const r = await anon().post(`/v1/derived-lists/${created.id}/match`, i % 6 === 5 ? wrong : body)
        expect(r.status, `match ${i + 1}: ${r.text}`).toBe(i % 6 === 5 ? 401 : 200)
      }
      const r21 = await anon().post(`/v1/derived-lists/${created.id}/match`, body)
      expectEnvelope(r21, 429, "RATE_LIMIT")
      const retryAfter = Number(r21.headers.get("retry-after"))
      expect(retryAfter).toBeGreaterThan(0)
      expect(retryAfter).toBeLessThanOrEqual(3600)
      expect(r21.headers.get("x-ratelimit-limit")).toBe("20")
      const log = (await census.get(`/v1/derived-lists/${created.id}/access-log`)).body.access_log as Array<{ outcome: string }>
      expect(log).toHaveLength(25)
      expect(log.filter((e) => e.outcome === "ok")).toHaveLength(20)
      expect(log.filter((e) => e.outcome === "unauthorized")).toHaveLength(4)
      expect(log.at(-1)!.outcome).toBe("rate_limited")
      // a different list has its own budget
      const another = await createList({ hashes })
      expect((await anon().post(`/v1/derived-lists/${another.id}/match`, {
        list_key: another.list_key,
        values: deriveValues(another.list_key, hashes)
      })).status).toBe(200)
    })

    it("wrong list keys are limited per client address: the 21st failure in an hour is 429", async () => {
      const hashes = [randomHash()]
      const created = await createList({ hashes })
      const wrong = { list_key: randomBytes(32).toString("hex"), values: deriveValues(created.list_key, hashes) }
      for (let i = 0; i < 20; i++) {
        expect((await anon().post(`/v1/derived-lists/${created.id}/match`, wrong)).status).toBe(401)
      }
      expectEnvelope(await anon().post(`/v1/derived-lists/${created.id}/match`, wrong), 429, "RATE_LIMIT")
      // the list's own budget is untouched
      const ok = await anon().post(`/v1/derived-lists/${created.id}/match`, {
        list_key: created.list_key,
        values: deriveValues(created.list_key, hashes)
      })
      expect(ok.status).toBe(200)
    })

    // 50,000 values are ~3.35 MB of JSON: more than the general 1 MiB body limit.
    it("match accepts 50,000 values; 50,001 is 400 VALIDATION_ERROR", async () => {
      const hashes = [randomHash(), randomHash()]
      const created = await createList({ hashes })
      const values = [...deriveValues(created.list_key, hashes), ...randomHexValues(50_000 - 2)]
      const ok = await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values })
      expect(ok.status, ok.text.slice(0, 300)).toBe(200)
      expect(ok.body).toEqual({ matched: 2, total: 50_000 })
      const over = await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: [...values, ...randomHexValues(1)] })
      expectEnvelope(over, 400, "VALIDATION_ERROR")
    })

    // 100,000 hashes are ~6.7 MB of JSON: more than the general 1 MiB body limit.
    it("create accepts 100,000 explicit hashes; 100,001 is 400 VALIDATION_ERROR", async () => {
      const hashes = randomHexValues(100_000)
      const created = await createList({ hashes })
      expect(created.item_count).toBe(100_000)
      const probe = [hashes[0]!, hashes[99_999]!, randomHash()]
      const m = await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: deriveValues(created.list_key, probe) })
      expect(m.body).toEqual({ matched: 2, total: 3 })
      expectEnvelope(await census.post("/v1/derived-lists", { hashes: [...hashes, randomHash()], expires_in_hours: 1 }), 400, "VALIDATION_ERROR")
    }, 60_000)

    it("the database keeps no way back to the hashes: derived_values and derived_lists hold neither raw hashes nor list_key", async () => {
      const hashes = Array.from({ length: 5 }, randomHash)
      const created = await createList({ hashes, label: "db-check" })
      await anon().post(`/v1/derived-lists/${created.id}/match`, { list_key: created.list_key, values: deriveValues(created.list_key, hashes) })
      const [values, lists, access] = await Promise.all([rowsOf(server, "derived_values"), rowsOf(server, "derived_lists"), rowsOf(server, "derived_list_access")])
      const dump = JSON.stringify([values, lists, access])
      for (const secret of [created.list_key, ...hashes]) expect(dump).not.toContain(secret)
      const mine = values.filter((v) => v.list_id === created.id).map((v) => String(v.value)).sort()
      expect(mine).toEqual(hashes.map((h) => hmacHex(created.list_key, h)).sort())
      const row = lists.find((l) => l.id === created.id)!
      expect(Object.keys(row).sort()).toEqual([
        "api_key_id", "created_at", "expires_at", "id", "item_count", "key_hash", "label", "org_id", "revoked_at", "signature",
        "signed_payload_sha256", "signing_key_id"
      ])
      expect(row.key_hash).toBe(sha256Hex(created.list_key))
      expect(row.key_hash).not.toBe(created.list_key)
    })
  })
}
