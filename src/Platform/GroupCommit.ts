/**
 * Group commit: requests from many fibers are queued and handled together, so
 * concurrent attests share one transaction instead of one each, and concurrent
 * verifies one SELECT (AttestationRepo.findByHash).
 */
import { Cause, Deferred, Effect, Exit, Queue, type Scope } from "effect"

/** Waits for setImmediate, not the Effect clock, so batching never depends on TestClock. */
const nextMacrotask = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

export const makeGroupCommit = <I, O, E>(options: {
  readonly process: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  readonly workers: number
}): Effect.Effect<(item: I) => Effect.Effect<O, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<readonly [I, Deferred.Deferred<O, E>]>()
    yield* Effect.addFinalizer(() => Queue.shutdown(queue))

    const worker = Effect.gen(function*() {
      const first = yield* Queue.take(queue)
      // One turn of the event loop lets requests already read from sockets join this batch.
      yield* nextMacrotask
      const rest = yield* Queue.takeUpTo(queue, options.maxBatch - 1)
      const entries = [first, ...rest]
      const exit = yield* Effect.exit(options.process(entries.map(([item]) => item)))
      if (Exit.isSuccess(exit)) {
        entries.forEach(([, deferred], i) => Deferred.unsafeDone(deferred, Exit.succeed(exit.value[i]!)))
      } else if (entries.length === 1 || Cause.isInterruptedOnly(exit.cause)) {
        for (const [, deferred] of entries) Deferred.unsafeDone(deferred, exit as Exit.Exit<never, E>)
      } else {
        // One item must not fail the others: the batch rolled back, so each item
        // is retried alone and answered with its own outcome.
        for (const [item, deferred] of entries) {
          const own = yield* Effect.exit(options.process([item]))
          Deferred.unsafeDone(deferred, Exit.map(own, (out) => out[0]!))
        }
      }
    }).pipe(Effect.forever)

    for (let i = 0; i < options.workers; i++) yield* Effect.forkScoped(worker)

    return (item: I) =>
      Effect.flatMap(Deferred.make<O, E>(), (deferred) =>
        Effect.zipRight(Queue.offer(queue, [item, deferred] as const), Deferred.await(deferred)))
  })
