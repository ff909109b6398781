/**
 * Hostile traffic on public routes (issue 11 §2–3): the public limit per client
 * address (no bypass by an Authorization header, batch verify counted by
 * hashes, a default), X-Forwarded-For counted from the right, the bounded
 * in-memory limiter, and request timeouts / connection caps against slowloris.
 */
import { ConfigProvider, Effect, Either, Option, TestClock, Duration } from "effect"
import { it as effectIt } from "@effect/vitest"
import * as http from "node:http"
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { clientAddressOf, parseTrustProxy } from "../../src/Platform/ClientAddress.js"
import { makePublicLimit, publicBucketOf } from "../../src/Auth/PublicLimit.js"
import { makeMemoryLimiter, MEMORY_LIMITER_MAX_KEYS } from "../../src/Auth/RateLimiter.js"
import { AppConfig, appConfig, DEFAULT_PUBLIC_RATE_LIMIT, DEFAULT_SERVER_LIMITS } from "../../src/Platform/Config.js"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

/** A raw HTTP/1.1 answer: status, lower-cased headers, and the body as JSON. */
const parseRaw = (text: string): { status: number; headers: Record<string, string>; body: unknown } => {
  const end = text.indexOf("\r\n\r\n")
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n")
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(":")
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { status: Number(statusLine!.split(" ")[1]), headers, body: JSON.parse(text.slice(end + 4)) }
}

const configFrom = (env: Record<string, string>) =>
  Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))

describe("configuration", () => {
  it("the public limit is on by default (documented value); 0 turns it off", () => {
    const byDefault = configFrom({})
    expect(Either.isRight(byDefault) && byDefault.right.publicRateLimit).toEqual(Option.some(DEFAULT_PUBLIC_RATE_LIMIT))
    const off = configFrom({ ATTESTD_PUBLIC_RATE_LIMIT: "0" })
    expect(Either.isRight(off) && off.right.publicRateLimit).toEqual(Option.none())
    const set = configFrom({ ATTESTD_PUBLIC_RATE_LIMIT: "30" })
    expect(Either.isRight(set) && set.right.publicRateLimit).toEqual(Option.some(30))
    expect(Either.isLeft(configFrom({ ATTESTD_PUBLIC_RATE_LIMIT: "-1" }))).toBe(true)
  })

  it("timeouts and connection caps have defaults and read durations and counts", () => {
    const byDefault = configFrom({})
    expect(Either.isRight(byDefault) && byDefault.right.server).toEqual(DEFAULT_SERVER_LIMITS)
    const set = configFrom({
      ATTESTD_REQUEST_TIMEOUT: "2s",
      ATTESTD_HEADERS_TIMEOUT: "500ms",
      ATTESTD_KEEP_ALIVE_TIMEOUT: "1s",
      ATTESTD_MAX_CONNECTIONS: "100",
      ATTESTD_MAX_CONNECTIONS_PER_ADDRESS: "0"
    })
    expect(Either.isRight(set) && set.right.server).toEqual({
      requestTimeoutMs: 2000,
      headersTimeoutMs: 500,
      keepAliveTimeoutMs: 1000,
      maxConnections: 100,
      maxConnectionsPerAddress: 0
    })
    expect(Either.isLeft(configFrom({ ATTESTD_REQUEST_TIMEOUT: "soon" }))).toBe(true)
  })

  it("ATTESTD_TRUST_PROXY: a hop count, true (= 1 hop), false, or proxy CIDRs; anything else refuses to start", () => {
    expect(parseTrustProxy("")).toBe(0)
    expect(parseTrustProxy("false")).toBe(0)
    expect(parseTrustProxy("0")).toBe(0)
    expect(parseTrustProxy("true")).toBe(1)
    expect(parseTrustProxy("1")).toBe(1)
    expect(parseTrustProxy("2")).toBe(2)
    expect(parseTrustProxy("10.0.0.0/8, 192.168.1.1, fd00::/8")).toEqual(["10.0.0.0/8", "192.168.1.1", "fd00::/8"])
    expect(typeof parseTrustProxy("10.0.0.0/33")).toBe("string")
    expect(typeof parseTrustProxy("proxy.internal")).toBe("string")
    const bad = configFrom({ ATTESTD_TRUST_PROXY: "yes please" })
    expect(Either.isLeft(bad)).toBe(true)
    const cidrs = configFrom({ ATTESTD_TRUST_PROXY: "10.0.0.0/8" })
    expect(Either.isRight(cidrs) && cidrs.right.trustProxy).toEqual(["10.0.0.0/8"])
  })
})

