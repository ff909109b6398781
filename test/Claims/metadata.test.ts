/**
 * Claim metadata over the real server (spec 2.4, 3.2, 4.7; CONTRACT §3–5):
 * GET with a quoted ETag, PATCH with If-Match (quoted / bare / mismatch → 412),
 * the race of two PATCHes with one etag, client-side encrypted extra_data, and
 * the soft delete of a claim.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { attestWith, b64url } from "../helpers/claims.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer, WIRE_TIME } from "../helpers/server.js"

const unquote = (v: string | null) => (v ?? "").replace(/^"(.*)"$/, "$1")

for (const dialect of await dialects()) {
  describe(`claim metadata (${dialect})`, () => {
    let server: TestServer
    let key: string
    let api: ReturnType<typeof client>
    beforeAll(async () => {
      server = await startTestServer(dialect)
      key = (await server.createKey()).key
      api = client(server.url, key)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("GET returns the caller's claim with a quoted ETag header equal to the body etag", async () => {
      const a = await attestWith(api, { source: "erp", extra_data: { po: 42, nested: { a: [1, 2] } } })
      const r = await api.get(`/v1/attestation/${a.id}/metadata`)
      expect(r.status).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(
        ["attestation_id", "claim_id", "client_encrypted", "etag", "extra_data", "source", "updated_at"]
      )
      expect(r.body).toMatchObject({
        attestation_id: a.id,
        claim_id: a.claim_id,
        source: "erp",
        extra_data: { po: 42, nested: { a: [1, 2] } },
        client_encrypted: false,
        etag: a.etag
      })
      expect(r.body.updated_at).toMatch(WIRE_TIME)
      const header = r.headers.get("etag")
      expect(header).toBe(`"${r.body.etag}"`)
      // unprefixed alias and whitespace-trimmed reference
      const alias = await api.get(`/attestation/${encodeURIComponent(` ${a.id} `)}/metadata`)
      expect(alias.status).toBe(200)
      expect(alias.body.etag).toBe(a.etag)
    })

    it("GET is 404 when the key holds no claim (another key's attestation, unknown id)", async () => {
      const other = client(server.url, (await server.createKey()).key)
      const a = await attestWith(other, { source: "theirs" })
      expectEnvelope(await api.get(`/v1/attestation/${a.id}/metadata`), 404, "NOT_FOUND")
      expectEnvelope(await api.get(`/v1/attestation/att_AAAAAAAAAAAAAAAAAAAAAAAA/metadata`), 404, "NOT_FOUND")
      expectEnvelope(await api.get(`/v1/attestation/not-an-id/metadata`), 404, "NOT_FOUND")
    })

    it("scopes: metadata:read reads only; metadata:write implies read; neither → 403; no key → 401", async () => {
      const reader = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:read"] })).key)
      const writer = client(server.url, (await server.createKey({ scopes: ["attest", "metadata:write"] })).key)
      const none = client(server.url, (await server.createKey({ scopes: ["attest", "tags:write"] })).key)
      const ar = await attestWith(reader, { source: "r" })
      const aw = await attestWith(writer, { source: "w" })
      const an = await attestWith(none, { source: "n" })

      expect((await reader.get(`/v1/attestation/${ar.id}/metadata`)).status).toBe(200)
      expectEnvelope(await reader.patch(`/v1/attestation/${ar.id}/metadata`, { source: "x" }), 403, "FORBIDDEN")
      expectEnvelope(await reader.delete(`/v1/attestation/${ar.id}/metadata`), 403, "FORBIDDEN")
      expect((await reader.get(`/v1/attestation/${ar.id}/metadata`)).body.source).toBe("r")

      expect((await writer.get(`/v1/attestation/${aw.id}/metadata`)).status).toBe(200)
      const p = await writer.patch(`/v1/attestation/${aw.id}/metadata`, { source: "w2" })
      expect(p.status).toBe(200)
      expect(p.body.source).toBe("w2")

      expectEnvelope(await none.get(`/v1/attestation/${an.id}/metadata`), 403, "FORBIDDEN")
      expectEnvelope(await none.patch(`/v1/attestation/${an.id}/metadata`, { source: "x" }), 403, "FORBIDDEN")
      expectEnvelope(await none.delete(`/v1/attestation/${an.id}/metadata`), 403, "FORBIDDEN")

      expectEnvelope(await client(server.url).get(`/v1/attestation/${an.id}/metadata`), 401, "AUTH_ERROR")
      expectEnvelope(await client(server.url, "atk_live_" + "x".repeat(32)).get(`/v1/attestation/${an.id}/metadata`), 401, "AUTH_ERROR")
    })

    it("PATCH: source ≤ 100, extra_data replaced whole (no merge), a new etag on every update", async () => {
      const a = await attestWith(api, { source: "one", extra_data: { keep: 1, drop: 2 } })
      const etags = new Set<string>([a.etag])

      const r1 = await api.patch(`/v1/attestation/${a.id}/metadata`, { extra_data: { only: "this" } })
      expect(r1.status).toBe(200)
      expect(r1.body.extra_data).toEqual({ only: "this" })
      expect(r1.body.source).toBe("one") // not sent → unchanged
      expect(r1.headers.get("etag")).toBe(`"${r1.body.etag}"`)
      etags.add(r1.body.etag)

      const r2 = await api.patch(`/v1/attestation/${a.id}/metadata`, { source: "s".repeat(100) })
      expect(r2.status).toBe(200)
      expect(r2.body.source).toBe("s".repeat(100))
      expect(r2.body.extra_data).toEqual({ only: "this" })
      etags.add(r2.body.etag)

      // same values again: still a new etag
      const r3 = await api.patch(`/v1/attestation/${a.id}/metadata`, { source: "s".repeat(100) })
      expect(r3.status).toBe(200)
      etags.add(r3.body.etag)
      expect(etags.size).toBe(4)

      const tooLong = await api.patch(`/v1/attestation/${a.id}/metadata`, { source: "s".repeat(101) })
      expectEnvelope(tooLong, 400, "VALIDATION_ERROR")
      const notObject = await api.patch(`/v1/attestation/${a.id}/metadata`, { extra_data: [1, 2] })
      expectEnvelope(notObject, 400, "VALIDATION_ERROR")

      const g = await api.get(`/v1/attestation/${a.id}/metadata`)
      expect(g.body).toMatchObject({ source: "s".repeat(100), extra_data: { only: "this" }, etag: r3.body.etag })

      // null clears
      const cleared = await api.patch(`/v1/attestation/${a.id}/metadata`, { source: null, extra_data: null })
      expect(cleared.status).toBe(200)
      expect(cleared.body).toMatchObject({ source: null, extra_data: null })
    })

    it("PATCH: an empty body (or none) is 400 and changes nothing", async () => {
      const a = await attestWith(api, { source: "unchanged" })
      expectEnvelope(await api.patch(`/v1/attestation/${a.id}/metadata`, {}), 400, "VALIDATION_ERROR")
      expectEnvelope(await api.call("PATCH", `/v1/attestation/${a.id}/metadata`), 400, "VALIDATION_ERROR")
      const g = await api.get(`/v1/attestation/${a.id}/metadata`)
      expect(g.body).toMatchObject({ source: "unchanged", etag: a.etag })
    })

    it("If-Match: quoted, bare, weak and lists are accepted; a mismatch is 412 PRECONDITION_FAILED and changes nothing", async () => {
      const a = await attestWith(api, { source: "v0" })
      const path = `/v1/attestation/${a.id}/metadata`

      const quoted = await api.patch(path, { source: "v1" }, { "if-match": `"${a.etag}"` })
      expect(quoted.status).toBe(200)
      const bare = await api.patch(path, { source: "v2" }, { "if-match": quoted.body.etag })
      expect(bare.status).toBe(200)
      const list = await api.patch(path, { source: "v3" }, { "if-match": `"nope", "${bare.body.etag}"` })
      expect(list.status).toBe(200)
      const weak = await api.patch(path, { source: "v4" }, { "if-match": `W/"${list.body.etag}"` })
      expect(weak.status).toBe(200)
      const current = weak.body.etag as string

      for (const stale of [`"${a.etag}"`, a.etag, quoted.body.etag, `"${current}x"`, "garbage"]) {
        const r = await api.patch(path, { source: "lost", extra_data: { lost: true } }, { "if-match": stale })
        expectEnvelope(r, 412, "PRECONDITION_FAILED")
      }
      const g = await api.get(path)
      expect(g.body).toMatchObject({ source: "v4", extra_data: null, etag: current })
      expect(unquote(g.headers.get("etag"))).toBe(current)

      // no If-Match: unconditional
      const unconditional = await api.patch(path, { source: "v5" })
      expect(unconditional.status).toBe(200)
      expect(unconditional.body.source).toBe("v5")
      // * matches any current etag
      const star = await api.patch(path, { source: "v6" }, { "if-match": "*" })
      expect(star.status).toBe(200)
    })

    it("two concurrent PATCHes with the same If-Match: exactly one 200 and one 412 (repeated)", async () => {
      const a = await attestWith(api, { source: "race" })
      const path = `/v1/attestation/${a.id}/metadata`
      let etag = a.etag
      for (let round = 0; round < 6; round++) {
        const [x, y] = await Promise.all([
          api.patch(path, { source: `x${round}`, extra_data: { who: "x" } }, { "if-match": `"${etag}"` }),
          api.patch(path, { source: `y${round}`, extra_data: { who: "y" } }, { "if-match": `"${etag}"` })
        ])
        const statuses = [x.status, y.status].sort()
        expect(statuses, `round ${round}: ${x.text} / ${y.text}`).toEqual([200, 412])
        const winner = x.status === 200 ? x : y
        const loser = x.status === 200 ? y : x
        expectEnvelope(loser, 412, "PRECONDITION_FAILED")
        const g = await api.get(path)
        // the stored claim is exactly the winner's write
        expect(g.body.etag).toBe(winner.body.etag)
        expect(g.body.source).toBe(winner.body.source)
        expect(g.body.extra_data).toEqual(winner.body.extra_data)
        etag = g.body.etag
      }
    })

    it("client_encrypted: extra_data is opaque: any JSON object is stored and returned exactly as sent (key order too)", async () => {
      const b64 = (n: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("base64")
      const layouts: Array<Record<string, unknown>> = [
        { alg: "A256GCM", iv: b64url(12), ciphertext: b64url(48) }, // the helpers' layout
        { iv: b64url(12), ciphertext: b64url(20) }, // no alg
        { v: 2, alg: "A256GCM", iv: b64(12), ct: b64(32), tag: b64(16) }, // separate tag, standard Base64, a version
        { ciphertext: b64(40), iv: b64(12), alg: "A128GCM", kid: "key-7" }, // other alg, other key order
        { enc: "XChaCha20-Poly1305", nonce: b64url(24), data: [1, 2, 3], meta: { wrapped: { k: "x" } } },
        { iv: "not base64url!", ciphertext: "a+b/c==", extra: "field", n: 12, flag: true, nothing: null }
      ]
      const same = (a: unknown, b: unknown) => expect(JSON.stringify(a)).toBe(JSON.stringify(b))
      let last = ""
      for (const blob of layouts) {
        const a = await attestWith(api, { client_encrypted: true, extra_data: blob })
        same(a.extra_data, blob)
        const g = await api.get(`/v1/attestation/${a.id}/metadata`)
        expect(g.body.client_encrypted).toBe(true)
        same(g.body.extra_data, blob)
        last = a.id
      }
      // PATCH an encrypted claim to every other layout; each read returns it byte for byte
      for (const blob of [...layouts].reverse()) {
        const p = await api.patch(`/v1/attestation/${last}/metadata`, { extra_data: blob })
        expect(p.status).toBe(200)
        same(p.body.extra_data, blob)
        expect(p.body.client_encrypted).toBe(true)
        same((await api.get(`/v1/attestation/${last}/metadata`)).body.extra_data, blob)
      }
      // the size limit still holds for encrypted blobs, and a rejected write changes nothing
      const before = (await api.get(`/v1/attestation/${last}/metadata`)).body.extra_data
      const huge = { ct: "A".repeat(17 * 1024) }
      expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash(), client_encrypted: true, extra_data: huge }), 400, "VALIDATION_ERROR")
      expectEnvelope(await api.patch(`/v1/attestation/${last}/metadata`, { extra_data: huge }), 400, "VALIDATION_ERROR")
      same((await api.get(`/v1/attestation/${last}/metadata`)).body.extra_data, before)
      // not an object is still a schema error
      for (const extra_data of ["a string", [1, 2], 42]) {
        expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash(), client_encrypted: true, extra_data }), 400, "VALIDATION_ERROR")
      }
      // a plaintext claim can be switched to encrypted with any blob
      const plain = await attestWith(api, { extra_data: { plain: "text" } })
      const switched = await api.patch(`/v1/attestation/${plain.id}/metadata`, { client_encrypted: true, extra_data: layouts[2] })
      expect(switched.status).toBe(200)
      expect(switched.body.client_encrypted).toBe(true)
      same(switched.body.extra_data, layouts[2])
    })

    it("DELETE soft-deletes: {deleted: true}, then 404; verify hides the source; re-attest gives a fresh claim; others unchanged", async () => {
      const other = client(server.url, (await server.createKey()).key)
      const hash = randomHash()
      const mine = await attestWith(api, { hash_hex: hash, source: "mine-src", extra_data: { mine: true } })
      const theirs = await attestWith(other, { hash_hex: hash, source: "their-src", extra_data: { theirs: true } })
      expect(theirs.id).toBe(mine.id)
      expect((await api.put(`/v1/attestation/${mine.id}/tags`, { tags: [{ key: "env", value: "prod" }] })).status).toBe(200)
      const verifyBefore = await api.post("/v1/verify", { hash_hex: hash })
      expect(verifyBefore.body.source).toBe("mine-src")

      const del = await api.delete(`/v1/attestation/${mine.id}/metadata`)
      expect(del.status).toBe(200)
      expect(del.body).toEqual({ deleted: true })

      expectEnvelope(await api.get(`/v1/attestation/${mine.id}/metadata`), 404, "NOT_FOUND")
      expectEnvelope(await api.patch(`/v1/attestation/${mine.id}/metadata`, { source: "x" }), 404, "NOT_FOUND")
      expectEnvelope(await api.delete(`/v1/attestation/${mine.id}/metadata`), 404, "NOT_FOUND")
      expectEnvelope(await api.get(`/v1/attestation/${mine.id}/tags`), 404, "NOT_FOUND")
      const q = await api.post("/v1/tags/query", { filter: { and: [{ key: "env", value: "prod" }] } })
      expect(q.body.attestations.map((x: { id: string }) => x.id)).not.toContain(mine.id)

      const verifyAfter = await api.post("/v1/verify", { hash_hex: hash })
      expect(verifyAfter.body.exists).toBe(true)
      expect(verifyAfter.body).not.toHaveProperty("source")
      expect(verifyAfter.text).not.toContain("mine-src")
      const batch = await api.post("/v1/verify/batch", { hashes: [hash], detailed: true })
      expect(batch.status).toBe(200)
      expect(batch.text).not.toContain("mine-src")

      // the other key's claim is untouched
      const theirsNow = await other.get(`/v1/attestation/${mine.id}/metadata`)
      expect(theirsNow.body).toMatchObject({ claim_id: theirs.claim_id, source: "their-src", extra_data: { theirs: true }, etag: theirs.etag })
      expect((await other.post("/v1/verify", { hash_hex: hash })).body.source).toBe("their-src")

      // the same key attesting again: existing attestation, a fresh claim
      const again = await api.post("/v1/attest", { hash_hex: hash, source: "fresh" })
      expect(again.status).toBe(200)
      expect(again.body.status).toBe("existing")
      expect(again.body.id).toBe(mine.id)
      expect(again.body.claim_id).not.toBe(mine.claim_id)
      expect(again.body.claim_id).not.toBe(theirs.claim_id)
      expect(again.body.source).toBe("fresh")
      expect(again.body.extra_data).toBeNull()
      const fresh = await api.get(`/v1/attestation/${mine.id}/metadata`)
      expect(fresh.body).toMatchObject({ claim_id: again.body.claim_id, source: "fresh", extra_data: null })
      expect((await api.get(`/v1/attestation/${mine.id}/tags`)).body).toEqual({ tags: [] })
      expect((await api.post("/v1/verify", { hash_hex: hash })).body.source).toBe("fresh")
    })
  })
}
