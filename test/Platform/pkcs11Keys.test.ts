/**
 * The PKCS#11 custody's signing threads, in process with a SoftHSM2 token: signatures asked
 * for at once go to the threads in a few batches and all verify with the key's JWK; a thread
 * that stops under a batch fails that batch's signatures as ServiceUnavailable (none waits for
 * ever), a thread is started in its place and the signatures after it are made; the layer's
 * close stops every thread. And ATTESTD_PKCS11_WORKERS, the number of threads.
 */
import { Cause, ConfigProvider, Effect, Either, Exit, ManagedRuntime } from "effect"
import { createPublicKey, verify } from "node:crypto"
import type { Worker } from "node:worker_threads"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ServiceUnavailable } from "../../src/Domain/Errors.js"
import { normalizeLowS } from "../../src/Domain/T0.js"
import { appConfig, DEFAULT_PKCS11_WORKERS } from "../../src/Platform/Config.js"
import { type HeldKey, KeyCustody } from "../../src/Platform/Keys/Custody.js"
import { layerPkcs11Keys } from "../../src/Platform/Keys/Pkcs11Keys.js"
import { type SigningThreadData, spawnSigningThread } from "../../src/Platform/Keys/Pkcs11Threads.js"
import { makeSoftToken, SOFTHSM_MODULE, type SoftToken, softhsmAvailable } from "../helpers/softhsm.js"

const messages = (n: number, tag: string) => Array.from({ length: n }, (_, i) => new TextEncoder().encode(`2.0.0|${tag}-${i}|2026-01-01T00:00:00.000000+00:00`))

/** Each signature verifies with the key's public JWK (node:crypto) and is low-S DER. */
const verifiesAll = (key: HeldKey, signed: ReadonlyArray<readonly [Uint8Array, Uint8Array]>) => {
  const publicKey = createPublicKey({ key: { ...key.jwk }, format: "jwk" })
  return signed.every(([message, signature]) =>
    verify("sha256", message, { key: publicKey, dsaEncoding: "der" }, signature) &&
    Buffer.from(normalizeLowS(signature)).equals(Buffer.from(signature)))
}

/** Threads as the layer starts them, kept here with the messages posted to them; `stopOnNextPost` makes the next thread given a batch stop instead. */
const watchedThreads = () => {
  const started: Array<Worker> = []
  const control = { posts: 0, stopOnNextPost: false }
  const spawn = (data: SigningThreadData): Worker => {
    const worker = spawnSigningThread(data)
    const post = worker.postMessage.bind(worker)
    worker.postMessage = (message: unknown) => {
      control.posts++
      if (control.stopOnNextPost) {
        control.stopOnNextPost = false
        void worker.terminate()
        return
      }
      post(message)
    }
    started.push(worker)
    return worker
  }
  return { started, control, spawn }
}

describe("ATTESTD_PKCS11_WORKERS", () => {
  const workersOf = (env: Record<string, string>) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(
      appConfig,
      ConfigProvider.fromMap(new Map(Object.entries({ ATTESTD_SIGNER: "pkcs11", ATTESTD_PKCS11_MODULE: "/m.so", ATTESTD_PKCS11_TOKEN: "t", ATTESTD_PKCS11_PIN_FILE: "/pin", ...env })))
    ))).pipe(Either.map((c) => (c.signer._tag === "pkcs11" ? c.signer.workers : undefined)))

  it("defaults to 2 threads, takes 1..64, refuses anything else", () => {
    expect(workersOf({})).toEqual(Either.right(DEFAULT_PKCS11_WORKERS))
    expect(DEFAULT_PKCS11_WORKERS).toBe(2)
    expect(workersOf({ ATTESTD_PKCS11_WORKERS: "1" })).toEqual(Either.right(1))
    expect(workersOf({ ATTESTD_PKCS11_WORKERS: "64" })).toEqual(Either.right(64))
    for (const bad of ["0", "65", "-1", "two"]) expect(Either.isLeft(workersOf({ ATTESTD_PKCS11_WORKERS: bad })), bad).toBe(true)
  })
})

describe.skipIf(!softhsmAvailable())("PKCS#11 signing threads (SoftHSM2, in process)", () => {
  let token: SoftToken
  const conf = process.env.SOFTHSM2_CONF
  beforeAll(() => {
    token = makeSoftToken("attestd-threads")
    // SoftHSM reads its configuration at C_Initialize, from this process's environment
    process.env.SOFTHSM2_CONF = token.env.SOFTHSM2_CONF
  })
  afterAll(() => {
    if (conf === undefined) delete process.env.SOFTHSM2_CONF
    else process.env.SOFTHSM2_CONF = conf
    token.cleanup()
  })

  const custody = (spawn: (data: SigningThreadData) => Worker) =>
    ManagedRuntime.make(layerPkcs11Keys({ module: SOFTHSM_MODULE, token: token.label, pinFile: token.pinFile, workers: 2 }, spawn))

  it("200 signatures at once: a few messages to the threads, every signature verifies; the close stops the threads", async () => {
    const { control, spawn, started } = watchedThreads()
    const runtime = custody(spawn)
    try {
      const key = await runtime.runPromise(Effect.flatMap(KeyCustody, (c) => c.generate("t0", Date.now())))
      expect(started.length).toBe(2)
      const asked = messages(200, "at-once")
      const signatures = await runtime.runPromise(Effect.forEach(asked, (m) => key.sign(m), { concurrency: "unbounded" }))
      expect(verifiesAll(key, asked.map((m, i) => [m, signatures[i]!] as const))).toBe(true)
      expect(control.posts).toBeGreaterThanOrEqual(2)
      expect(control.posts).toBeLessThan(20)
    } finally {
      await runtime.dispose()
    }
    expect(started.every((w) => w.threadId === -1)).toBe(true)
  })

  it("a thread that stops under a batch: its signatures fail as ServiceUnavailable, a new thread signs the next ones", async () => {
    const { control, spawn, started } = watchedThreads()
    const runtime = custody(spawn)
    try {
      const key = await runtime.runPromise(Effect.flatMap(KeyCustody, (c) => c.generate("t0", Date.now())))
      control.stopOnNextPost = true
      const asked = messages(200, "stopped")
      const since = performance.now()
      const exits = await runtime.runPromise(Effect.forEach(asked, (m) => Effect.exit(key.sign(m)), { concurrency: "unbounded" }))
      // the thread's exit ends its batch, long before the 10 s a token may take to answer
      expect(performance.now() - since).toBeLessThan(5_000)
      const failures = exits.flatMap((e) => (Exit.isFailure(e) ? [Cause.failureOption(e.cause)] : []))
      expect(failures.length).toBeGreaterThan(0)
      expect(failures.every((f) => f._tag === "Some" && f.value instanceof ServiceUnavailable)).toBe(true)
      const made = asked.flatMap((m, i) => {
        const e = exits[i]!
        return Exit.isSuccess(e) ? [[m, e.value] as const] : []
      })
      expect(verifiesAll(key, made)).toBe(true)

      const after = messages(50, "after")
      const signatures = await runtime.runPromise(Effect.forEach(after, (m) => key.sign(m), { concurrency: "unbounded" }))
      expect(verifiesAll(key, after.map((m, i) => [m, signatures[i]!] as const))).toBe(true)
      expect(started.length).toBe(3)
    } finally {
      await runtime.dispose()
    }
    expect(started.every((w) => w.threadId === -1)).toBe(true)
  })
})
