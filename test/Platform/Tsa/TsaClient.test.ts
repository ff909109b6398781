import { randomBytes } from "node:crypto"
import { it } from "@effect/vitest"
import { Effect, Either, Layer, Logger } from "effect"
import { afterAll, beforeAll, describe, expect } from "vitest"
import { parseTimeStampToken, toHex, validateTimeStampToken } from "../../../src/Platform/Tsa/Rfc3161.js"
import { layerHttp, parseTsaUrls, TsaClient, TsaError } from "../../../src/Platform/Tsa/TsaClient.js"
import { type OpensslTsa, opensslVerify, startOpensslTsa } from "../../helpers/opensslTsa.js"

const digest32 = () => new Uint8Array(randomBytes(32))

/** Collects log lines (level + message) instead of printing them. */
const captureLogs = () => {
  const lines: Array<{ level: string; message: string }> = []
  const logger = Logger.make(({ logLevel, message }) => {
    lines.push({ level: logLevel.label, message: Array.isArray(message) ? message.map(String).join(" ") : String(message) })
  })
  return { lines, layer: Logger.replace(Logger.defaultLogger, logger) }
}

const stampWith = (layer: Layer.Layer<TsaClient>, digest: Uint8Array) =>
  Effect.gen(function* () {
    const tsa = yield* TsaClient
    return yield* tsa.timestamp(digest)
  }).pipe(Effect.provide(layer))

