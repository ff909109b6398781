import { randomBytes } from "node:crypto"
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { it as effectIt } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { DEMO_TSA_POLICY_OID, DEMO_TSA_PROVIDER, type DemoTsa, loadOrCreateDemoTsa } from "../../../src/Platform/Tsa/DemoTsa.js"
import {
  buildTimeStampRequest,
  parseTimeStampResponse,
  parseTimeStampToken,
  toHex,
  TsaValidationError,
  validateTimeStampToken
} from "../../../src/Platform/Tsa/Rfc3161.js"
import { layerDemo, TsaClient } from "../../../src/Platform/Tsa/TsaClient.js"
import { opensslVerify } from "../../helpers/opensslTsa.js"

const digest32 = () => new Uint8Array(randomBytes(32))

describe("demo TSA", () => {
  let dataDir: string
  let demo: DemoTsa

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "attestd-demo-tsa-"))
    demo = await loadOrCreateDemoTsa(dataDir)
  })
  afterAll(async () => {
    await rm(dataDir, { recursive: true, force: true })
  })

  it("creates root/tsa certificates and 0600 private keys", async () => {
    const dir = join(dataDir, "demo-tsa")
    for (const f of ["root-key.pem", "tsa-key.pem"]) {
      expect((await stat(join(dir, f))).mode & 0o777).toBe(0o600)
      expect(await readFile(join(dir, f), "utf8")).toMatch(/^-----BEGIN PRIVATE KEY-----/)
    }
    expect(await readFile(join(dir, "root.pem"), "utf8")).toBe(demo.rootPem)
    expect(await readFile(join(dir, "tsa.pem"), "utf8")).toBe(demo.tsaCertPem)
    expect(demo.provider).toBe(DEMO_TSA_PROVIDER)
    expect(demo.provider).toMatch(/local, unqualified/)
  })

  it("reuses the key material on the next load", async () => {
    const again = await loadOrCreateDemoTsa(dataDir)
    expect(again.rootPem).toBe(demo.rootPem)
    expect(again.tsaCertPem).toBe(demo.tsaCertPem)
    const digest = digest32()
    const token = await again.stamp(digest)
    await validateTimeStampToken(token, { digest, trustAnchorsPem: demo.rootPem, requireChain: true })
  })

  it("refuses an incomplete key directory", async () => {
    const other = await mkdtemp(join(tmpdir(), "attestd-demo-tsa-partial-"))
    try {
      await loadOrCreateDemoTsa(other)
      await rm(join(other, "demo-tsa", "tsa-key.pem"))
      await expect(loadOrCreateDemoTsa(other)).rejects.toThrow(/incomplete/)
    } finally {
      await rm(other, { recursive: true, force: true })
    }
  })

  it("concurrent first starts agree on one key set; an empty pre-created directory is filled", async () => {
    const fresh = await mkdtemp(join(tmpdir(), "attestd-demo-tsa-race-"))
    try {
      const [a, b] = await Promise.all([loadOrCreateDemoTsa(fresh), loadOrCreateDemoTsa(fresh)])
      expect(a.tsaCertPem).toBe(b.tsaCertPem)
      expect((await readdir(fresh)).sort()).toEqual(["demo-tsa"])
      await rm(join(fresh, "demo-tsa"), { recursive: true })
      await mkdir(join(fresh, "demo-tsa"))
      const c = await loadOrCreateDemoTsa(fresh)
      expect(c.tsaCertPem).not.toBe(a.tsaCertPem)
    } finally {
      await rm(fresh, { recursive: true, force: true })
    }
  })

  it("answers RFC 3161 requests with tokens that validate and pass `openssl ts -verify`", async () => {
    const digest = digest32()
    const req = buildTimeStampRequest(digest)
    const resp = parseTimeStampResponse(await demo.reply(req.der))
    expect(resp.status).toBe(0)
    const token = resp.token!
    const v = await validateTimeStampToken(token, { digest, nonce: req.nonce, trustAnchorsPem: demo.rootPem, requireChain: true })
    expect(v.chainVerified).toBe(true)
    expect(v.policy).toBe(DEMO_TSA_POLICY_OID)
    expect(v.tsaName).toMatch(/CN=attestd-demo-tsa \(local\\, unqualified\)/)
    expect(v.genTime.getTime()).toBeLessThanOrEqual(Date.now())
    const ossl = await opensslVerify(token, toHex(digest), demo.rootFile, demo.tsaCertFile)
    expect(ossl.ok, ossl.output).toBe(true)
    expect((await opensslVerify(token, toHex(digest), demo.rootFile)).ok).toBe(true)
    expect((await opensslVerify(token, toHex(digest32()), demo.rootFile)).ok).toBe(false)
  })

  it("issues unique serial numbers and millisecond genTimes", async () => {
    const digest = digest32()
    const tokens = await Promise.all(Array.from({ length: 5 }, () => demo.stamp(digest)))
    const details = tokens.map(parseTimeStampToken)
    expect(new Set(details.map((d) => d.serial_number)).size).toBe(5)
    for (const d of details) {
      expect(d.certificates).toHaveLength(1)
      expect(d.certificates[0]!.subject).toContain("attestd-demo-tsa")
      expect(d.nonce).toBeNull()
      expect(d.accuracy).toBeNull()
    }
  })

  it("rejects unsupported requests", async () => {
    const resp = parseTimeStampResponse(await demo.reply(new Uint8Array([1, 2, 3])))
    expect(resp.status).toBe(2)
    expect(resp.failInfo).toEqual(["badDataFormat"])
  })

  it("omits the certificate when certReq is false", async () => {
    const pkijs = await import("pkijs")
    const { der } = buildTimeStampRequest(digest32())
    const req = pkijs.TimeStampReq.fromBER(der)
    req.certReq = false
    const resp = parseTimeStampResponse(await demo.reply(new Uint8Array(req.toSchema().toBER())))
    expect(resp.status).toBe(0)
    expect(parseTimeStampToken(resp.token!).certificates).toHaveLength(0)
  })

  it("property: a token validates for its digest and for no other", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        async (digest, other) => {
          fc.pre(toHex(digest) !== toHex(other))
          const token = await demo.stamp(digest)
          await validateTimeStampToken(token, { digest, trustAnchorsPem: demo.rootPem, requireChain: true })
          const err = await validateTimeStampToken(token, { digest: other, trustAnchorsPem: demo.rootPem, requireChain: true }).then(
            () => undefined,
            (e: unknown) => e
          )
          expect(err).toBeInstanceOf(TsaValidationError)
        }
      ),
      { numRuns: 20 }
    )
  })

  effectIt.effect("layerDemo stamps through the TsaClient port", () =>
    Effect.gen(function* () {
      const tsa = yield* TsaClient
      expect(tsa.provider).toBe(DEMO_TSA_PROVIDER)
      const digest = digest32()
      const stamp = yield* tsa.timestamp(digest)
      expect(stamp.provider).toBe(DEMO_TSA_PROVIDER)
      const v = yield* Effect.promise(() =>
        validateTimeStampToken(stamp.token, { digest, trustAnchorsPem: demo.rootPem, requireChain: true })
      )
      expect(v.genTime.getTime()).toBe(stamp.genTime.getTime())
    }).pipe(Effect.provide(layerDemo(dataDir)))
  )
})
