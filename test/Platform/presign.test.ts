/**
 * Signing with nonces made ahead of time (src/Platform/Presign.ts): every signature
 * verifies with node:crypto and @noble/curves, is low-S, and uses its nonce's r; the
 * worker's nonces are what they claim (r = (k·G).x mod n for k = (k⁻¹)⁻¹) and never
 * repeat; a nonce serves one signature; an empty pool signs the old way; a pool whose
 * checked signature (the first, then one in every CHECK_EVERY) does not verify is not
 * used again.
 */
import { p256 } from "@noble/curves/nist.js"
import { sha256 } from "@noble/hashes/sha2.js"
import fc from "fast-check"
import { verify as nodeVerify } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { CHECK_EVERY, type Nonce, NoncePool, POOL_CAPACITY, presigner, privateScalar, REFILL_BATCH, signWithNonce } from "../../src/Platform/Presign.js"
import { ephemeralKey, signPayloadDer } from "../../src/Platform/Signer.js"

const Fn = p256.Point.Fn
const N = Fn.ORDER
const key = ephemeralKey().privateKey
const d = privateScalar(key)
const publicKey = p256.getPublicKey(Fn.toBytes(d), false)

const nonceOf = (k: bigint): Nonce => ({ r: Fn.create(p256.Point.BASE.multiply(k).toAffine().x), kInv: Fn.inv(k) })
const verifiesWithNode = (payload: string, der: Uint8Array) =>
  nodeVerify("sha256", Buffer.from(payload, "utf8"), { key, dsaEncoding: "der" }, der)
const verifiesWithNoble = (payload: string, der: Uint8Array) =>
  p256.verify(der, sha256(new TextEncoder().encode(payload)), publicKey, { format: "der", prehash: false, lowS: true })

const pools: Array<NoncePool> = []
const workerPool = () => {
  const pool = new NoncePool({ worker: true })
  pools.push(pool)
  return pool
}
afterAll(() => Promise.all(pools.map((p) => p.close())))

describe("signWithNonce", () => {
  it("makes a low-S DER signature that node:crypto and noble verify, with the nonce's r", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 1n, max: N - 1n }), fc.string({ maxLength: 200 }), (k, payload) => {
        const nonce = nonceOf(k)
        const der = signWithNonce(d, nonce, payload)!
        const sig = p256.Signature.fromBytes(der, "der")
        expect(sig.toBytes("der")).toEqual(der)
        expect(sig.r).toBe(nonce.r)
        expect(sig.hasHighS()).toBe(false)
        expect(verifiesWithNode(payload, der)).toBe(true)
        expect(verifiesWithNoble(payload, der)).toBe(true)
        expect(verifiesWithNode(`${payload}.`, der)).toBe(false)
      }),
      { numRuns: 60 }
    )
  })

  it("writes canonical DER for r and s of any length (leading zeros dropped, a zero byte before a high bit)", () => {
    for (const r of [1n, 0x7fn, 0x80n, 0xffn, 0x100n, 2n ** 247n, 2n ** 255n, N - 1n]) {
      for (const kInv of [1n, 3n, N - 2n]) {
        const der = signWithNonce(d, { r, kInv }, "payload")!
        const sig = p256.Signature.fromBytes(der, "der")
        expect(sig.r).toBe(r)
        expect(sig.toBytes("der")).toEqual(der)
      }
    }
  })

  it("does not verify with a nonce whose k⁻¹ is not its r's", () => {
    const nonce = nonceOf(12345n)
    const der = signWithNonce(d, { r: nonce.r, kInv: Fn.inv(12346n) }, "payload")!
    expect(verifiesWithNode("payload", der)).toBe(false)
  })
})

