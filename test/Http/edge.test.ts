/**
 * Issue 11 §2 (first bullet) and §7: public routes cannot be made expensive and
 * keyed routes answer in the right order, on both stores and for both kinds of
 * body (with a Content-Length, checked before the body is read; chunked, measured
 * as it arrives).
 * - an error names the path and the rule and never echoes the refused value;
 * - each route has a body limit that fits it; a public match looks its list up
 *   before it reads the body;
 * - a keyed route answers 401, then 403 for a missing scope, before it reads
 *   or validates a body (and counts the request once);
 * - a top-level `__proto__` key in extra_data is data like any other key.
 */
import net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_BODY_BYTES } from "../../src/Server/BodyLimits.js"
import { apiRoutes } from "../../src/Server/Routes.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, rawRequest, startTestServer, type Reply, type TestServer } from "../helpers/server.js"

/**
 * Sends only the request head (declaring `contentLength` bytes) and at most
 * `prefix` of the body, then waits for the answer: a server that answers has
 * decided without reading the body. Resolves with the status line and body
 * text, or "no answer" after 10 s.
 */
const headOnly = (base: string, head: string, prefix = ""): Promise<string> => {
  const port = Number(new URL(base).port)
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1")
    let data = ""
    const timer = setTimeout(() => {
      sock.destroy()
      resolve(data || "no answer")
    }, 10_000)
    sock.on("data", (d) => {
      data += d.toString("utf8")
      const end = data.indexOf("\r\n\r\n")
      if (end < 0) return
      const length = /content-length: (\d+)/i.exec(data.slice(0, end))
      if (length && Buffer.byteLength(data.slice(end + 4)) >= Number(length[1])) {
        clearTimeout(timer)
        sock.destroy()
        resolve(data)
      }
    })
    sock.on("error", () => {})
    sock.write(head + prefix)
  })
}

const post = (path: string, length: number, headers: Record<string, string> = {}) =>
  `POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n` +
  Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") + "\r\n"

const statusOf = (raw: string) => raw.slice(9, 12)

/** A refused request's answer: small, and none of the refused value in it. */
const expectNoEcho = (r: Reply, marker: string) => {
  expect(r.text.length, r.text.slice(0, 300)).toBeLessThan(2048)
  expect(r.text).not.toContain(marker)
}

const chunked = (base: string, path: string, body: string, headers: Record<string, string> = {}) =>
  rawRequest(base, {
    method: path.startsWith("PUT ") ? "PUT" : "POST",
    path: path.replace(/^PUT /, ""),
    headers: { "content-type": "application/json", "transfer-encoding": "chunked", ...headers },
    chunks: [body]
  })

/** Every keyed route that takes a body, with its path parameters filled in. */
const keyedBodyRoutes = () =>
  apiRoutes()
    .filter((r) => r.keyed && r.method !== "GET")
    .map((r) => ({
      ...r,
      url: "/v1" + r.path.replace(/:[^/]+/g, "x")
    }))

