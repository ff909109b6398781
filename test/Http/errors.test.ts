/**
 * Error classes through a real server: every error is exactly the envelope
 * `{error: true, code, message, details}`, and every response carries X-Request-Id.
 */
import fc from "fast-check"
import net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import {
  client,
  expectEnvelope,
  randomHash,
  rawRequest,
  startTestServer,
  statsOf,
  type TestServer
} from "../helpers/server.js"

const HEX64 = /^[0-9a-f]{64}$/

/**
 * POSTs `{hash_hex, pad}` of about `size` bytes with Transfer-Encoding: chunked
 * over a raw socket; resolves with the raw reply. By default the
 * body is streamed slowly and writing stops once the server answers; with
 * `heedless`, the client reads nothing until it has written the whole body,
 * as slowly. The request asks for `Connection: close` unless `keepAlive`.
 */
const chunkedUpload = (
  base: string,
  path: string,
  size: number,
  options: { readonly heedless?: boolean; readonly keepAlive?: boolean; readonly headers?: Record<string, string> } = {}
): Promise<string> => {
  const port = Number(new URL(base).port)
  const body = JSON.stringify({ hash_hex: randomHash(), pad: "a".repeat(size) })
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1")
    if (options.heedless) sock.pause()
    let data = ""
    let answered = false
    const timer = setTimeout(() => sock.destroy(), 5000)
    sock.on("data", (d) => {
      answered = true
      data += d.toString("utf8")
      // the whole reply: its Content-Length read, or the last chunk of a chunked one
      const head = data.indexOf("\r\n\r\n")
      const length = head < 0 ? null : /content-length: (\d+)/i.exec(data.slice(0, head))
      const whole = length ? Buffer.byteLength(data.slice(head + 4)) >= Number(length[1]) : /\r\n0\r\n\r\n$/.test(data)
      if (head >= 0 && whole) sock.end()
    })
    sock.on("error", (e) => {
      data += ` [socket error: ${e.message}]`
    })
    sock.on("close", () => {
      clearTimeout(timer)
      resolve(data)
    })
    const extra = Object.entries(options.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join("")
    const connection = options.keepAlive ? "" : "Connection: close\r\n"
    sock.write(`POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n${connection}${extra}\r\n`)
    const step = 64 * 1024
    const write = (i: number) => {
      if ((answered && !options.heedless) || sock.destroyed) return
      if (i >= body.length) {
        sock.write("0\r\n\r\n", () => sock.resume())
        return
      }
      const part = body.slice(i, i + step)
      sock.write(`${part.length.toString(16)}\r\n${part}\r\n`, () => setTimeout(() => write(i + step), 2))
    }
    write(0)
  })
}

