/**
 * The worker threads that sign for Pkcs11Keys.ts. A module's C_Sign is synchronous and lasts a
 * network or USB token's round trip, so it never runs on the event loop; and a thread gets a
 * batch of digests per message, since a message each way costs more than SoftHSM's signature.
 *
 * A thread loads pkcs11js's native addon (the file the main thread resolved and, in the single
 * executable, checked) and the module, and holds nothing else. PKCS#11 state is per process:
 * the main thread initialises the module and opens and logs in the sessions, and each message
 * names the session and the key handles to use, so after a reconnect the next message carries
 * the new ones. A thread never calls C_Initialize: one started while the main thread reconnects
 * would initialise the module under it.
 *
 * The program is CommonJS source run with `eval`, so that it is the same from the tsc output,
 * the esbuild bundle and the single executable, none of which needs a second entry point.
 *
 * A thread that stops (it crashed, or it was stopped because the token did not answer in time)
 * fails the batches it held, and the next batch on its slot starts another; every thread is
 * stopped when the scope closes, before the module is finalized.
 */
import { Duration, Effect, type Scope } from "effect"
import { Worker } from "node:worker_threads"

/** What a thread is started with (its workerData). */
export interface SigningThreadData {
  /** pkcs11js's native addon (`pkcs11.node`). */
  readonly addon: string
  /** The PKCS#11 module's shared library. */
  readonly module: string
}

export interface SignItem {
  /** The private key's object handle in the session's token. */
  readonly key: Uint8Array
  /** The SHA-256 digest to sign. */
  readonly digest: Uint8Array
}

/** Per item: the raw r‖s C_Sign returned, or the module's error for it. */
export type SignOutcome = Uint8Array | string

/** Bytes of a P-256 signature's raw r‖s, as CKM_ECDSA returns it. */
const RS_BYTES = 64

/** Bytes of a SHA-256 digest. */
const DIGEST_BYTES = 32

/**
 * What a thread is sent for a batch: the session, the batch's distinct key handles, the index
 * of each item's handle among them, and the items' digests one after the other in one buffer
 * (transferred, not copied). A digest or handle of its own per item would be cloned with the
 * whole pooled buffer it is a view of.
 */
interface Batch {
  readonly session: Uint8Array
  readonly keys: ReadonlyArray<Uint8Array>
  readonly which: Uint16Array
  readonly digests: Uint8Array
}

/** The batch of `items`, and the buffer of its digests to transfer. */
const batchOf = (session: Uint8Array, items: ReadonlyArray<SignItem>): { readonly batch: Batch; readonly transfer: ArrayBuffer } => {
  const keys: Array<Uint8Array> = []
  const which = new Uint16Array(items.length)
  const transfer = new ArrayBuffer(DIGEST_BYTES * items.length)
  const digests = new Uint8Array(transfer)
  items.forEach(({ key, digest }, i) => {
    let k = keys.findIndex((known) => known.length === key.length && known.every((b, j) => b === key[j]))
    if (k === -1) k = keys.push(Uint8Array.from(key)) - 1
    which[i] = k
    digests.set(digest, DIGEST_BYTES * i)
  })
  return { batch: { session: Uint8Array.from(session), keys, which, digests }, transfer }
}

/**
 * The thread's program. It answers each Batch with the items' r‖s, one after the other in one
 * buffer (transferred, not copied), and the errors of those that failed by index (C_SignInit +
 * C_Sign with CKM_ECDSA; the raw addon's C_Sign returns the length it wrote), and says "ready"
 * once the addon and the module are loaded.
 */
const PROGRAM = `
const { parentPort, workerData } = require("node:worker_threads")
const addon = require("node:module").createRequire(workerData.addon)(workerData.addon)
const pkcs11 = new addon.PKCS11()
pkcs11.load(workerData.module)
const ecdsa = { mechanism: addon.CKM_ECDSA }
parentPort.on("message", ({ session, keys, which, digests }) => {
  const handles = keys.map((k) => Buffer.from(k.buffer, k.byteOffset, k.length))
  const sessionHandle = Buffer.from(session.buffer, session.byteOffset, session.length)
  const signatures = Buffer.alloc(${RS_BYTES} * which.length)
  const errors = []
  for (let i = 0; i < which.length; i++) {
    try {
      pkcs11.C_SignInit(sessionHandle, ecdsa, handles[which[i]])
      const digest = Buffer.from(digests.buffer, digests.byteOffset + ${DIGEST_BYTES} * i, ${DIGEST_BYTES})
      const length = pkcs11.C_Sign(sessionHandle, digest, signatures.subarray(${RS_BYTES} * i, ${RS_BYTES} * (i + 1)))
      if (length !== ${RS_BYTES}) errors.push([i, "C_Sign returned " + length + " bytes, not the ${RS_BYTES} of a P-256 r‖s"])
    } catch (e) {
      errors.push([i, String(e instanceof Error ? e.message : e).split("\\n")[0]])
    }
  }
  parentPort.postMessage({ signatures, errors }, [signatures.buffer])
})
parentPort.postMessage("ready")
`

