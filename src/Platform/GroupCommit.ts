/**
 * Group commit: requests from many fibers are queued and handled together, so
 * concurrent attests share one transaction instead of one each.
 */
import { Deferred, Effect, Exit, Queue, type Scope } from "effect"

export const makeGroupCommit = <I, O, E>(options: {
  readonly process: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  readonly workers: number
}): Effect.Effect<(item: I) => Effect.Effect<O, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<readonly [I, Deferred.Deferred<O, E>]>()
    yield* Effect.addFinalizer(() => Queue.shutdown(queue))

    const worker = Effect.gen(function*() {
      const chunk = yield* Queue.takeBetween(queue, 1, options.maxBatch)
      const entries = Array.from(chunk)
      const exit = yield* Effect.exit(options.process(entries.map(([item]) => item)))
      if (Exit.isSuccess(exit)) {
        entries.forEach(([, deferred], i) => Deferred.unsafeDone(deferred, Exit.succeed(exit.value[i]!)))
      } else {
        for (const [, deferred] of entries) Deferred.unsafeDone(deferred, exit as Exit.Exit<never, E>)
      }
    }).pipe(Effect.forever)

    for (let i = 0; i < options.workers; i++) yield* Effect.forkScoped(worker)

    return (item: I) =>
      Effect.flatMap(Deferred.make<O, E>(), (deferred) =>
        Effect.zipRight(Queue.offer(queue, [item, deferred] as const), Deferred.await(deferred)))
  })
