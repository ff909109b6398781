/**
 * ECDSA P-256 signing with nonces made ahead of time.
 *
 * An ECDSA signature is r = (k·G).x mod n and s = k⁻¹·(e + r·d) mod n, for a
 * fresh secret nonce k, the message's digest e and the private key d. Almost
 * all of its cost is k·G and k⁻¹, and neither depends on the message or the
 * key: a worker thread makes them (k from OpenSSL's key generation, k⁻¹ by
 * batch inversion) and the request path only hashes the payload and does two
 * multiplications modulo n. Each nonce is taken from the pool once, then
 * dropped; when the pool is empty (before the first batch, if the signing
 * outruns the worker, or if the worker failed) the caller signs with
 * node:crypto as before.
 *
 * The nonces are as secret as the key and live only in this process's memory.
 */
import { createHash, type KeyObject, verify as nodeVerify } from "node:crypto"
import { Worker } from "node:worker_threads"
import { p256 } from "@noble/curves/nist.js"

const N = p256.Point.Fn.ORDER
const HALF_N = N >> 1n

/** k⁻¹ and r = (k·G).x mod n for one secret nonce k. */
export interface Nonce {
  readonly r: bigint
  readonly kInv: bigint
}

const bigintOf = (bytes: Uint8Array): bigint => BigInt(`0x${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("hex")}`)

/** The private scalar d of a P-256 key. */
export const privateScalar = (key: KeyObject): bigint => {
  const jwk = key.export({ format: "jwk" }) as { d?: string }
  if (jwk.d === undefined) throw new Error("not a private key")
  return bigintOf(Buffer.from(jwk.d, "base64url"))
}

/**
 * Signs `payload` (UTF-8, SHA-256) with the scalar `d` and the nonce: DER, low-S.
 * Undefined in the one case the nonce cannot serve (s = 0, probability ~2⁻²⁵⁶).
 */
export const signWithNonce = (d: bigint, nonce: Nonce, payload: string): Uint8Array | undefined => {
  const e = bigintOf(createHash("sha256").update(payload, "utf8").digest())
  let s = (nonce.kInv * ((e + nonce.r * d) % N)) % N
  if (s === 0n) return undefined
  if (s > HALF_N) s = N - s
  return new p256.Signature(nonce.r, s).toBytes("der")
}

/**
 * The worker thread's program (CommonJS, node:crypto only; a string so that it runs
 * the same from sources, the bundle and the single executable). For `{ count }` it
 * answers a flat list [r₀, k₀⁻¹, r₁, k₁⁻¹, …]: each k is a P-256 private key from
 * OpenSSL (uniform in [1, n−1]), r the x of its public key mod n; the inverses come
 * from one exponentiation k⁻¹ = k^(n−2) of the batch's product (Montgomery's trick).
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads")
const { createECDH } = require("node:crypto")
const N = ${N}n
const pow = (b, e) => { let r = 1n; b %= N; while (e > 0n) { if (e & 1n) r = r * b % N; b = b * b % N; e >>= 1n } return r }
const ecdh = createECDH("prime256v1")
parentPort.on("message", ({ count }) => {
  const ks = [], rs = []
  while (ks.length < count) {
    ecdh.generateKeys()
    const k = BigInt("0x" + ecdh.getPrivateKey("hex"))
    const r = BigInt("0x" + ecdh.getPublicKey("hex", "uncompressed").slice(2, 66)) % N
    if (k === 0n || r === 0n) continue
    ks.push(k); rs.push(r)
  }
  const prefix = new Array(count)
  let acc = 1n
  for (let i = 0; i < count; i++) { prefix[i] = acc; acc = acc * ks[i] % N }
  let inv = pow(acc, N - 2n)
  const out = new Array(2 * count)
  for (let i = count - 1; i >= 0; i--) {
    out[2 * i] = rs[i]
    out[2 * i + 1] = inv * prefix[i] % N
    inv = inv * ks[i] % N
  }
  ks.length = 0
  parentPort.postMessage(out)
})
`

/** How many nonces the pool keeps, and how many the worker makes at a time. */
export const POOL_CAPACITY = 1024
export const REFILL_BATCH = 256

export class NoncePool {
  readonly #nonces: Array<Nonce> = []
  #worker: Worker | undefined
  /** No worker will (again) make nonces: a pool made without one, closed, or whose worker failed. */
  #stopped: boolean
  #asked = false
  #taken = 0
  #missed = 0