/** A thread's answer to a batch. */
interface Answer {
  readonly signatures: Uint8Array
  readonly errors: ReadonlyArray<readonly [number, string]>
}

const outcomesOf = (count: number, answer: Answer): ReadonlyArray<SignOutcome> => {
  const out: Array<SignOutcome> = Array.from({ length: count }, (_, i) => answer.signatures.subarray(RS_BYTES * i, RS_BYTES * (i + 1)))
  for (const [i, reason] of answer.errors) out[i] = reason
  return out
}

/** Starts a thread running the program. */
export const spawnSigningThread = (data: SigningThreadData): Worker => new Worker(PROGRAM, { eval: true, workerData: data })

/** How long the scope's close (or a thread given up) waits for a thread to stop: one stuck in the module stops only when it returns. */
const STOP_WAIT = Duration.seconds(2)

/**
 * Batches a thread holds at once. While it signs one, the next waits in its message queue, so
 * the thread does not idle while the event loop turns the last answer into DER, resumes its
 * requests and gathers the next batch (with one, a thread signed only ~60% of the time here).
 */
export const PIPELINE_DEPTH = 2

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * The thread's first message, or its stop, or a failure after `timeoutMillis`, whichever comes
 * first (a thread that stopped emits no message, but its exit).
 */
const firstMessage = (worker: Worker, timeoutMillis: number): Effect.Effect<unknown, string> =>
  Effect.async<unknown, string>((resume) => {
    const off = () => {
      clearTimeout(timer)
      worker.off("message", onMessage)
      worker.off("error", onError)
      worker.off("exit", onExit)
    }
    const end = (result: Effect.Effect<unknown, string>) => {
      off()
      resume(result)
    }
    const onMessage = (message: unknown) => end(Effect.succeed(message))
    const onError = (e: unknown) => end(Effect.fail(`the signing thread failed: ${messageOf(e)}`))
    const onExit = (code: number) => end(Effect.fail(`the signing thread stopped (exit code ${code})`))
    const timer = setTimeout(() => end(Effect.fail(`no answer within ${timeoutMillis} ms`)), timeoutMillis)
    worker.on("message", onMessage)
    worker.on("error", onError)
    worker.on("exit", onExit)
    return Effect.sync(off)
  })

export interface SigningThreads {
  /**
   * Signs `items` with `session` on the least busy thread: an outcome per item; a failure when
   * the thread stopped or did not answer within the timeout (it is then stopped, and the next
   * batch on its slot starts another).
   */
  readonly sign: (session: Uint8Array, items: ReadonlyArray<SignItem>) => Effect.Effect<ReadonlyArray<SignOutcome>, string>
}

/** A batch posted to a thread and not answered yet. */
interface Posted {
  readonly resume: (answer: Effect.Effect<Answer, string>) => void
  readonly timer: ReturnType<typeof setTimeout>
}

/** A started thread and its batches not answered yet, oldest first: a thread answers in order. */
interface Thread {
  readonly worker: Worker
  readonly posted: Array<Posted>
}

/** A place for a thread: empty until one is started, and again once it stopped or was given up. */
interface Slot {
  thread: Thread | undefined
  /** Batches given to the slot and not finished. */
  load: number
  /** Held while the slot's thread starts, so that two batches never start two. */
  readonly starting: Effect.Semaphore
}

/**
 * `size` threads, started now (an addon that does not load in a thread fails here, at start,
 * not at the first signature); `sign` waits while every thread holds PIPELINE_DEPTH batches.
 * The scope's close waits for the batches under way and stops every thread.
 */