describe("clientAddressOf: X-Forwarded-For counted from the right", () => {
  const peer = "127.0.0.1"
  it("without trust, the socket peer", () => {
    expect(clientAddressOf(peer, "10.1.2.3", 0)).toBe("127.0.0.1")
    expect(clientAddressOf(peer, "10.1.2.3", false)).toBe("127.0.0.1")
    expect(clientAddressOf("::ffff:127.0.0.1", undefined, 1)).toBe("127.0.0.1")
  })
  it("n hops: the n-th entry from the right; the client's own entries never count", () => {
    expect(clientAddressOf(peer, "10.1.2.3, 198.51.100.7", 1)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, "10.1.2.3, 198.51.100.7", true)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, "10.1.2.3, 198.51.100.7", 2)).toBe("10.1.2.3")
    expect(clientAddressOf(peer, "6.6.6.6, 10.1.2.3, 198.51.100.7", 2)).toBe("10.1.2.3")
    // fewer entries than hops: the leftmost there is
    expect(clientAddressOf(peer, "198.51.100.7", 3)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, undefined, 1)).toBe("127.0.0.1")
    // garbage where a trusted proxy wrote: the nearest hop we know
    expect(clientAddressOf(peer, "10.1.2.3, not-an-ip", 1)).toBe("127.0.0.1")
    expect(clientAddressOf(peer, "not-an-ip, 198.51.100.7", 2)).toBe("198.51.100.7")
    // ports and brackets a proxy may add
    expect(clientAddressOf(peer, "198.51.100.7:4711", 1)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, "[2001:db8::1]:4711", 1)).toBe("2001:db8::1")
  })
  it("CIDRs: the first address from the right outside them; an untrusted peer is the client", () => {
    const trust = ["127.0.0.0/8", "10.0.0.0/8"]
    expect(clientAddressOf(peer, "198.51.100.7", trust)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, "1.1.1.1, 198.51.100.7, 10.0.0.5", trust)).toBe("198.51.100.7")
    expect(clientAddressOf(peer, "10.0.0.9, 10.0.0.5", trust)).toBe("10.0.0.9")
    expect(clientAddressOf("203.0.113.4", "10.1.2.3", trust)).toBe("203.0.113.4")
  })
  it("IPv6 clients share a bucket per /64", () => {
    expect(publicBucketOf("2001:db8:1:2:aaaa::1")).toBe(publicBucketOf("2001:db8:1:2:bbbb:cccc:dddd:eeee"))
    expect(publicBucketOf("2001:db8:1:2::1")).not.toBe(publicBucketOf("2001:db8:1:3::1"))
    expect(publicBucketOf("::1")).toBe(publicBucketOf("0:0:0:0:0:0:0:1"))
    expect(publicBucketOf("198.51.100.7")).toBe("ip:198.51.100.7")
  })
})

