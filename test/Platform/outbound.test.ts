/**
 * The outbound HTTP layer (src/Platform/Outbound.ts): body cap (fail or
 * truncate; a body whose declared length is within the cap is read whole), the wall-clock timeout under a TestClock, and the webhook
 * client's public-only lookup, each with a positive control.
 */
import { HttpClientRequest } from "@effect/platform"
import { it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { lookup } from "node:dns"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect } from "vitest"
import * as Outbound from "../../src/Platform/Outbound.js"
import { publicOnlyLookup, webhookClientLayer } from "../../src/Webhooks/Dispatcher.js"

let server: Server
let port = 0
const seen: Array<string | undefined> = []
const headerNames: Array<ReadonlyArray<string>> = []

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push(req.headers["user-agent"])
    headerNames.push(Object.keys(req.headers))
    if (req.url === "/hang") return // never answers
    if (req.url === "/big") {
      res.writeHead(200) // chunked: no content-length to refuse early
      res.write("a".repeat(3000))
      res.end("b".repeat(3000))
      return
    }
    if (req.url === "/sized-big") {
      res.writeHead(200, { "content-length": "6000" })
      res.end("c".repeat(6000))
      return
    }
    if (req.url === "/sized") {
      res.writeHead(200, { "content-type": "text/plain", "content-length": "5" })
      res.end("sized")
      return
    }
    if (req.url === "/empty") {
      res.writeHead(204)
      res.end()
      return
    }
    res.writeHead(200, { "content-type": "text/plain" })
    res.end("hello")
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  port = (server.address() as AddressInfo).port
})
afterAll(() => new Promise<void>((r) => server.close(() => r())))

const get = (host: string, path: string, policy: Outbound.Policy) =>
  Outbound.exchange(HttpClientRequest.get(`http://${host}:${port}${path}`), policy)

describe("Outbound", () => {
  it.effect("reads the body with the attestd user agent; over the cap it fails, or truncates when asked", () =>
    Effect.gen(function*() {
      const ok = yield* get("127.0.0.1", "/", { timeout: "5 seconds", maxBytes: 100 })
      expect(ok.status).toBe(200)
      expect(new TextDecoder().decode(ok.body)).toBe("hello")
      expect(seen.at(-1)).toBe(Outbound.USER_AGENT)
      // no trace ids go to other parties
      expect(headerNames.at(-1)).not.toContain("traceparent")
      expect(headerNames.at(-1)).not.toContain("b3")
      expect(headerNames.at(-1)).toContain("user-agent")
      const big = yield* Effect.either(get("127.0.0.1", "/big", { timeout: "5 seconds", maxBytes: 1000 }))
      expect(Either.isLeft(big) && big.left.message).toMatch(/too large/)
      const cut = yield* get("127.0.0.1", "/big", { timeout: "5 seconds", maxBytes: 1000, overflow: "truncate" })
      expect(cut.body.byteLength).toBe(1000)
      const whole = yield* get("127.0.0.1", "/big", { timeout: "5 seconds", maxBytes: 6000 })
      expect(whole.body.byteLength).toBe(6000)
    }).pipe(Effect.provide(Outbound.layer)))

  it.effect("a declared length within the cap is read whole, one over it still fails or truncates, and a 204 has no body", () =>
    Effect.gen(function*() {
      const sized = yield* get("127.0.0.1", "/sized", { timeout: "5 seconds", maxBytes: 5 })
      expect(new TextDecoder().decode(sized.body)).toBe("sized")
      const over = yield* Effect.either(get("127.0.0.1", "/sized-big", { timeout: "5 seconds", maxBytes: 5999 }))
      expect(Either.isLeft(over) && over.left.message).toMatch(/too large \(6000 bytes > 5999\)/)
      const cut = yield* get("127.0.0.1", "/sized-big", { timeout: "5 seconds", maxBytes: 1000, overflow: "truncate" })
      expect(cut.body.byteLength).toBe(1000)
      const whole = yield* get("127.0.0.1", "/sized-big", { timeout: "5 seconds", maxBytes: 6000 })
      expect(new TextDecoder().decode(whole.body)).toBe("c".repeat(6000))
      const empty = yield* get("127.0.0.1", "/empty", { timeout: "5 seconds", maxBytes: 100 })
      expect(empty.status).toBe(204)
      expect(empty.body.byteLength).toBe(0)
    }).pipe(Effect.provide(Outbound.layer)))

  // it.effect runs under a TestClock that never moves: only the wall clock can end this call.
  it.effect("wallClock: the timeout fires under a TestClock", () =>
    Effect.gen(function*() {
      const r = yield* Effect.either(get("127.0.0.1", "/hang", { timeout: "300 millis", maxBytes: 100, wallClock: true }))
      expect(Either.isLeft(r) && r.left.message).toMatch(/timed out after 300 ms/)
    }).pipe(Effect.provide(Outbound.layer)))

  it.effect("the public-only lookup refuses a name resolving to loopback; the general client reaches it", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.either(
        get("localhost", "/", { timeout: "5 seconds", maxBytes: 100 }).pipe(Effect.provide(Outbound.layerWithLookup(publicOnlyLookup)))
      )
      expect(Either.isLeft(refused) && refused.left.message).toMatch(/refusing non-public address/)
      const production = yield* Effect.either(
        get("localhost", "/", { timeout: "5 seconds", maxBytes: 100 }).pipe(Effect.provide(webhookClientLayer(true)))
      )
      expect(Either.isLeft(production) && production.left.message).toMatch(/refusing non-public address/)
      const reached = yield* get("localhost", "/", { timeout: "5 seconds", maxBytes: 100 }).pipe(Effect.provide(webhookClientLayer(false)))
      expect(reached.status).toBe(200)
      // a client with its own lookup (the production webhook client's shape) sends no trace ids either
      const viaLookup = yield* get("localhost", "/", { timeout: "5 seconds", maxBytes: 100 }).pipe(Effect.provide(Outbound.layerWithLookup(lookup)))
      expect(viaLookup.status).toBe(200)
      expect(headerNames.at(-1)).not.toContain("traceparent")
      expect(headerNames.at(-1)).not.toContain("b3")
    }))
})