describe("TsaClient (HTTP)", () => {
  let good: OpensslTsa
  let bad: OpensslTsa
  let bad2: OpensslTsa

  beforeAll(async () => {
    ;[good, bad, bad2] = await Promise.all([startOpensslTsa(), startOpensslTsa({ commonName: "bad" }), startOpensslTsa({ commonName: "bad2" })])
  })
  afterAll(async () => {
    await Promise.all([good?.close(), bad?.close(), bad2?.close()])
  })

  it.effect("stamps via an OpenSSL TSA, validated against its CA", () =>
    Effect.gen(function* () {
      const digest = digest32()
      const stamp = yield* stampWith(layerHttp({ urls: [good.url], trustAnchorsPem: good.caPem }), digest)
      expect(stamp.provider).toBe(good.url)
      expect(Math.abs(stamp.genTime.getTime() - Date.now())).toBeLessThan(60_000)
      expect(parseTimeStampToken(stamp.token).hashed_message).toBe(toHex(digest))
      const ossl = yield* Effect.promise(() => opensslVerify(stamp.token, toHex(digest), good.caFile, good.tsaCertFile))
      expect(ossl.ok, ossl.output).toBe(true)
      const v = yield* Effect.promise(() =>
        validateTimeStampToken(stamp.token, { digest, trustAnchorsPem: good.caPem, requireChain: true })
      )
      expect(v.genTime.getTime()).toBe(stamp.genTime.getTime())
    })
  )

  it.effect("exposes the URL list as provider", () =>
    Effect.gen(function* () {
      const tsa = yield* TsaClient
      expect(tsa.provider).toBe(`${bad.url}, ${good.url}`)
    }).pipe(Effect.provide(layerHttp({ urls: [bad.url, good.url], trustAnchorsPem: undefined })))
  )

  it.effect("rejects a token not chaining to the configured CA", () =>
    Effect.gen(function* () {
      bad.setMode("ok")
      const r = yield* Effect.either(stampWith(layerHttp({ urls: [bad.url], trustAnchorsPem: good.caPem }), digest32()))
      expect(Either.isLeft(r)).toBe(true)
      if (Either.isLeft(r)) {
        expect(r.left).toBeInstanceOf(TsaError)
        expect(r.left.attempts).toHaveLength(1)
        expect(r.left.attempts[0]!.url).toBe(bad.url)
      }
    })
  )

  for (const mode of ["http500", "garbage", "hang", "wrongDigest"] as const) {
    it.effect(`fails over when the first TSA answers '${mode}'`, () =>
      Effect.gen(function* () {
        bad.setMode(mode)
        const logs = captureLogs()
        const before = bad.requests
        const digest = digest32()
        // The timeout bounds every attempt, the good TSA's too (an `openssl ts -reply` process
        // per request: over a second with the whole suite beside it on a 2-core machine), so
        // the hang's is shorter only as far as that allows.
        const timeoutMs = mode === "hang" ? 4_000 : 10_000
        const stamp = yield* stampWith(
          layerHttp({ urls: [bad.url, good.url], trustAnchorsPem: bad.caPem + good.caPem, timeoutMs }),
          digest
        ).pipe(Effect.provide(logs.layer))
        expect(stamp.provider).toBe(good.url)
        expect(bad.requests).toBe(before + 1)
        expect(parseTimeStampToken(stamp.token).hashed_message).toBe(toHex(digest))
        const warnings = logs.lines.filter((l) => l.level === "WARN")
        expect(warnings).toHaveLength(1)
        expect(warnings[0]!.message).toContain(bad.url)
        if (mode === "hang") {
          expect(warnings[0]!.message).toMatch(/timed out after 4000 ms/)
        }
        if (mode === "http500") expect(warnings[0]!.message).toMatch(/HTTP 500/)
        if (mode === "wrongDigest") expect(warnings[0]!.message).toMatch(/imprint/)
      }).pipe(Effect.ensuring(Effect.sync(() => bad.setMode("ok"))))
    )
  }

  it.effect("fails with a TsaError listing every attempt when all TSAs are bad", () =>
    Effect.gen(function* () {
      bad.setMode("http500")
      bad2.setMode("hang")
      const logs = captureLogs()
      const closedPort = "http://127.0.0.1:9/tsa"
      const r = yield* Effect.either(
        stampWith(
          // long enough that a starved worker still reads the 500 before the timer fires
          layerHttp({ urls: [bad.url, bad2.url, closedPort], trustAnchorsPem: bad.caPem, timeoutMs: 1_000 }),
          digest32()
        ).pipe(Effect.provide(logs.layer))
      )
      expect(Either.isLeft(r)).toBe(true)
      if (Either.isLeft(r)) {
        expect(r.left._tag).toBe("TsaError")
        expect(r.left.attempts.map((a) => a.url)).toEqual([bad.url, bad2.url, closedPort])
        expect(r.left.attempts[0]!.reason).toMatch(/HTTP 500/)
        expect(r.left.attempts[1]!.reason).toMatch(/timed out/)
        expect(r.left.attempts[2]!.reason.length).toBeGreaterThan(0)
        expect(r.left.message).toContain(bad2.url)
      }
      expect(logs.lines.filter((l) => l.level === "WARN")).toHaveLength(3)
    }).pipe(Effect.ensuring(Effect.sync(() => (bad.setMode("ok"), bad2.setMode("ok")))))
  )

  it.effect("fails cleanly on bad configuration", () =>
    Effect.gen(function* () {
      const none = yield* Effect.either(stampWith(layerHttp({ urls: [], trustAnchorsPem: undefined }), digest32()))
      expect(Either.isLeft(none) && none.left.message).toMatch(/no TSA URL/)
      const anchors = yield* Effect.either(stampWith(layerHttp({ urls: [good.url], trustAnchorsPem: "not a pem" }), digest32()))
      expect(Either.isLeft(anchors) && anchors.left.message).toMatch(/trust anchors/)
      const short = yield* Effect.either(stampWith(layerHttp({ urls: [good.url], trustAnchorsPem: good.caPem }), new Uint8Array(5)))
      expect(Either.isLeft(short) && short.left.message).toMatch(/32 bytes/)
    })
  )

  it("parseTsaUrls splits and checks ATTESTD_TSA_URL", () => {
    expect(parseTsaUrls(" https://a.example/tsa , http://b.example ,")).toEqual(["https://a.example/tsa", "http://b.example"])
    expect(() => parseTsaUrls("ftp://x")).toThrow()
    expect(() => parseTsaUrls("not a url")).toThrow()
  })
})