describe("the in-memory limiter is bounded", () => {
  it(`holds at most MEMORY_LIMITER_MAX_KEYS (${MEMORY_LIMITER_MAX_KEYS}) keys however many addresses call`, async () => {
    const limiter = makeMemoryLimiter()
    const n = MEMORY_LIMITER_MAX_KEYS + 20_000
    for (let i = 0; i < n; i++) Effect.runSync(limiter.hit(`ip:${i}`, 5))
    expect(limiter.size()).toBe(MEMORY_LIMITER_MAX_KEYS)
  })

  it("34,000 spoofed addresses against a small cap: the cap holds, an active flooder stays limited", async () => {
    const limiter = makeMemoryLimiter({ maxKeys: 1_000 })
    const hit = async (k: string, limit: number) => Effect.runSync(limiter.hit(k, limit))
    for (let i = 0; i < 5; i++) expect((await hit("ip:flooder", 5)).allowed).toBe(true)
    for (let i = 0; i < 34_000; i++) {
      await hit(`ip:spoof-${i}`, 5)
      // the flooder keeps calling: it stays recently used, so its window is never evicted
      if (i % 500 === 0) expect((await hit("ip:flooder", 5)).allowed).toBe(false)
      expect(limiter.size()).toBeLessThanOrEqual(1_000)
    }
    expect(limiter.size()).toBe(1_000)
  })

  effectIt.effect("expired windows are swept", () =>
    Effect.gen(function*() {
      const limiter = makeMemoryLimiter({ maxKeys: 10_000 })
      for (let i = 0; i < 2_000; i++) yield* limiter.hit(`ip:${i}`, 5)
      expect(limiter.size()).toBe(2_000)
      yield* TestClock.adjust(Duration.seconds(61))
      // sweeps run every 1,000 hits
      for (let i = 0; i < 1_000; i++) yield* limiter.hit("ip:one", 10_000)
      expect(limiter.size()).toBe(1)
      // a longer window (the hourly limits) is kept for its length
      yield* limiter.hit("hourly", 5, 3600)
      yield* TestClock.adjust(Duration.seconds(120))
      for (let i = 0; i < 1_000; i++) yield* limiter.hit("ip:two", 10_000)
      expect(limiter.size()).toBe(2)
    }))

  effectIt.effect("a weighted hit counts its cost, and is refused whole when it does not fit", () =>
    Effect.gen(function*() {
      const limiter = makeMemoryLimiter()
      expect((yield* limiter.hit("w", 30, 60, 20)).remaining).toBe(10)
      const refused = yield* limiter.hit("w", 30, 60, 11)
      expect(refused.allowed).toBe(false)
      expect(refused.remaining).toBe(10)
      expect((yield* limiter.hit("w", 30, 60, 10)).remaining).toBe(0)
    }))
})

describe("a full address is refused without asking the store", () => {
  effectIt.effect("until its window frees a request; then the store decides again", () =>
    Effect.gen(function*() {
      const memory = makeMemoryLimiter()
      let storeHits = 0
      const limiter = { hit: (...a: Parameters<typeof memory.hit>) => (storeHits++, memory.hit(...a)) }
      const config = AppConfig.make({ publicRateLimit: Option.some(3) })
      const meta = { requestId: "r", clientIp: "192.0.2.1", path: "/verify", target: "/verify", rateLimit: undefined }
      const publicLimit = makePublicLimit(config, limiter)
      const charge = (cost = 1) => Effect.either(publicLimit.charge({ ...meta }, cost))
      for (let i = 0; i < 3; i++) expect(Either.isRight(yield* charge())).toBe(true)
      const refused = yield* charge()
      expect(Either.isLeft(refused) && refused.left.rateLimit.retryAfter).toBe(60)
      expect(storeHits).toBe(4)
      yield* TestClock.adjust(Duration.seconds(30))
      for (let i = 0; i < 10; i++) {
        const r = yield* charge(i % 2 ? 1 : 50)
        expect(Either.isLeft(r) && r.left.rateLimit).toEqual({ limit: 3, remaining: 0, reset: 60, retryAfter: 30 })
      }
      expect(storeHits).toBe(4)
      // another address is asked about as usual
      expect(Either.isRight(yield* Effect.either(publicLimit.charge({ ...meta, clientIp: "192.0.2.2" })))).toBe(true)
      expect(storeHits).toBe(5)
      yield* TestClock.adjust(Duration.seconds(30))
      expect(Either.isRight(yield* charge())).toBe(true)
      expect(storeHits).toBe(6)
    }))

  effectIt.effect("each public limit remembers its own full addresses", () =>
    Effect.gen(function*() {
      const limiter = makeMemoryLimiter()
      const config = AppConfig.make({ publicRateLimit: Option.some(1) })
      const meta = { requestId: "r", clientIp: "192.0.2.9", path: "/verify", target: "/verify", rateLimit: undefined }
      const first = makePublicLimit(config, limiter)
      expect(Either.isRight(yield* Effect.either(first.charge({ ...meta })))).toBe(true)
      expect(Either.isLeft(yield* Effect.either(first.charge({ ...meta })))).toBe(true)
      // another server's limit over another store knows nothing of it
      const second = makePublicLimit(config, makeMemoryLimiter())
      expect(Either.isRight(yield* Effect.either(second.charge({ ...meta })))).toBe(true)
    }))
})

