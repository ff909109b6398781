/**
 * The signing threads' pool (Pkcs11Threads.ts) with stand-in threads instead of a token: a
 * thread holds up to PIPELINE_DEPTH batches at once and each batch gets its own answer (a
 * thread answers in order); a thread that does not answer in time fails every batch it holds,
 * is stopped, and the next batch starts another.
 */
import { Effect, Either, Exit, Scope } from "effect"
import { Worker } from "node:worker_threads"
import { describe, expect, it } from "vitest"
import { makeSigningThreads, PIPELINE_DEPTH, type SignItem, type SigningThreadData } from "../../src/Platform/Keys/Pkcs11Threads.js"

/**
 * A thread that says "ready", then answers each batch after `delayMs` with, per item, 64 bytes
 * each equal to the first byte of its digest; `delayMs` < 0: it never answers a batch.
 */
const standIn = (delayMs: number) => (_: SigningThreadData): Worker =>
  new Worker(
    `
const { parentPort } = require("node:worker_threads")
parentPort.on("message", ({ which, digests }) => {
  if (${delayMs} < 0) return
  const signatures = new Uint8Array(64 * which.length)
  for (let i = 0; i < which.length; i++) signatures.fill(digests[32 * i], 64 * i, 64 * (i + 1))
  setTimeout(() => parentPort.postMessage({ signatures, errors: [] }, [signatures.buffer]), ${delayMs})
})
parentPort.postMessage("ready")
`,
    { eval: true }
  )

/** Spawns through `spawn`, keeping each thread and the most batches one held at once. */
const watched = (spawn: (data: SigningThreadData) => Worker) => {
  const started: Array<Worker> = []
  const seen = { mostHeld: 0 }
  const wrapped = (data: SigningThreadData): Worker => {
    const worker = spawn(data)
    let held = 0
    const post = worker.postMessage.bind(worker)
    worker.postMessage = (message: unknown, transfer?: ReadonlyArray<ArrayBuffer>) => {
      held++
      seen.mostHeld = Math.max(seen.mostHeld, held)
      post(message, transfer as Array<ArrayBuffer>)
    }
    worker.on("message", (m) => {
      if (m !== "ready") held--
    })
    started.push(worker)
    return worker
  }
  return { started, seen, spawn: wrapped }
}

const items = (batch: number, n: number): ReadonlyArray<SignItem> =>
  Array.from({ length: n }, () => ({ key: Uint8Array.of(1), digest: new Uint8Array(32).fill(batch) }))

const DATA: SigningThreadData = { addon: "unused", module: "unused" }

describe("PKCS#11 signing threads: pipelining", () => {
  it("one thread holds PIPELINE_DEPTH batches at once, never more; each batch gets its own answer", async () => {
    const { seen, spawn, started } = watched(standIn(30))
    const answers = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const threads = yield* makeSigningThreads({ data: DATA, size: 1, timeout: "10 seconds", startTimeout: "10 seconds", spawn })
      return yield* Effect.forEach([1, 2, 3, 4, 5, 6], (b) => threads.sign(Uint8Array.of(9), items(b, b)), { concurrency: "unbounded" })
    })))
    expect(PIPELINE_DEPTH).toBe(2)
    expect(seen.mostHeld).toBe(PIPELINE_DEPTH)
    answers.forEach((outcomes, i) => {
      expect(outcomes.length).toBe(i + 1)
      for (const o of outcomes) expect(o).toEqual(new Uint8Array(64).fill(i + 1))
    })
    expect(started.length).toBe(1)
    expect(started[0]!.threadId).toBe(-1) // the scope's close stopped it
  })

  it("a thread that does not answer in time: every batch it holds fails, it is stopped, the next batch starts another", async () => {
    let silent = true
    const { spawn, started } = watched((data) => standIn(silent ? -1 : 0)(data))
    const [first, after] = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const threads = yield* makeSigningThreads({ data: DATA, size: 1, timeout: "300 millis", startTimeout: "10 seconds", spawn })
      const first = yield* Effect.forEach([1, 2], (b) => Effect.either(threads.sign(Uint8Array.of(9), items(b, 3))), { concurrency: "unbounded" })
      silent = false
      const after = yield* Effect.either(threads.sign(Uint8Array.of(9), items(7, 2)))
      return [first, after] as const
    })))
    expect(first).toEqual([Either.left("no answer within 300 ms"), Either.left("no answer within 300 ms")])
    expect(after).toEqual(Either.right([new Uint8Array(64).fill(7), new Uint8Array(64).fill(7)]))
    expect(started.length).toBe(2)
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(started.every((w) => w.threadId === -1)).toBe(true)
  })

  it("the scope's close waits for the batches under way", async () => {
    const { spawn } = watched(standIn(100))
    const scope = Effect.runSync(Scope.make())
    const threads = await Effect.runPromise(Scope.extend(makeSigningThreads({ data: DATA, size: 1, timeout: "10 seconds", startTimeout: "10 seconds", spawn }), scope))
    const under = Effect.runPromise(threads.sign(Uint8Array.of(9), items(4, 1)))
    await new Promise((resolve) => setTimeout(resolve, 20))
    await Effect.runPromise(Scope.close(scope, Exit.void))
    expect(await under).toEqual([new Uint8Array(64).fill(4)])
  })
})