describe("NoncePool's worker", () => {
  it("makes nonces whose r is the x of (k⁻¹)⁻¹·G mod n, none twice", async () => {
    const pool = workerPool()
    await pool.filled(POOL_CAPACITY - REFILL_BATCH)
    const nonces: Array<Nonce> = []
    for (let n = pool.size; n > 0; n--) nonces.push(pool.take()!)
    expect(nonces.length).toBeGreaterThanOrEqual(POOL_CAPACITY - REFILL_BATCH)
    expect(new Set(nonces.map((n) => n.r)).size).toBe(nonces.length)
    expect(new Set(nonces.map((n) => n.kInv)).size).toBe(nonces.length)
    // every batch is inverted together: check nonces from each part of the list
    for (let i = 0; i < nonces.length; i += 13) {
      const { r, kInv } = nonces[i]!
      expect(r > 0n && r < N && kInv > 0n && kInv < N).toBe(true)
      expect(nonceOf(Fn.inv(kInv)).r).toBe(r)
    }
  })

  it("refills as nonces are taken, and a taken nonce is gone", async () => {
    const pool = workerPool()
    await pool.filled(REFILL_BATCH)
    const before = pool.size
    const first = pool.take()!
    expect(pool.size).toBe(before - 1)
    const seen = new Set([first.r])
    for (let i = 0; i < POOL_CAPACITY + REFILL_BATCH; i++) {
      const nonce = pool.take()
      if (nonce === undefined) await pool.filled(1)
      else {
        expect(seen.has(nonce.r)).toBe(false)
        seen.add(nonce.r)
      }
    }
    await pool.filled(REFILL_BATCH)
    expect(pool.stats.taken).toBe(seen.size)
  })
})

describe("presigner", () => {
  const payloads = Array.from({ length: 40 }, (_, i) => `2.0.0|${"ab".repeat(32)}|2026-11-24T12:00:00.${String(i).padStart(6, "0")}+00:00`)

  it("signs from the pool while it has nonces, a fresh nonce each time", async () => {
    const pool = workerPool()
    const fallbacks: Array<string> = []
    const sign = presigner(key, pool, (p) => (fallbacks.push(p), signPayloadDer(key, p)))
    await pool.filled(payloads.length * 2)
    const sigs = payloads.flatMap((p) => [sign(p), sign(p)])
    expect(fallbacks).toEqual([])
    expect(pool.stats.taken).toBe(payloads.length * 2)
    sigs.forEach((der, i) => expect(verifiesWithNode(payloads[i >> 1]!, der)).toBe(true))
    expect(new Set(sigs.map((der) => p256.Signature.fromBytes(der, "der").r)).size).toBe(sigs.length)
  })

  it("signs with node:crypto when the pool is empty", () => {
    const pool = new NoncePool({ worker: false })
    const fallbacks: Array<string> = []
    const sign = presigner(key, pool, (p) => (fallbacks.push(p), signPayloadDer(key, p)))
    for (const p of payloads.slice(0, 3)) expect(verifiesWithNode(p, sign(p))).toBe(true)
    expect(fallbacks).toEqual(payloads.slice(0, 3))
    expect(pool.stats).toEqual({ taken: 0, missed: 3 })
  })

  const bad = (k: bigint): Nonce => ({ r: nonceOf(k).r, kInv: Fn.inv(k + 1n) })

  it("stops using a pool whose first signature does not verify", () => {
    const pool = new NoncePool({ worker: false })
    pool.put([nonceOf(5n), nonceOf(6n), bad(777n)]) // taken last first: the bad one
    const fallbacks: Array<string> = []
    let distrusted = 0
    const sign = presigner(key, pool, (p) => (fallbacks.push(p), signPayloadDer(key, p)), () => distrusted++)
    for (const p of payloads.slice(0, 3)) expect(verifiesWithNode(p, sign(p))).toBe(true)
    expect(fallbacks).toEqual(payloads.slice(0, 3))
    expect(distrusted).toBe(1)
    expect(pool.stats.taken).toBe(1)
    expect(pool.size).toBe(0) // closed: its nonces are forgotten
  })

  it(`checks the first signature from the pool and one in every ${CHECK_EVERY} after it`, () => {
    const pool = new NoncePool({ worker: false })
    const ks = Array.from({ length: CHECK_EVERY }, (_, i) => BigInt(i + 100))
    // taken from the end: #1 good (checked), #2 bad (not checked), …, #257 bad (checked)
    pool.put([bad(7n), ...ks.slice(2).map(nonceOf), bad(8n), nonceOf(9n)])
    const fallbacks: Array<string> = []
    let distrusted = 0
    const sign = presigner(key, pool, (p) => (fallbacks.push(p), signPayloadDer(key, p)), () => distrusted++)
    const results = Array.from({ length: CHECK_EVERY + 2 }, (_, i) => verifiesWithNode(`p${i}`, sign(`p${i}`)))
    expect(results[0]).toBe(true)
    expect(results[1]).toBe(false) // between checks a bad nonce goes unseen: the worker's tests hold its nonces right
    expect(results.slice(2)).toEqual(Array(CHECK_EVERY).fill(true))
    expect(fallbacks).toEqual([`p${CHECK_EVERY}`, `p${CHECK_EVERY + 1}`])
    expect(distrusted).toBe(1)
  })
})
