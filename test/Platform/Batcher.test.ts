/**
 * Group commit (src/Platform/Batcher.ts): items submitted in one turn of the event
 * loop are handled as one batch; a failed batch is retried item by item, so one bad
 * item fails only itself; an item given up before its batch starts is not in it;
 * closing the scope answers a batch under way and interrupts what still waits. TestClock holds nothing: the batch forms on the next real turn.
 */
import { it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import { describe, expect } from "vitest"
import { makeBatcher } from "../../src/Platform/Batcher.js"

describe("makeBatcher", () => {
  it.effect("handles what is submitted in one turn as one batch, answers in order", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) => Effect.sync(() => (batches.push(items), items.map((n) => n * 10))),
        maxBatch: 64,
        workers: 1
      })
      const answers = yield* Effect.all(Array.from({ length: 20 }, (_, i) => submit(i)), { concurrency: "unbounded" })
      expect(answers).toEqual(Array.from({ length: 20 }, (_, i) => i * 10))
      expect(batches.length).toBeLessThanOrEqual(2)
      expect(batches.flat().sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i))
    }).pipe(Effect.scoped))

  it.effect("splits a queue longer than maxBatch", () =>
    Effect.gen(function*() {
      const sizes: Array<number> = []
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) => Effect.sync(() => (sizes.push(items.length), items)),
        maxBatch: 8,
        workers: 1
      })
      yield* Effect.all(Array.from({ length: 30 }, (_, i) => submit(i)), { concurrency: "unbounded" })
      expect(Math.max(...sizes)).toBeLessThanOrEqual(8)
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(30)
    }).pipe(Effect.scoped))

  it.effect("with evenShares, what waits is shared among the free workers, which run at once", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      let running = 0
      let mostAtOnce = 0
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) =>
          Effect.async<ReadonlyArray<number>>((resume) => {
            batches.push(items)
            mostAtOnce = Math.max(mostAtOnce, ++running)
            const t = setTimeout(() => (running--, resume(Effect.succeed(items))), 20)
            return Effect.sync(() => clearTimeout(t))
          }),
        maxBatch: 64,
        workers: 2,
        evenShares: true
      })
      const answers = yield* Effect.all(Array.from({ length: 20 }, (_, i) => submit(i)), { concurrency: "unbounded" })
      expect(answers).toEqual(Array.from({ length: 20 }, (_, i) => i))
      // two batches of ten, under way together; without evenShares the first worker took 19
      expect(batches.map((b) => b.length)).toEqual([10, 10])
      expect(mostAtOnce).toBe(2)
    }).pipe(Effect.scoped))

  it.effect("with evenShares, a worker alone takes all that waits, up to maxBatch", () =>
    Effect.gen(function*() {
      const sizes: Array<number> = []
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) => Effect.sync(() => (sizes.push(items.length), items)),
        maxBatch: 8,
        workers: 1,
        evenShares: true
      })
      yield* Effect.all(Array.from({ length: 20 }, (_, i) => submit(i)), { concurrency: "unbounded" })
      expect(sizes).toEqual([8, 8, 4])
    }).pipe(Effect.scoped))

  it.effect("a failed batch is retried item by item: only the bad item fails", () =>
    Effect.gen(function*() {
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) => items.includes(13) ? Effect.fail(`bad ${items.length}`) : Effect.succeed(items),
        maxBatch: 64,
        workers: 1
      })
      const exits = yield* Effect.all([10, 11, 13, 14].map((n) => Effect.exit(submit(n))), { concurrency: "unbounded" })
      expect(exits.map((e) => (Exit.isSuccess(e) ? e.value : "failed"))).toEqual([10, 11, "failed", 14])
      expect(Exit.isFailure(exits[2]!) && JSON.stringify(exits[2].cause)).toContain("bad 1")
    }).pipe(Effect.scoped))

  it.effect("an item whose fiber is interrupted before its batch starts is left out of it", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) => Effect.sync(() => (batches.push(items), items)),
        maxBatch: 64,
        workers: 1
      })
      const kept = yield* Effect.fork(submit(1))
      const dropped = yield* Effect.fork(submit(2))
      const also = yield* Effect.fork(submit(3))
      yield* Effect.yieldNow()
      // still this turn of the event loop: the batch has not started
      yield* Fiber.interrupt(dropped)
      expect(yield* Fiber.join(kept)).toBe(1)
      expect(yield* Fiber.join(also)).toBe(3)
      expect(batches).toEqual([[1, 3]])
    }).pipe(Effect.scoped))

  it.effect("closing finishes the batch under way and interrupts what still waits", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      let finished = 0
      const submit = yield* makeBatcher({
        process: (items: ReadonlyArray<number>) =>
          Effect.async<ReadonlyArray<number>>((resume) => {
            const t = setTimeout(() => (finished += items.length, resume(Effect.succeed(items))), 50)
            return Effect.sync(() => clearTimeout(t))
          }),
        maxBatch: 1,
        workers: 1
      }).pipe(Scope.extend(scope))
      const first = yield* Effect.fork(submit(1))
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
      const second = yield* Effect.fork(submit(2))
      yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
      yield* Scope.close(scope, Exit.void)
      expect(yield* Fiber.join(first)).toBe(1)
      expect(finished).toBe(1)
      expect(Exit.isInterrupted(yield* Fiber.await(second))).toBe(true)
    }))
})