export const makeSigningThreads = (options: {
  readonly data: SigningThreadData
  readonly size: number
  /** How long a batch may take, from its post, before its thread is given up. */
  readonly timeout: Duration.DurationInput
  /** How long a thread may take to say it is ready (loading the module and logging in) before it is given up. */
  readonly startTimeout: Duration.DurationInput
  readonly spawn?: ((data: SigningThreadData) => Worker) | undefined
}): Effect.Effect<SigningThreads, string, Scope.Scope> =>
  Effect.gen(function*() {
    const spawn = options.spawn ?? spawnSigningThread
    const timeoutMillis = Duration.toMillis(options.timeout)
    const startMillis = Duration.toMillis(options.startTimeout)
    const slots: ReadonlyArray<Slot> = yield* Effect.forEach(
      Array.from({ length: options.size }),
      () => Effect.map(Effect.makeSemaphore(1), (starting): Slot => ({ thread: undefined, load: 0, starting }))
    )
    const permits = yield* Effect.makeSemaphore(options.size * PIPELINE_DEPTH)

    const stop = (worker: Worker) => Effect.promise(() => worker.terminate()).pipe(Effect.timeout(STOP_WAIT), Effect.ignore)

    /** Fails the thread's batches not answered yet and empties its slot; the thread stops or has stopped. */
    const giveUp = (slot: Slot, thread: Thread, reason: string) => {
      if (slot.thread === thread) slot.thread = undefined
      for (const p of thread.posted.splice(0)) {
        clearTimeout(p.timer)
        p.resume(Effect.fail(reason))
      }
    }

    /** A thread's answers go to its batches in order; its error or exit fails those not answered. */
    const listen = (slot: Slot, thread: Thread) => {
      thread.worker.on("message", (answer: Answer) => {
        const p = thread.posted.shift()
        if (p === undefined) return
        clearTimeout(p.timer)
        p.resume(Effect.succeed(answer))
      })
      thread.worker.on("error", (e) => giveUp(slot, thread, `the signing thread failed: ${messageOf(e)}`))
      thread.worker.on("exit", (code) => giveUp(slot, thread, `the signing thread stopped (exit code ${code})`))
    }

    /** The slot's thread, started (and awaited until it says it is ready) when it has none that runs. */
    const running = (slot: Slot): Effect.Effect<Thread, string> =>
      slot.starting.withPermits(1)(Effect.suspend(() => {
        if (slot.thread !== undefined && slot.thread.worker.threadId !== -1) return Effect.succeed(slot.thread)
        const worker = spawn(options.data)
        // A thread whose start failed keeps no other listener (firstMessage's are off, listen's never
        // added): an error it throws must not become the process's; the exit that follows is what counts.
        worker.on("error", () => {})
        return firstMessage(worker, startMillis).pipe(
          Effect.filterOrFail((m) => m === "ready", () => "its first message was not \"ready\""),
          Effect.mapError((reason) => `cannot start a PKCS#11 signing thread: ${reason}`),
          Effect.tapError(() => stop(worker)),
          Effect.map(() => {
            const thread: Thread = { worker, posted: [] }
            listen(slot, thread)
            slot.thread = thread
            return thread
          })
        )
      }))

    /** Posts the batch to the thread; its answer, or the failure that ends the thread. */
    const post = (slot: Slot, thread: Thread, session: Uint8Array, items: ReadonlyArray<SignItem>) =>
      Effect.async<Answer, string>((resume) => {
        if (thread.worker.threadId === -1) return resume(Effect.fail("the signing thread has stopped"))
        // The timer is node's: an Effect timeout forks a fiber per batch, which cost more here
        // (~60 µs) than SoftHSM's signature. The batches' failure stops the thread (sign).
        const timer = setTimeout(() => giveUp(slot, thread, `no answer within ${timeoutMillis} ms`), timeoutMillis)
        // in the list before the post: a thread that stops at the post fails it
        thread.posted.push({ resume, timer })
        const { batch, transfer } = batchOf(session, items)
        thread.worker.postMessage(batch, [transfer])
      })

    /** The slot with the fewest batches, given one more until `use` ends. */
    const onSlot = <A>(use: (slot: Slot) => Effect.Effect<A, string>) =>
      permits.withPermits(1)(Effect.suspend(() => {
        const slot = slots.reduce((least, s) => (s.load < least.load ? s : least))
        slot.load++
        return Effect.ensuring(use(slot), Effect.sync(() => slot.load--))
      }))

    yield* Effect.addFinalizer(() =>
      permits.withPermits(options.size * PIPELINE_DEPTH)(
        Effect.forEach(slots, (slot) => (slot.thread === undefined ? Effect.void : stop(slot.thread.worker)), { discard: true })
      )
    )
    yield* Effect.forEach(slots, running, { concurrency: "unbounded", discard: true })

    const sign = (session: Uint8Array, items: ReadonlyArray<SignItem>) =>
      onSlot((slot) =>
        Effect.flatMap(running(slot), (thread) =>
          post(slot, thread, session, items).pipe(
            // the batch's session is free only once its thread has stopped (a reconnect may finalize the module)
            Effect.tapError(() => stop(thread.worker))
          )).pipe(Effect.map((answer) => outcomesOf(items.length, answer)))
      )

    return { sign }
  })