for (const dialect of await dialects()) {
  describe(`HTTP errors (${dialect})`, () => {
    let server: TestServer
    let key: string
    let keyId: string

    beforeAll(async () => {
      server = await startTestServer(dialect)
      const k = await server.createKey({ label: "errors" })
      key = k.key
      keyId = k.id
    })
    afterAll(async () => {
      await server?.close()
    })

    describe("invalid hash_hex", () => {
      const cases: Array<[string, unknown]> = [
        ["uppercase", "A".repeat(64)],
        ["mixed case", "aB".repeat(32)],
        ["63 characters", "a".repeat(63)],
        ["65 characters", "a".repeat(65)],
        ["non-hex", "g".repeat(64)],
        ["0x prefix", "0x" + "a".repeat(62)],
        ["surrounding space", ` ${"a".repeat(64)}`],
        ["empty", ""],
        ["a number", 12345],
        ["null", null],
        ["an array", ["a".repeat(64)]]
      ]
      for (const [name, value] of cases) {
        it(`${name} → 400 VALIDATION_ERROR naming hash_hex (attest and verify)`, async () => {
          const a = await client(server.url, key).post("/v1/attest", { hash_hex: value })
          expectEnvelope(a, 400, "VALIDATION_ERROR")
          expect(JSON.stringify(a.body.details)).toContain("hash_hex")
          const v = await client(server.url).post("/v1/verify", { hash_hex: value })
          expectEnvelope(v, 400, "VALIDATION_ERROR")
          expect(JSON.stringify(v.body.details)).toContain("hash_hex")
        })
      }

      it("missing hash_hex → 400 naming hash_hex", async () => {
        for (const body of [{}, { source: "x" }]) {
          const r = await client(server.url, key).post("/v1/attest", body)
          expectEnvelope(r, 400, "VALIDATION_ERROR")
          expect(JSON.stringify(r.body.details)).toContain("hash_hex")
        }
      })

      it("property: any non-hash string is 400 VALIDATION_ERROR and writes nothing", async () => {
        const api = client(server.url, key)
        const before = (await statsOf(server.url)).total_attestations
        const nearMiss = fc.oneof(
          fc.string(),
          fc.fullUnicodeString({ maxLength: 80 }),
          fc.stringMatching(/^[0-9a-fA-F]{64}$/),
          fc.stringMatching(/^[0-9a-f]{0,63}$/),
          fc.stringMatching(/^[0-9a-f]{65,70}$/),
          fc.stringMatching(/^\s*[0-9a-f]{64}\s*$/)
        ).filter((s) => !HEX64.test(s))
        await fc.assert(
          fc.asyncProperty(nearMiss, async (s) => {
            const r = await api.post("/v1/attest", { hash_hex: s })
            expectEnvelope(r, 400, "VALIDATION_ERROR")
            expect(JSON.stringify(r.body.details)).toContain("hash_hex")
          }),
          { numRuns: 50 }
        )
        await fc.assert(
          fc.asyncProperty(fc.anything().filter((v) => typeof v !== "string"), async (v) => {
            const r = await api.post("/v1/attest", { hash_hex: v })
            expectEnvelope(r, 400, "VALIDATION_ERROR")
          }),
          { numRuns: 20 }
        )
        expect((await statsOf(server.url)).total_attestations).toBe(before)
      })
    })

    describe("bodies", () => {
      it("invalid JSON → 400 VALIDATION_ERROR", async () => {
        for (const body of ["{", "{\"hash_hex\": }", "not json", "{\"hash_hex\":\"" + "a".repeat(64) + "\"} trailing"]) {
          const r = await client(server.url, key).post("/v1/attest", body)
          expectEnvelope(r, 400, "VALIDATION_ERROR")
          const v = await client(server.url).post("/v1/verify", body)
          expectEnvelope(v, 400, "VALIDATION_ERROR")
        }
      })

      it("a JSON body that is not an object → 400", async () => {
        for (const body of ["null", "[]", "42", "\"x\""]) {
          expectEnvelope(await client(server.url, key).post("/v1/attest", body), 400, "VALIDATION_ERROR")
        }
      })

      it("an empty body → 400", async () => {
        const r = await rawRequest(server.url, {
          method: "POST",
          path: "/v1/verify",
          headers: { "content-type": "application/json", "content-length": "0" }
        })
        expectEnvelope(r, 400, "VALIDATION_ERROR")
      })

      it("a body over 1 MiB → 413 VALIDATION_ERROR (declared length)", async () => {
        const big = JSON.stringify({ hash_hex: randomHash(), source: "x", extra_data: { pad: "a".repeat(1024 * 1024) } })
        const r = await client(server.url, key).post("/v1/attest", big)
        expectEnvelope(r, 413, "VALIDATION_ERROR")
        const v = await client(server.url).post("/verify", big)
        expectEnvelope(v, 413, "VALIDATION_ERROR")
      })

      it("a body over 1 MiB → 413 VALIDATION_ERROR (chunked, no length)", async () => {
        // Raw socket: the body is streamed slowly and writing stops as soon as the server answers,
        // so a server that answers 413 and then closes is seen answering.
        const reply = await chunkedUpload(server.url, "/v1/verify", 1100 * 1024)
        expect(reply.slice(0, 12), `raw reply: ${JSON.stringify(reply.slice(0, 200))}`).toBe("HTTP/1.1 413")
        expect(reply).toContain("VALIDATION_ERROR")
        expect(reply.toLowerCase()).toContain("x-request-id")
      })

      it("a body over 1 MiB → 413 (chunked), also to a client that sends all of it before reading the answer", async () => {
        // The server answers once it has read 1 MiB; if it then closed the socket while the rest of the
        // body was still arriving, the client's next write would meet a reset and the unread answer be lost.
        for (let i = 0; i < 2; i++) {
          const reply = await chunkedUpload(server.url, "/v1/verify", 1400 * 1024, { heedless: true })
          expect(reply.slice(0, 12), `raw reply: ${JSON.stringify(reply.slice(0, 200))}`).toBe("HTTP/1.1 413")
          expect(reply).toContain("VALIDATION_ERROR")
        }
      })

      it("a body over the limit (chunked) from a keep-alive client: 413 with Connection: close", async () => {
        const reply = await chunkedUpload(server.url, "/v1/verify", 64 * 1024, { keepAlive: true })
        expect(reply.slice(0, 12), `raw reply: ${JSON.stringify(reply.slice(0, 200))}`).toBe("HTTP/1.1 413")
        expect(reply.toLowerCase()).toContain("connection: close")
      })

      it("a chunked body just under 1 MiB, streamed in pieces, is read whole (attest)", async () => {
        const reply = await chunkedUpload(server.url, "/v1/attest", 1024 * 1024 - 200, { headers: { authorization: `Bearer ${key}` } })
        expect(reply.slice(0, 12), `raw reply: ${JSON.stringify(reply.slice(0, 200))}`).toBe("HTTP/1.1 201")
      })

      it("a small chunked body is read", async () => {
        const reply = await chunkedUpload(server.url, "/v1/verify", 100)
        expect(reply.slice(0, 12)).toBe("HTTP/1.1 200")
        expect(reply).toContain("\"exists\":false")
      })

      it("a body just under 1 MiB is read (attest; public verify has its own small limit)", async () => {
        const hash = randomHash()
        const body = JSON.stringify({ hash_hex: hash, pad: "a".repeat(1024 * 1024 - 200) })
        const r = await client(server.url, key).post("/v1/attest", body)
        expect(r.status).toBe(201)
        expect(r.body.hash_hex).toBe(hash)
      })

      it("a form-encoded content type is still read as JSON", async () => {
        const hash = randomHash()
        const r = await client(server.url).post("/v1/verify", JSON.stringify({ hash_hex: hash }), {
          "content-type": "application/x-www-form-urlencoded"
        })
        expect(r.status).toBe(200)
        expect(r.body).toEqual({ exists: false, hash_hex: hash })
      })
    })

    describe("routes", () => {
      it("unknown route → 404 NOT_FOUND", async () => {
        for (const path of ["/v1/nope", "/nope", "/v1/attestation", "/v1/attest/batch/x", "/v2/attest", "/v1/keys/a/b"]) {
          expectEnvelope(await client(server.url).get(path), 404, "NOT_FOUND")
        }
        expectEnvelope(await client(server.url).post("/v1/nope", {}), 404, "NOT_FOUND")
      })

      it("wrong method on a known route → 405 METHOD_NOT_ALLOWED", async () => {
        const api = client(server.url, key)
        for (const prefix of ["/v1", ""]) {
          expectEnvelope(await api.delete(`${prefix}/attest`), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.get(`${prefix}/attest`), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.get(`${prefix}/attest/batch`), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.get(`${prefix}/verify`), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.put(`${prefix}/verify/batch`, {}), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.post(`${prefix}/info`, {}), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.delete(`${prefix}/keys`), 405, "METHOD_NOT_ALLOWED")
          expectEnvelope(await api.post(`${prefix}/attestation/1`, {}), 405, "METHOD_NOT_ALLOWED")
        }
      })

      it("a 405 names the allowed methods in an Allow header (RFC 9110 §15.5.6)", async () => {
        const r = await client(server.url).get("/v1/attest")
        expectEnvelope(r, 405, "METHOD_NOT_ALLOWED")
        expect(r.headers.get("allow") ?? "").toMatch(/\bPOST\b/)
      })

      it("unknown or malformed attestation id → 404 NOT_FOUND on every lookup", async () => {
        const pub = client(server.url)
        for (
          const id of [
            "att_AAAAAAAAAAAAAAAAAAAAAAAA",
            "att_short",
            "zzz",
            "0",
            "-1",
            "99999999",
            "1.5",
            "%20",
            "99999999999999999999"
          ]
        ) {
          for (const sub of ["", "/status", "/signature", "/evidence"]) {
            expectEnvelope(await pub.get(`/v1/attestation/${id}${sub}`), 404, "NOT_FOUND")
          }
        }
      })
    })

    describe("authentication", () => {
      it("missing key → 401 AUTH_ERROR", async () => {
        const body = { hash_hex: randomHash() }
        expectEnvelope(await client(server.url).post("/v1/attest", body), 401, "AUTH_ERROR")
        expectEnvelope(await client(server.url).post("/attest/batch", { hashes: [body.hash_hex] }), 401, "AUTH_ERROR")
        expect((await client(server.url).post("/v1/verify", body)).body.exists).toBe(false)
      })

      it("malformed, unknown and revoked keys → 401 AUTH_ERROR", async () => {
        const body = { hash_hex: randomHash() }
        for (
          const authorization of [
            "Bearer",
            "Bearer ",
            "Bearer nope",
            `Basic ${Buffer.from("a:b").toString("base64")}`,
            `Bearer atk_test_${"A".repeat(31)}`,
            `Bearer atk_test_${"A".repeat(33)}`,
            `Bearer atk_prod_${"A".repeat(32)}`,
            `Bearer atk_test_${"A".repeat(32)}`,
            `Bearer atk_live_${"A".repeat(32)}`,
            `Bearer ${key}x`,
            `Bearer ${key.slice(0, -1)}`
          ]
        ) {
          const r = await client(server.url).post("/v1/attest", body, { authorization })
          expectEnvelope(r, 401, "AUTH_ERROR")
        }
        const victim = await server.createKey({ label: "to revoke" })
        expect((await client(server.url, victim.key).post("/v1/attest", { hash_hex: randomHash() })).status).toBe(201)
        await server.revokeKey(victim.id)
        expectEnvelope(await client(server.url, victim.key).post("/v1/attest", body), 401, "AUTH_ERROR")
        expectEnvelope(
          await client(server.url, victim.key).post("/v1/verify/batch", { hashes: [body.hash_hex], detailed: true }),
          401,
          "AUTH_ERROR"
        )
        // the revoked key wrote nothing
        expect((await client(server.url).post("/v1/verify", body)).body.exists).toBe(false)
        expect(keyId).toBeTruthy()
      })
    })

    describe("X-Request-Id", () => {
      it("every response carries one; distinct when generated", async () => {
        const pub = client(server.url)
        const replies = [
          await pub.get("/v1/info"),
          await pub.get("/healthz"),
          await pub.post("/v1/verify", { hash_hex: randomHash() }),
          await pub.get("/v1/nope"),
          await pub.get("/v1/attest"),
          await pub.post("/v1/attest", { hash_hex: randomHash() }),
          await pub.post("/v1/verify", "{"),
          await pub.get("/v1/attestation/zzz"),
          await client(server.url, key).post("/v1/attest", { hash_hex: randomHash() }),
          await pub.get("/v1/openapi.json"),
          await pub.get("/docs"),
          await pub.get("/test-vectors.json")
        ]
        const ids = replies.map((r) => r.headers.get("x-request-id"))
        for (const [i, id] of ids.entries()) expect(id, `reply ${i}`).toBeTruthy()
        expect(new Set(ids).size).toBe(ids.length)
      })

      it("a caller-supplied X-Request-Id is echoed on success and on error", async () => {
        const rid = "req-" + randomHash().slice(0, 16)
        const cases = [
          await client(server.url).get("/v1/info", { "x-request-id": rid }),
          await client(server.url).post("/v1/attest", { hash_hex: randomHash() }, { "x-request-id": rid }),
          await client(server.url, key).post("/v1/attest", { hash_hex: randomHash() }, { "x-request-id": rid }),
          await client(server.url).get("/v1/nope", { "x-request-id": rid }),
          await client(server.url).get("/v1/attest", { "x-request-id": rid }),
          await client(server.url).post("/v1/verify", "{", { "x-request-id": rid })
        ]
        for (const r of cases) expect(r.headers.get("x-request-id")).toBe(rid)
      })

      it("the 413 reply carries X-Request-Id", async () => {
        const rid = "big-" + randomHash().slice(0, 8)
        const r = await client(server.url).post("/v1/verify", "x".repeat(1024 * 1024 + 10), { "x-request-id": rid })
        expectEnvelope(r, 413, "VALIDATION_ERROR")
        expect(r.headers.get("x-request-id")).toBe(rid)
      })
    })
  })
}
