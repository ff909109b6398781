/** Group commit isolates failures: one failing item is answered alone, the rest commit. */
import { Deferred, Effect, Either, Exit, Fiber, Scope } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { UNDECIDED, type Undecided } from "../../src/Domain/Undecided.js"
import { makeGroupCommit } from "../../src/Platform/GroupCommit.js"

describe("group commit", () => {
  it("property: a batch with failing items answers each item with its own outcome", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.boolean(), { minLength: 1, maxLength: 40 }), async (bads) => {
        const committed: Array<number> = []
        const results = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
          const submit = yield* makeGroupCommit<{ n: number; bad: boolean }, number, string>({
            // like a transaction: all or nothing
            process: (items) =>
              items.some((i) => i.bad)
                ? Effect.fail("bad item")
                : Effect.sync(() => (committed.push(...items.map((i) => i.n)), items.map((i) => i.n * 2))),
            maxBatch: 64,
            workers: 1
          })
          return yield* Effect.all(bads.map((bad, n) => Effect.either(submit({ n, bad }))), { concurrency: "unbounded" })
        })))
        results.forEach((r, n) => {
          if (bads[n]) expect(r._tag).toBe("Left")
          else {
            expect(r._tag).toBe("Right")
            if (r._tag === "Right") expect(r.right).toBe(n * 2)
          }
        })
        expect(committed.sort((a, b) => a - b)).toEqual(bads.flatMap((b, n) => (b ? [] : [n])))
      }),
      { numRuns: 50 }
    )
  })

  it("the requests of one turn form batches of at most maxBatch, and at most `workers` batches run at once", async () => {
    const batches: Array<number> = []
    let running = 0
    let most = 0
    const results = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const submit = yield* makeGroupCommit<number, number, never>({
        process: (items) =>
          Effect.gen(function*() {
            batches.push(items.length)
            most = Math.max(most, ++running)
            yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
            running--
            return items.map((n) => n + 1)
          }),
        maxBatch: 64,
        workers: 2
      })
      return yield* Effect.all(Array.from({ length: 150 }, (_, n) => submit(n)), { concurrency: "unbounded" })
    })))
    expect(results).toEqual(Array.from({ length: 150 }, (_, n) => n + 1))
    expect(batches).toEqual([64, 64, 22])
    expect(most).toBe(2)
  })

  it("enqueue: a callback gets its item's own outcome, in the same groups as the fibers' items; after closing, an interruption", async () => {
    const batches: Array<ReadonlyArray<number>> = []
    const result = await Effect.runPromise(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const group = yield* Scope.extend(makeGroupCommit<number, number, string>({
        process: (items) => {
          batches.push([...items])
          return items.includes(-1) ? Effect.fail("bad item") : Effect.succeed(items.map((n) => n * 2))
        },
        maxBatch: 64,
        workers: 1
      }), scope)
      const called: Array<Exit.Exit<number, string>> = []
      const three = new Promise<void>((resolve) => {
        const callback = (exit: Exit.Exit<number, string>) => {
          called.push(exit)
          if (called.length === 3) resolve()
        }
        for (const n of [1, -1, 2]) group.enqueue(n, callback)
      })
      const viaFiber = yield* group(3)
      yield* Effect.promise(() => three)
      yield* Scope.close(scope, Exit.void)
      const afterClose = yield* Effect.async<Exit.Exit<number, string>>((resume) => group.enqueue(4, (exit) => resume(Effect.succeed(exit))))
      return { called, viaFiber, afterClose }
    }))
    // one group of four; it failed, so each item was retried alone and answered with its own outcome
    expect(batches).toEqual([[1, -1, 2, 3], [1], [-1], [2], [3]])
    expect(result.called).toEqual([Exit.succeed(2), Exit.fail("bad item"), Exit.succeed(4)])
    expect(result.viaFiber).toBe(6)
    expect(Exit.isInterrupted(result.afterClose)).toBe(true)
  })

  it("closing waits for the batch under way and interrupts the requests that have not joined one", async () => {
    const events: Array<string> = []
    await Effect.runPromise(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const started = yield* Deferred.make<void>()
      const submit = yield* Scope.extend(makeGroupCommit<number, number, never>({
        process: (items) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Effect.promise(() => new Promise((r) => setTimeout(r, 50)))
            events.push(`committed ${items.join(",")}`)
            return items
          }),
        maxBatch: 64,
        workers: 1
      }), scope)
      const first = yield* Effect.fork(submit(1))
      yield* Deferred.await(started)
      const second = yield* Effect.fork(submit(2)) // waits: the one worker is busy
      yield* Effect.yieldNow()
      yield* Scope.close(scope, Exit.void)
      events.push("closed")
      expect(yield* Fiber.join(first)).toBe(1)
      expect(Exit.isInterrupted(yield* Fiber.await(second))).toBe(true)
      expect(Exit.isInterrupted(yield* Effect.exit(submit(3)))).toBe(true)
    }))
    expect(events).toEqual(["committed 1", "closed"])
  })

  type Then = (batch: ReadonlyArray<number>, k: (outcome: Either.Either<ReadonlyArray<number>, unknown>) => void) => void
  /**
   * Submits `items` at once to a group commit (batches of 4, one worker) over `paths` (processNow or
   * processThen) and a `process` that notes its batches and fails any batch holding 13.
   */
  const runOver = async (
    items: ReadonlyArray<number>,
    paths: { readonly processNow?: (batch: ReadonlyArray<number>) => ReadonlyArray<number> | Undecided; readonly processThen?: Then }
  ) => {
    const fiberBatches: Array<ReadonlyArray<number>> = []
    const results = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const submit = yield* makeGroupCommit<number, number, string>({
        process: (batch) =>
          batch.includes(13) ? Effect.fail("unlucky") : Effect.sync(() => (fiberBatches.push(batch), batch.map((n) => n * 10))),
        ...paths,
        maxBatch: 4,
        workers: 1
      })
      return yield* Effect.all(items.map((n) => Effect.either(submit(n))), { concurrency: "unbounded" })
    })))
    return { results, fiberBatches }
  }

  describe("processNow", () => {
    const run = (items: ReadonlyArray<number>, processNow: (batch: ReadonlyArray<number>) => ReadonlyArray<number> | Undecided) =>
      runOver(items, { processNow })

    it("answers a batch it can decide without a fiber: process never runs", async () => {
      const nowBatches: Array<ReadonlyArray<number>> = []
      const { fiberBatches, results } = await run([1, 2, 3, 4, 5], (batch) => (nowBatches.push(batch), batch.map((n) => n * 2)))
      expect(results).toEqual([1, 2, 3, 4, 5].map((n) => Either.right(n * 2)))
      expect(nowBatches).toEqual([[1, 2, 3, 4], [5]])
      expect(fiberBatches).toEqual([])
    })

    it("hands a batch it answers UNDECIDED, or throws on, to process, which decides each outcome", async () => {
      const { fiberBatches, results } = await run([1, 2, 3, 4, 5, 6, 13], (batch) => {
        if (batch.includes(1)) return UNDECIDED
        if (batch.includes(5)) throw new Error("busy")
        return batch.map((n) => n * 2)
      })
      // [1..4] UNDECIDED, [5, 6, 13] threw: process ran both, and split the failing one item by item
      expect(fiberBatches).toEqual([[1, 2, 3, 4], [5], [6]])
      expect(results).toEqual([...[1, 2, 3, 4, 5, 6].map((n) => Either.right(n * 10)), Either.left("unlucky")])
    })
  })

  describe("processThen", () => {
    const run = (items: ReadonlyArray<number>, processThen: Then) => runOver(items, { processThen })

    it("answers a batch from its callback, later or at once: process never runs", async () => {
      const thenBatches: Array<ReadonlyArray<number>> = []
      const { fiberBatches, results } = await run([1, 2, 3, 4, 5], (batch, k) => {
        thenBatches.push(batch)
        const answer = () => k(Either.right(batch.map((n) => n * 2)))
        if (batch.includes(1)) setTimeout(answer, 5)
        else answer()
      })
      expect(results).toEqual([1, 2, 3, 4, 5].map((n) => Either.right(n * 2)))
      expect(thenBatches).toEqual([[1, 2, 3, 4], [5]])
      expect(fiberBatches).toEqual([])
    })

    it("hands a batch whose callback reports an error, or that throws, to process, which decides each outcome", async () => {
      const { fiberBatches, results } = await run([1, 2, 3, 4, 5, 6, 13], (batch, k) => {
        if (batch.includes(1)) return void setTimeout(() => k(Either.left(new Error("connection lost"))), 1)
        throw new Error("no client")
      })
      // [1..4] failed later, [5, 6, 13] threw: process ran both, and split the failing one item by item
      expect(fiberBatches).toEqual([[1, 2, 3, 4], [5], [6]])
      expect(results).toEqual([...[1, 2, 3, 4, 5, 6].map((n) => Either.right(n * 10)), Either.left("unlucky")])
    })

    it("a callback called twice answers once", async () => {
      const { results } = await run([1, 2], (batch, k) => {
        k(Either.right(batch.map((n) => n * 2)))
        k(Either.right(batch.map((n) => n * 3)))
        k(Either.left(new Error("late")))
      })
      expect(results).toEqual([Either.right(2), Either.right(4)])
    })

    it("counts its batches among the `workers` under way, and closing waits for them", async () => {
      const events: Array<string> = []
      let underWay = 0
      let most = 0
      const pending: Array<() => void> = []
      await Effect.runPromise(Effect.gen(function*() {
        const scope = yield* Scope.make()
        const submit = yield* makeGroupCommit<number, number, string>({
          process: () => Effect.die("not this path"),
          processThen: (batch, k) => {
            most = Math.max(most, ++underWay)
            events.push(`start ${batch.join(",")}`)
            pending.push(() => (underWay--, events.push(`end ${batch.join(",")}`), k(Either.right(batch))))
          },
          maxBatch: 2,
          workers: 2
        }).pipe(Scope.extend(scope))
        const all = yield* Effect.fork(Effect.all([1, 2, 3, 4, 5].map((n) => submit(n)), { concurrency: "unbounded" }))
        while (pending.length < 2) yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
        // two batches under way, the third waits for one of them
        expect(events).toEqual(["start 1,2", "start 3,4"])
        pending.shift()!()
        while (pending.length < 2) yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
        expect(events).toEqual(["start 1,2", "start 3,4", "end 1,2", "start 5"])
        // closing waits for the two under way
        const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
        expect(closing.unsafePoll()).toBeNull()
        for (const end of pending.splice(0)) end()
        yield* Fiber.join(closing)
        expect(yield* Fiber.join(all)).toEqual([1, 2, 3, 4, 5])
      }))
      expect(most).toBe(2)
    })
  })
})