  readonly #onFailure: (reason: string) => void

  /** With `worker` false the pool holds only what `put` gives it (tests); `onFailure` hears of a worker that failed. */
  constructor(options: { readonly worker: boolean; readonly onFailure?: (reason: string) => void }) {
    this.#stopped = !options.worker
    this.#onFailure = options.onFailure ?? (() => {})
  }

  /** The worker starts at the first `take`, so a process that never signs never runs it. */
  #start(): Worker {
    const w = new Worker(WORKER_SOURCE, { eval: true })
    w.unref()
    w.on("message", (flat: Array<bigint>) => {
      this.#asked = false
      const nonces: Array<Nonce> = []
      for (let i = 0; i + 1 < flat.length; i += 2) nonces.push({ r: flat[i]!, kInv: flat[i + 1]! })
      this.put(nonces)
    })
    const gone = (reason: string) => {
      if (this.#worker !== w) return
      this.#worker = undefined
      this.#stopped = true
      this.#onFailure(reason)
    }
    w.on("error", (e) => gone(String(e)))
    w.on("exit", (code) => gone(`exited with code ${code}`))
    return w
  }

  #refill(): void {
    if (this.#asked || this.#nonces.length > POOL_CAPACITY - REFILL_BATCH) return
    if (this.#worker === undefined) {
      if (this.#stopped) return
      this.#worker = this.#start()
    }
    this.#asked = true
    this.#worker.postMessage({ count: REFILL_BATCH })
  }

  /** Adds nonces (the worker's batches). */
  put(nonces: ReadonlyArray<Nonce>): void {
    for (const nonce of nonces) this.#nonces.push(nonce)
    this.#refill()
  }

  /** A nonce no one has used, removed from the pool; undefined when the pool is empty. */
  take(): Nonce | undefined {
    const nonce = this.#nonces.pop()
    if (nonce === undefined) this.#missed++
    else this.#taken++
    this.#refill()
    return nonce
  }

  get size(): number {
    return this.#nonces.length
  }

  /** Nonces taken, and takes that found the pool empty. */
  get stats(): { readonly taken: number; readonly missed: number } {
    return { taken: this.#taken, missed: this.#missed }
  }

  /** Starts the worker if it has not started and resolves once the pool holds `count` nonces (at most POOL_CAPACITY − REFILL_BATCH). */
  async filled(count: number): Promise<void> {
    this.#refill()
    while (this.#nonces.length < count) {
      if (this.#worker === undefined) throw new Error("the nonce worker is not running")
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
  }

  /** Stops the worker for good and forgets the nonces. */
  async close(): Promise<void> {
    const w = this.#worker
    this.#worker = undefined
    this.#stopped = true
    this.#nonces.length = 0
    if (w !== undefined) await w.terminate()
  }
}

/** A pooled signature in every this many is verified before it is returned. */
export const CHECK_EVERY = 256

/**
 * A signer of payloads with `key`: nonces from `pool` while it has some, node:crypto's
 * `sign` (via `fallback`) when it has none. It checks itself: the first signature made
 * from the pool and one in every CHECK_EVERY after it must verify with node:crypto
 * against the key (~0.3 µs per signature), else that payload and every later one are
 * signed by `fallback` and `onDistrust` is called once.
 */
export const presigner = (
  key: KeyObject,
  pool: NoncePool,
  fallback: (payload: string) => Uint8Array,
  onDistrust: () => void = () => {}
): (payload: string) => Uint8Array => {
  const d = privateScalar(key)
  let trusted = true
  let sinceCheck = CHECK_EVERY
  const check = (payload: string, der: Uint8Array): boolean => {
    sinceCheck = 0
    trusted = nodeVerify("sha256", Buffer.from(payload, "utf8"), { key, dsaEncoding: "der" }, der)
    if (!trusted) {
      void pool.close()
      onDistrust()
    }
    return trusted
  }
  return (payload) => {
    const nonce = trusted ? pool.take() : undefined
    const der = nonce === undefined ? undefined : signWithNonce(d, nonce, payload)
    if (der === undefined) return fallback(payload)
    return ++sinceCheck < CHECK_EVERY || check(payload, der) ? der : fallback(payload)
  }
}
