/**
 * Group commit: items submitted by many fibers are handled together, so concurrent
 * attests share one transaction (and one fsync on SQLite) instead of one each.
 *
 * A queue and `workers` fibers: a worker takes the first waiting item, waits for the
 * next turn of the event loop (so the requests node reads from other sockets in this
 * turn join: a fiber woken by the first one would otherwise run before node reads the
 * second), then takes up to `maxBatch` of what is waiting as one batch. While a batch
 * runs, the next one forms. The turn is setImmediate, not the Effect clock, so
 * TestClock never holds a batch.
 *
 * A batch that fails is retried item by item, so one bad item fails only its own
 * request. A batch under way finishes before the scope closes (it may hold a
 * transaction); items still waiting then are interrupted.
 */
import { Cause, Deferred, Effect, Exit, Queue, type Scope } from "effect"

/** The next turn of the event loop, after the I/O callbacks of this one. */
const nextTurn = Effect.async<void>((resume) => {
  const timer = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(timer))
})

interface Entry<I, O, E> {
  readonly item: I
  readonly done: Deferred.Deferred<O, E>
}

export const makeBatcher = <I, O, E>(options: {
  readonly process: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  readonly workers: number
  /**
   * A worker takes only its share of what is waiting: the waiting items divided among the
   * workers not running a batch (itself included), so that they work on one each at once
   * rather than one after the other (signing threads: a batch each). Else it takes all, up to
   * maxBatch (one transaction with as many as wait).
   */
  readonly evenShares?: boolean
}): Effect.Effect<(item: I) => Effect.Effect<O, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<Entry<I, O, E>>()
    /** Workers not running a batch: waiting for an item, or gathering one. */
    let free = options.workers
    const share = (waiting: number) =>
      options.evenShares === true ? Math.min(options.maxBatch - 1, Math.ceil(waiting / free)) : options.maxBatch - 1

    const runBatch = (entries: ReadonlyArray<Entry<I, O, E>>) =>
      Effect.gen(function*() {
        const exit = yield* Effect.exit(options.process(entries.map((e) => e.item)))
        if (Exit.isSuccess(exit)) {
          yield* Effect.forEach(entries, (e, i) => Deferred.succeed(e.done, exit.value[i]!), { discard: true })
        } else if (entries.length === 1 || Cause.isInterruptedOnly(exit.cause)) {
          yield* Effect.forEach(entries, (e) => Deferred.failCause(e.done, exit.cause), { discard: true })
        } else {
          // The batch rolled back: each item alone, answered with its own outcome.
          for (const e of entries) {
            const own = yield* Effect.exit(options.process([e.item]))
            yield* Deferred.done(e.done, Exit.map(own, (out) => out[0]!))
          }
        }
      })

    // Waiting for work can be interrupted; a batch once taken is answered.
    const worker = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const first = yield* restore(Queue.take(queue))
        yield* nextTurn
        const rest = yield* Queue.takeUpTo(queue, share(yield* Queue.size(queue)))
        free--
        yield* Effect.ensuring(runBatch([first, ...rest]), Effect.sync(() => free++))
      })
    ).pipe(Effect.forever)

    yield* Effect.addFinalizer(() =>
      Effect.flatMap(Queue.takeAll(queue), (left) => Effect.forEach(left, (e) => Deferred.interrupt(e.done), { discard: true }))
    )
    yield* Effect.forkScoped(Effect.all(Array.from({ length: options.workers }, () => worker), { concurrency: "unbounded" }))

    return (item: I) =>
      Effect.flatMap(Deferred.make<O, E>(), (done) => Effect.zipRight(Queue.offer(queue, { item, done }), Deferred.await(done)))
  })
