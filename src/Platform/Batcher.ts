/**
 * Group commit: items submitted by many fibers are handled together, so concurrent
 * attests share one transaction (and one fsync on SQLite) instead of one each.
 *
 * Items wait in a list; a batch starts on the turn of the event loop after the one its
 * first item came in (so the requests node reads from other sockets in this turn join: a
 * fiber woken by the first one would otherwise run before node reads the second), as a
 * fiber of its own, and takes up to `maxBatch` of what waits. At most `workers` batches run
 * at once; while they run, the next ones form. The turn is setImmediate, not the Effect
 * clock, so TestClock never holds a batch.
 *
 * A submitter waits in `Effect.async`, resumed with its item's outcome: no Deferred or
 * queue per item, which cost more than a signature of a PKCS#11 batch.
 *
 * A batch that fails is retried item by item, so one bad item fails only its own
 * request. A batch under way finishes before the scope closes (it may hold a
 * transaction); items still waiting then are interrupted.
 */
import { Cause, Effect, Exit, Fiber, FiberId, Runtime, type Scope } from "effect"

interface Entry<I, O, E> {
  readonly item: I
  readonly resume: (outcome: Exit.Exit<O, E>) => void
}

export const makeBatcher = <I, O, E>(options: {
  readonly process: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  /** How many batches may run at once. */
  readonly workers: number
  /**
   * A batch takes only its share of what is waiting: the waiting items divided among the
   * batches that may still start, so that they run on one each at once rather than one
   * after the other (signing threads: a batch each). Else it takes all, up to maxBatch (one
   * transaction with as many as wait).
   */
  readonly evenShares?: boolean
}): Effect.Effect<(item: I) => Effect.Effect<O, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const waiting: Array<Entry<I, O, E>> = []
    const running = new Set<Fiber.RuntimeFiber<void>>()
    /** Batches that may still start. */
    const free = () => options.workers - running.size
    let turnAsked = false
    let closed = false

    const share = () =>
      options.evenShares === true ? Math.min(options.maxBatch, Math.ceil(waiting.length / free())) : options.maxBatch

    const runBatch = (entries: ReadonlyArray<Entry<I, O, E>>) =>
      Effect.gen(function*() {
        const exit = yield* Effect.exit(options.process(entries.map((e) => e.item)))
        if (Exit.isSuccess(exit)) {
          entries.forEach((e, i) => e.resume(Exit.succeed(exit.value[i]!)))
        } else if (entries.length === 1 || Cause.isInterruptedOnly(exit.cause)) {
          for (const e of entries) e.resume(Exit.failCause(exit.cause))
        } else {
          // The batch rolled back: each item alone, answered with its own outcome.
          for (const e of entries) {
            const own = yield* Effect.exit(options.process([e.item]))
            e.resume(Exit.map(own, (out) => out[0]!))
          }
        }
      })

    /** Starts what may start of what waits: on the next turn, so that this turn's items join. */
    const askTurn = () => {
      if (turnAsked || closed || free() === 0 || waiting.length === 0) return
      turnAsked = true
      setImmediate(startBatches)
    }

    const startBatches = () => {
      turnAsked = false
      while (!closed && free() > 0 && waiting.length > 0) {
        const entries = waiting.splice(0, share())
        const fiber = runFork(Effect.uninterruptible(runBatch(entries)))
        running.add(fiber)
        fiber.addObserver(() => {
          running.delete(fiber)
          askTurn()
        })
      }
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        for (const e of waiting.splice(0)) e.resume(Exit.interrupt(FiberId.none))
        return Fiber.awaitAll([...running])
      })
    )

    return (item: I) =>
      Effect.async<O, E>((resume) => {
        const entry: Entry<I, O, E> = { item, resume }
        if (closed) return resume(Exit.interrupt(FiberId.none))
        waiting.push(entry)
        askTurn()
        return Effect.sync(() => {
          const at = waiting.indexOf(entry)
          if (at >= 0) waiting.splice(at, 1)
        })
      })
  })