for (const dialect of await dialects()) {
  describe(`edge order and limits (${dialect})`, () => {
    let server: TestServer

    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    describe("errors never echo the value they refuse", () => {
      it("POST /v1/verify: a long hash_hex and a 1 MB array", async () => {
        const marker = "z".repeat(64)
        const long = await client(server.url).post("/v1/verify", { hash_hex: "z".repeat(7000) })
        expectEnvelope(long, 400, "VALIDATION_ERROR")
        expectNoEcho(long, marker)
        expect(long.body.details[0].path).toEqual(["hash_hex"])
        const array = JSON.stringify(Array.from({ length: 200_000 }, (_, i) => i % 10))
        const big = await client(server.url).post("/v1/verify", array)
        expectEnvelope(big, 413, "VALIDATION_ERROR")
        expectNoEcho(big, "0,1,2,3,4,5")
        // under the route's limit, a wrong top-level type is named, not echoed
        const small = await client(server.url).post("/v1/verify", JSON.stringify(Array.from({ length: 1000 }, (_, i) => i % 10)))
        expectEnvelope(small, 400, "VALIDATION_ERROR")
        expectNoEcho(small, "0,1,2,3,4,5")
        // a chunked body answers alike
        const viaChunks = await chunked(server.url, "/v1/verify", JSON.stringify({ hash_hex: "z".repeat(7000) }))
        expectEnvelope(viaChunks, 400, "VALIDATION_ERROR")
        expectNoEcho(viaChunks, marker)
      })

      it("POST /v1/attest (with a Content-Length and chunked) and batch verify", async () => {
        const { key } = await server.createKey()
        const marker = "q".repeat(64)
        const body = { hash_hex: ["q".repeat(500_000)] }
        const sized = await client(server.url, key).post("/v1/attest", body)
        expectEnvelope(sized, 400, "VALIDATION_ERROR")
        expectNoEcho(sized, marker)
        const viaChunks = await chunked(server.url, "/v1/attest", JSON.stringify(body), { authorization: `Bearer ${key}` })
        expectEnvelope(viaChunks, 400, "VALIDATION_ERROR")
        expectNoEcho(viaChunks, marker)
        const batch = await client(server.url).post("/v1/verify/batch", { hashes: [randomHash(), { x: "q".repeat(20_000) }] })
        expectEnvelope(batch, 400, "VALIDATION_ERROR")
        expectNoEcho(batch, marker)
        expect(batch.body.details[0].path).toEqual(["hashes", 1])
      })

      it("POST /v1/derived-lists/{id}/match on a live list: a 3 MB body that is wrong is refused in a few hundred bytes", async () => {
        const { key } = await server.createKey({ orgId: `org-${randomHash().slice(0, 8)}` })
        const list = await client(server.url, key).post("/v1/derived-lists", { hashes: [randomHash()], expires_in_hours: 1 })
        expect(list.status).toBe(201)
        const marker = "7".repeat(64)
        const array = JSON.stringify(Array.from({ length: 45_000 }, () => "7".repeat(64)))
        const top = await client(server.url).post(`/v1/derived-lists/${list.body.id}/match`, array)
        expectEnvelope(top, 400, "VALIDATION_ERROR")
        expectNoEcho(top, marker)
        const inner = await client(server.url).post(`/v1/derived-lists/${list.body.id}/match`, {
          list_key: list.body.list_key,
          values: ["7".repeat(3_000_000)]
        })
        expectEnvelope(inner, 400, "VALIDATION_ERROR")
        expectNoEcho(inner, marker)
        // a value of the wrong type is named by the rule (Effect never formats the 3 MB value)
        const wrongType = await client(server.url).post(`/v1/derived-lists/${list.body.id}/match`, {
          list_key: list.body.list_key,
          values: "7".repeat(3_000_000)
        })
        expectEnvelope(wrongType, 400, "VALIDATION_ERROR")
        expectNoEcho(wrongType, marker)
        expect(wrongType.body.details).toEqual([{ path: ["values"], message: "must be an array of derived values" }])
        const notHex = await client(server.url).post("/v1/verify/batch", { hashes: [{ a: 1 }] })
        expect(notHex.body.details).toEqual([{ path: ["hashes", 0], message: "must be exactly 64 lowercase hex characters (a SHA-256 digest)" }])
      })

      it("share-token ids it cannot grant are named by a short excerpt", async () => {
        const { key } = await server.createKey()
        const r = await client(server.url, key).post("/v1/share-tokens", { attestation_ids: ["w".repeat(100_000)], expires_in: 60 })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
        expectNoEcho(r, "w".repeat(64))
      })
    })

    describe("per-route body limits", () => {
      it("verify takes a few KiB, batch verify its 100 hashes, attest keeps 1 MiB (413 envelope above)", async () => {
        const verify = await client(server.url).post("/v1/verify", JSON.stringify({ hash_hex: randomHash(), pad: "a".repeat(10_000) }))
        expectEnvelope(verify, 413, "VALIDATION_ERROR")
        expect(verify.body.details.limit_bytes).toBeLessThan(10_000)
        const okVerify = await client(server.url).post("/v1/verify", JSON.stringify({ hash_hex: randomHash(), pad: "a".repeat(1000) }))
        expect(okVerify.status).toBe(200)
        const hundred = Array.from({ length: 100 }, randomHash)
        const okBatch = await client(server.url).post("/v1/verify/batch", JSON.stringify({ hashes: hundred }, null, 4))
        expect(okBatch.status).toBe(200)
        expect(okBatch.body.count).toBe(100)
        const bigBatch = await client(server.url).post("/v1/verify/batch", { hashes: hundred, pad: "a".repeat(100_000) })
        expectEnvelope(bigBatch, 413, "VALIDATION_ERROR")
        const { key } = await server.createKey()
        const attest = await client(server.url, key).post("/v1/attest", { hash_hex: randomHash(), pad: "a".repeat(500_000) })
        expect(attest.status).toBe(201)
        expect(MAX_BODY_BYTES).toBe(1024 * 1024)
      })

      it("a match of 50,000 pretty-printed values fits its limit", async () => {
        const { key } = await server.createKey({ orgId: `org-${randomHash().slice(0, 8)}` })
        const list = await client(server.url, key).post("/v1/derived-lists", { hashes: [randomHash()], expires_in_hours: 1 })
        const values = Array.from({ length: 50_000 }, randomHash)
        const r = await client(server.url).post(`/v1/derived-lists/${list.body.id}/match`, JSON.stringify({ list_key: list.body.list_key, values }, null, 4))
        expect(r.status, r.text.slice(0, 300)).toBe(200)
        expect(r.body).toEqual({ matched: 0, total: 50_000 })
      })
    })

    describe("a public match looks its list up before it reads the body", () => {
      it("unknown list with an 8 MiB body declared and none sent: 404", async () => {
        const raw = await headOnly(server.url, post(`/v1/derived-lists/dl_nope${randomHash().slice(0, 8)}/match`, 8 * 1024 * 1024), "{\"list_key\":")
        expect(statusOf(raw), raw.slice(0, 200)).toBe("404")
        expect(raw).toContain("NOT_FOUND")
      })

      it("a live list with a body over the route's limit: 413 without reading it", async () => {
        const { key } = await server.createKey({ orgId: `org-${randomHash().slice(0, 8)}` })
        const list = await client(server.url, key).post("/v1/derived-lists", { hashes: [randomHash()], expires_in_hours: 1 })
        const raw = await headOnly(server.url, post(`/v1/derived-lists/${list.body.id}/match`, 8 * 1024 * 1024))
        expect(statusOf(raw), raw.slice(0, 200)).toBe("413")
        // a revoked list is unknown too
        await client(server.url, key).delete(`/v1/derived-lists/${list.body.id}`)
        const revoked = await headOnly(server.url, post(`/v1/derived-lists/${list.body.id}/match`, 1024 * 1024))
        expect(statusOf(revoked), revoked.slice(0, 200)).toBe("404")
      })
    })

    describe("keyed routes: 401, then 403, then the body", () => {
      it("no key with an oversized body declared and not sent: 401, not 413", async () => {
        for (const path of ["/v1/attest", "/v1/attest/batch", "/v1/scan", "/v1/derived-lists"]) {
          const raw = await headOnly(server.url, post(path, 9 * 1024 * 1024))
          expect(statusOf(raw), `${path}: ${raw.slice(0, 200)}`).toBe("401")
        }
        const badKey = await headOnly(server.url, post("/v1/attest", 2 * 1024 * 1024, { authorization: "Bearer atk_test_nope" }))
        expect(statusOf(badKey), badKey.slice(0, 200)).toBe("401")
      })

      it("an upload refused before its body is read: a node client sending all of it reads its 401 (no reset)", async () => {
        // The answer goes out at once; the connection closes only once the body has arrived (read and dropped).
        const body = Buffer.alloc(2 * 1024 * 1024, 0x20)
        for (const connection of ["close", "keep-alive"]) {
          const r = await rawRequest(server.url, {
            method: "POST",
            path: "/v1/attest",
            headers: { "content-type": "application/json", "content-length": String(body.length), connection },
            chunks: [body]
          })
          expectEnvelope(r, 401, "AUTH_ERROR")
          expect(r.headers.get("connection")).toBe("close")
        }
      })

      it("every keyed route with a body: no key or a bad body → 401; a key without the scope → 403 (both paths)", async () => {
        const { key: scopeless } = await server.createKey({ scopes: [] })
        const routes = keyedBodyRoutes()
        expect(routes.length).toBeGreaterThanOrEqual(10)
        const bad = `{"a":"x\\u0000y","deep":${"[".repeat(100)}${"]".repeat(100)}}`
        for (const route of routes) {
          const method = route.method
          const noKey = await client(server.url).call(method, route.url, bad)
          expectEnvelope(noKey, 401, "AUTH_ERROR")
          const noKeyStack = await rawRequest(server.url, {
            method,
            path: route.url,
            headers: { "content-type": "application/json", "transfer-encoding": "chunked", authorization: "Bearer atk_test_x" },
            chunks: [bad]
          })
          expectEnvelope(noKeyStack, 401, "AUTH_ERROR")
          if (route.scopes === undefined) continue
          const noScope = await client(server.url, scopeless).call(method, route.url, bad)
          expect(noScope.status, `${method} ${route.url}: ${noScope.text.slice(0, 200)}`).toBe(403)
          expectEnvelope(noScope, 403, "FORBIDDEN")
        }
      })

      it("an empty tags PUT from a key without tags:write is 403, not 400", async () => {
        const { key: writer } = await server.createKey()
        const a = await client(server.url, writer).post("/v1/attest", { hash_hex: randomHash() })
        const { key: reader } = await server.createKey({ scopes: ["tags:read", "attest"] })
        const r = await client(server.url, reader).put(`/v1/attestation/${a.body.id}/tags`, { tags: [] })
        expectEnvelope(r, 403, "FORBIDDEN")
        const viaChunks = await chunked(server.url, `PUT /v1/attestation/${a.body.id}/tags`, "{\"tags\":[]}", { authorization: `Bearer ${reader}` })
        expectEnvelope(viaChunks, 403, "FORBIDDEN")
        // and the key holding the scope gets the validation error
        expectEnvelope(await client(server.url, writer).put(`/v1/attestation/${a.body.id}/tags`, { tags: [] }), 400, "VALIDATION_ERROR")
      })

      it("POST /v1/attest from a key without attest: 403 before the body is validated (with a Content-Length and chunked)", async () => {
        const { key } = await server.createKey({ scopes: ["tags:read"] })
        expectEnvelope(await client(server.url, key).post("/v1/attest", { nope: 1 }), 403, "FORBIDDEN")
        expectEnvelope(await chunked(server.url, "/v1/attest", "{\"nope\":1}", { authorization: `Bearer ${key}` }), 403, "FORBIDDEN")
      })

      it("a request authenticated before its body is read is counted once against the key's limit", async () => {
        const { key } = await server.createKey({ rateLimit: 4 })
        const c = client(server.url, key)
        const a = await c.post("/v1/attest", { hash_hex: randomHash() })
        expect(a.status).toBe(201)
        expect(a.headers.get("x-ratelimit-remaining")).toBe("3")
        const put = await c.put(`/v1/attestation/${a.body.id}/tags`, { tags: [{ key: "k", value: "v" }] })
        expect(put.status).toBe(200)
        expect(put.headers.get("x-ratelimit-remaining")).toBe("2")
        const viaChunks = await chunked(server.url, "/v1/attest", JSON.stringify({ hash_hex: randomHash() }), { authorization: `Bearer ${key}` })
        expect(viaChunks.status).toBe(201)
        expect(viaChunks.headers.get("x-ratelimit-remaining")).toBe("1")
      })
    })

    describe("§7: a top-level __proto__ key in extra_data is data", () => {
      const proto = (r: Reply) => {
        const extra = JSON.parse(r.text).extra_data
        return { own: Object.prototype.hasOwnProperty.call(extra, "__proto__"), keys: Object.keys(extra), value: extra["__proto__"] }
      }

      it("kept through attest, batch attest, metadata read and PATCH", async () => {
        const { key } = await server.createKey()
        const c = client(server.url, key)
        const extra = `{"__proto__":{"polluted":true},"b":2}`
        const one = await c.post("/v1/attest", `{"hash_hex":"${randomHash()}","extra_data":${extra}}`)
        expect(one.status).toBe(201)
        expect(proto(one)).toEqual({ own: true, keys: ["__proto__", "b"], value: { polluted: true } })
        const read = await c.get(`/v1/attestation/${one.body.id}/metadata`)
        expect(proto(read)).toEqual({ own: true, keys: ["__proto__", "b"], value: { polluted: true } })
        const viaChunks = await chunked(server.url, "/v1/attest", `{"hash_hex":"${randomHash()}","extra_data":${extra}}`, { authorization: `Bearer ${key}` })
        expect(viaChunks.status).toBe(201)
        expect(proto(viaChunks).own).toBe(true)
        const batch = await c.post("/v1/attest/batch", `{"hashes":["${randomHash()}"],"extra_data":${extra}}`)
        expect(batch.status).toBe(200)
        const item = JSON.parse(batch.text).attestations[0]
        expect(Object.keys(item.extra_data)).toEqual(["__proto__", "b"])
        const patched = await c.patch(`/v1/attestation/${one.body.id}/metadata`, `{"extra_data":{"__proto__":{"x":1}}}`)
        expect(patched.status, patched.text.slice(0, 300)).toBe(200)
        const after = await c.get(`/v1/attestation/${one.body.id}/metadata`)
        expect(proto(after)).toEqual({ own: true, keys: ["__proto__"], value: { x: 1 } })
        expect(({} as any).polluted).toBeUndefined()
      })
    })
  })
}