const LIMIT = 30

for (const dialect of await dialects()) {
  describe(`public limit per client address (${dialect})`, () => {
    /** Behind one proxy hop: each test speaks from its own address through X-Forwarded-For. */
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect, { trustProxy: 1, publicRateLimit: Option.some(LIMIT) })
    })
    afterAll(async () => {
      await server?.close()
    })

    let n = 0
    /** A fresh documentation address per test. */
    const address = () => `192.0.2.${++n}`
    const from = (ip: string, extra: Record<string, string> = {}) => ({ "x-forwarded-for": ip, ...extra })

    const statuses = async (count: number, send: (i: number) => Promise<{ status: number }>) => {
      const out: Array<number> = []
      for (let i = 0; i < count; i++) out.push((await send(i)).status)
      return out
    }
    const tally = (s: Array<number>) => s.reduce<Record<number, number>>((acc, x) => ({ ...acc, [x]: (acc[x] ?? 0) + 1 }), {})

    it("60 public verifies with `Bearer atk_x` under a 30/min limit: 30 pass, 30 are 429", async () => {
      const ip = address()
      const api = client(server.url, "atk_x")
      const got = await statuses(60, () => api.post("/v1/verify", { hash_hex: randomHash() }, from(ip)))
      expect(tally(got)).toEqual({ 200: 30, 429: 30 })
      const last = await api.post("/v1/verify", { hash_hex: randomHash() }, from(ip))
      expectEnvelope(last, 429, "RATE_LIMIT")
      expect(last.headers.get("x-ratelimit-limit")).toBe(String(LIMIT))
      expect(last.headers.get("x-ratelimit-remaining")).toBe("0")
      expect(Number(last.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    })

    it("a well-formed but unknown key on a public route counts the same", async () => {
      const ip = address()
      const api = client(server.url, "atk_live_" + "A".repeat(32))
      const got = await statuses(40, (i) => i % 2 ? api.get(`/v1/attestation/att_${"A".repeat(24)}`, from(ip)) : api.post("/v1/verify/batch", { hashes: [randomHash()] }, from(ip)))
      expect(tally(got)).toEqual({ 404: 15, 200: 15, 429: 10 })
    })

    it("attest with an invalid key is 401 until the address is over its limit, then 429", async () => {
      const ip = address()
      for (const key of ["atk_x", "atk_test_" + "B".repeat(32)]) {
        const got = await statuses(20, () => client(server.url, key).post("/v1/attest", { hash_hex: randomHash() }, from(ip)))
        expect(got.every((s) => s === 401 || s === 429)).toBe(true)
        if (key === "atk_x") expect(tally(got)).toEqual({ 401: 20 })
        else expect(tally(got)).toEqual({ 401: 10, 429: 10 })
      }
      // other keyed routes too, and a request without credentials
      expectEnvelope(await client(server.url, "atk_x").get("/v1/webhooks", from(ip)), 429, "RATE_LIMIT")
      expectEnvelope(await client(server.url).post("/v1/attest", { hash_hex: randomHash() }, from(ip)), 429, "RATE_LIMIT")
      expectEnvelope(await client(server.url, "shr_" + "C".repeat(32)).get("/v1/attestation/att_x/metadata", from(ip)), 429, "RATE_LIMIT")
    })

    it("a valid key on keyed routes is counted against its key, not the address; on public routes against the address", async () => {
      const ip = address()
      const { key } = await server.createKey()
      const api = client(server.url, key)
      const attests = await statuses(LIMIT + 10, () => api.post("/v1/attest", { hash_hex: randomHash() }, from(ip)))
      expect(tally(attests)).toEqual({ 201: LIMIT + 10 })
      const verifies = await statuses(LIMIT + 5, () => api.post("/v1/verify", { hash_hex: randomHash() }, from(ip)))
      expect(tally(verifies)).toEqual({ 200: LIMIT, 429: 5 })
      // the key still attests from that address
      expect((await api.post("/v1/attest", { hash_hex: randomHash() }, from(ip))).status).toBe(201)
    })

    it("anonymous verify and lookups are limited, with X-RateLimit-* on every reply", async () => {
      const ip = address()
      const anon = client(server.url)
      const first = await anon.post("/v1/verify", { hash_hex: randomHash() }, from(ip))
      expect(first.status).toBe(200)
      expect(first.headers.get("x-ratelimit-limit")).toBe(String(LIMIT))
      expect(first.headers.get("x-ratelimit-remaining")).toBe(String(LIMIT - 1))
      const got = await statuses(LIMIT, (i) => i % 3 ? anon.post("/verify", { hash_hex: randomHash() }, from(ip)) : anon.get("/v1/stats", from(ip)))
      expect(tally(got)).toEqual({ 200: LIMIT - 1, 429: 1 })
    })

    it("batch verify counts its hashes; a batch that does not fit is refused whole", async () => {
      const ip = address()
      const anon = client(server.url)
      const twenty = await anon.post("/v1/verify/batch", { hashes: Array.from({ length: 20 }, randomHash) }, from(ip))
      expect(twenty.status).toBe(200)
      expect(twenty.headers.get("x-ratelimit-remaining")).toBe("10")
      const eleven = await anon.post("/v1/verify/batch", { hashes: Array.from({ length: 11 }, randomHash) }, from(ip))
      expectEnvelope(eleven, 429, "RATE_LIMIT")
      // the refused batch's request itself was counted (one), its hashes were not
      const nine = await anon.post("/v1/verify/batch", { hashes: Array.from({ length: 9 }, randomHash) }, from(ip))
      expect(nine.status).toBe(200)
      expect(nine.headers.get("x-ratelimit-remaining")).toBe("0")
      expectEnvelope(await anon.post("/v1/verify", { hash_hex: randomHash() }, from(ip)), 429, "RATE_LIMIT")
    })

    it("rotating the first X-Forwarded-For entry does not defeat the limit; another address is unaffected", async () => {
      const ip = address()
      const anon = client(server.url)
      const got = await statuses(LIMIT + 10, (i) => anon.post("/v1/verify", { hash_hex: randomHash() }, from(`203.0.113.${i}, ${ip}`)))
      expect(tally(got)).toEqual({ 200: LIMIT, 429: 10 })
      expect((await anon.post("/v1/verify", { hash_hex: randomHash() }, from(address()))).status).toBe(200)
    })

    it("a key allowlisted to 10.1.2.3/32 is refused with X-Forwarded-For: 10.1.2.3, 198.51.100.7 through one hop", async () => {
      const { key } = await server.createKey({ allowIps: ["10.1.2.3/32"] })
      const api = client(server.url, key)
      expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash() }, from("10.1.2.3, 198.51.100.7")), 403, "FORBIDDEN")
      expect((await api.post("/v1/attest", { hash_hex: randomHash() }, from("198.51.100.7, 10.1.2.3"))).status).toBe(201)
    })
  })

  describe(`trusted proxies by CIDR (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect, { trustProxy: ["127.0.0.0/8", "10.0.0.0/8"] })
    })
    afterAll(async () => {
      await server?.close()
    })

    it("entries inside the CIDRs are skipped; the first outside them from the right is the client", async () => {
      const { key } = await server.createKey({ allowIps: ["198.51.100.7/32"] })
      const api = client(server.url, key)
      expect((await api.post("/v1/attest", { hash_hex: randomHash() }, { "x-forwarded-for": "198.51.100.7, 10.0.0.5" })).status).toBe(201)
      expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash() }, { "x-forwarded-for": "198.51.100.7, 203.0.113.1" }), 403, "FORBIDDEN")
      expectEnvelope(await api.post("/v1/attest", { hash_hex: randomHash() }, { "x-forwarded-for": "198.51.100.7, 203.0.113.1, 10.0.0.5" }), 403, "FORBIDDEN")
    })
  })

  describe(`slow connections (slowloris) (${dialect})`, () => {
    const PER_ADDRESS = 10
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect, {
        server: { requestTimeoutMs: 3000, headersTimeoutMs: 2000, keepAliveTimeoutMs: 1000, maxConnections: 200, maxConnectionsPerAddress: PER_ADDRESS }
      })
    })
    afterAll(async () => {
      await server?.close()
    })

    interface Slow {
      readonly socket: net.Socket
      readonly received: Array<string>
      readonly closed: Promise<void>
      open: boolean
    }

    /** A connection from 127.0.0.1 that sends `head`, then one byte every 100 ms until closed. */
    const slow = (port: number, head: string): Promise<Slow> =>
      new Promise((resolve, reject) => {
        const socket = net.connect({ port, host: "127.0.0.1" })
        const received: Array<string> = []
        let timer: NodeJS.Timeout | undefined
        const s: Slow = {
          socket,
          received,
          open: true,
          closed: new Promise((r) =>
            socket.once("close", () => {
              s.open = false
              clearInterval(timer)
              r()
            })
          )
        }
        socket.on("data", (d) => received.push(d.toString("latin1")))
        socket.on("error", () => {})
        socket.once("connect", () => {
          socket.write(head)
          timer = setInterval(() => socket.writable && socket.write("a"), 100)
          resolve(s)
        })
        socket.once("error", reject)
      })

    /** Sends `text` on a fresh connection and collects everything until the server closes it. */
    const rawExchange = (port: number, text: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect({ port, host: "127.0.0.1" })
        const received: Array<Buffer> = []
        socket.on("data", (d) => received.push(d))
        socket.on("error", reject)
        socket.once("close", () => resolve(Buffer.concat(received).toString("utf8")))
        socket.once("connect", () => socket.write(text))
      })

    it("a request Node cannot read is answered with the envelope and an X-Request-Id, then closed; the server goes on", async () => {
      const port = Number(new URL(server.url).port)
      const malformed = parseRaw(await rawExchange(port, "POST /v1/verify HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n"))
      expect(malformed.status).toBe(400)
      expect(malformed.body).toEqual({ error: true, code: "VALIDATION_ERROR", message: "malformed HTTP request", details: null })
      const badLine = parseRaw(await rawExchange(port, "NOT HTTP AT ALL\r\n\r\n"))
      expect(badLine.status).toBe(400)
      const huge = parseRaw(await rawExchange(port, `GET /v1/info HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`))
      expect(huge.status).toBe(431)
      expect(huge.body).toEqual({ error: true, code: "VALIDATION_ERROR", message: "the request's headers are too large", details: null })
      for (const answer of [malformed, badLine, huge]) {
        expect(answer.headers["content-type"]).toBe("application/json")
        expect(answer.headers["connection"]).toBe("close")
        expect(answer.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
      }
      expect(new Set([malformed, badLine, huge].map((a) => a.headers["x-request-id"])).size).toBe(3)
      const after = await client(server.url).post("/v1/verify", { hash_hex: randomHash() })
      expect(after.status).toBe(200)
    })

    it("a request Node cannot read after an answered one on the same connection is answered too", async () => {
      const port = Number(new URL(server.url).port)
      const text = await new Promise<string>((resolve, reject) => {
        const socket = net.connect({ port, host: "127.0.0.1" })
        const received: Array<Buffer> = []
        let sentSecond = false
        socket.on("data", (d) => {
          received.push(d)
          if (sentSecond) return
          // once the first answer is whole (its headers and Content-Length bytes of body), the second request
          const sofar = Buffer.concat(received)
          const end = sofar.indexOf("\r\n\r\n")
          const length = /content-length: (\d+)/i.exec(sofar.toString("latin1"))
          if (end < 0 || length === null || sofar.length < end + 4 + Number(length[1])) return
          sentSecond = true
          socket.write("GET /v1/info HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        })
        socket.on("error", reject)
        socket.once("close", () => resolve(Buffer.concat(received).toString("utf8")))
        socket.once("connect", () => socket.write("GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n"))
      })
      const second = text.indexOf("HTTP/1.1 ", 1)
      expect(second).toBeGreaterThan(0)
      expect(text.startsWith("HTTP/1.1 200 ")).toBe(true)
      const answer = parseRaw(text.slice(second))
      expect(answer.status).toBe(400)
      expect(answer.body).toEqual({ error: true, code: "VALIDATION_ERROR", message: "malformed HTTP request", details: null })
      expect(answer.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
    })

    /** A request from another address (127.0.0.2), on a fresh connection. */
    const legit = (port: number, method: string, path: string, body: unknown, key?: string) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const text = JSON.stringify(body)
        const req = http.request({
          host: "127.0.0.1",
          port,
          localAddress: "127.0.0.2",
          method,
          path,
          agent: false,
          headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...(key ? { authorization: `Bearer ${key}` } : {}) }
        }, (res) => {
          const parts: Array<Buffer> = []
          res.on("data", (c) => parts.push(c))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(parts).toString("utf8")) }))
        })
        req.on("error", reject)
        req.end(text)
      })

    it("dribbling headers and bodies hold no more than their address's share, are closed after the timeout, and a legitimate client is served meanwhile", async () => {
      const port = Number(new URL(server.url).port)
      const { key } = await server.createKey()
      const attackers: Array<Slow> = []
      for (let i = 0; i < PER_ADDRESS + 6; i++) {
        attackers.push(await slow(
          port,
          i % 2
            ? "POST /v1/verify HTTP/1.1\r\nHost: x\r\nX-Slow: "
            : "POST /v1/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        ))
      }
      const hash = randomHash()
      const attested = await legit(port, "POST", "/v1/attest", { hash_hex: hash }, key)
      const verified = await legit(port, "POST", "/v1/verify", { hash_hex: hash })
      // the attack was still under way while the legitimate requests were served
      const stillOpen = attackers.filter((a) => a.open).length
      expect(attested.status).toBe(201)
      expect(verified.status).toBe(200)
      expect(verified.body.exists).toBe(true)
      expect(stillOpen).toBeGreaterThan(0)
      await Promise.all(attackers.map((a) => a.closed))
      // over the per-address cap: closed on accept without a byte; the others: 408 after the timeout
      const refused = attackers.filter((a) => a.received.length === 0).length
      const timedOut = attackers.filter((a) => a.received.join("").startsWith("HTTP/1.1 408"))
      expect(refused).toBe(6)
      expect(timedOut.length).toBe(PER_ADDRESS)
      // each 408 is an envelope with its own X-Request-Id
      for (const a of timedOut) {
        const answer = parseRaw(a.received.join(""))
        expect(answer.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
        expect(answer.headers["connection"]).toBe("close")
        expect(answer.body).toEqual({ error: true, code: "REQUEST_TIMEOUT", message: expect.any(String), details: null })
      }
      // and the address can connect again once its connections are gone
      const again = await client(server.url).post("/v1/verify", { hash_hex: hash })
      expect(again.body.exists).toBe(true)
    }, 30_000)
  })
}
