/**
 * Group commit: requests from many fibers are queued and handled together, so
 * concurrent attests share one transaction instead of one each, and concurrent
 * verifies one SELECT (AttestationRepo.findByHash).
 *
 * The first request of a group schedules its batch for the next turn of the
 * event loop (setImmediate, not the Effect clock, so batching never depends on
 * TestClock); the requests already read from sockets by then join it. At most
 * `workers` batches run at once; requests that arrive meanwhile form the next.
 * A request waits through `Effect.async` on a plain array: no Queue, no
 * Deferred and no worker fiber per request (the hot paths pay for every
 * allocation; README, Performance).
 *
 * With `processNow`, a batch is first offered to it, in the turn that flushes
 * it: a batch it answers needs no fiber at all (the attests' group on SQLite,
 * Attestor). When it answers UNDECIDED, or throws, the batch runs as `process`.
 * With `processThen`, a batch is run with callbacks instead of a fiber (the
 * attests' group on Postgres); when it fails, the batch runs as `process`,
 * which decides each item's outcome.
 */
import { Cause, Effect, Either, Exit, Fiber, FiberId, Runtime, type Scope } from "effect"
import { UNDECIDED, type Undecided } from "../Domain/Undecided.js"

type Resume<O, E> = (exit: Exit.Exit<O, E>) => void

/**
 * Submits an item and waits for its outcome in its group. `enqueue` does the same
 * without a fiber: `resume` is called with the outcome (an interruption when the
 * group commit closes first), for callers that answer from a node callback. It is
 * called inside the group's batch, before the group's other items are resumed:
 * it must not throw.
 */
export type GroupCommit<I, O, E> = ((item: I) => Effect.Effect<O, E>) & {
  readonly enqueue: (item: I, resume: Resume<O, E>) => void
}

export const makeGroupCommit = <I, O, E>(options: {
  readonly process: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  readonly maxBatch: number
  readonly workers: number
  /**
   * The batch's outcomes now, or UNDECIDED (having changed nothing) when it cannot
   * answer without waiting. A throw must have changed nothing either: the batch is
   * then run by `process`, which decides its outcome.
   */
  readonly processNow?: ((items: ReadonlyArray<I>) => ReadonlyArray<O> | Undecided) | undefined
  /**
   * Runs the batch with callbacks: `k` gets its outcomes, or an error, once. An
   * error must leave nothing half done (a transaction rolled back): the batch is
   * then run by `process`.
   */
  readonly processThen?: ((items: ReadonlyArray<I>, k: (outcome: Either.Either<ReadonlyArray<O>, unknown>) => void) => void) | undefined
}): Effect.Effect<GroupCommit<I, O, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const waiting: Array<readonly [I, Resume<O, E>]> = []
    const running = new Set<Fiber.RuntimeFiber<void>>()
    /** Batches under way with callbacks (processThen), and who waits for them to end (closing). */
    let runningThen = 0
    const onThenIdle: Array<() => void> = []
    let scheduled = false
    let closed = false

    /** Each entry of a batch answered with its outcome, in order. */
    const succeedAll = (entries: ReadonlyArray<readonly [I, Resume<O, E>]>, outcomes: ReadonlyArray<O>) =>
      entries.forEach(([, resume], i) => resume(Exit.succeed(outcomes[i]!)))

    /** One batch: answered together, or, when it failed, each item alone with its own outcome. */
    const runBatch = (entries: ReadonlyArray<readonly [I, Resume<O, E>]>) =>
      Effect.gen(function*() {
        const exit = yield* Effect.exit(options.process(entries.map(([item]) => item)))
        if (Exit.isSuccess(exit)) {
          succeedAll(entries, exit.value)
        } else if (entries.length === 1 || Cause.isInterruptedOnly(exit.cause)) {
          for (const [, resume] of entries) resume(exit as Exit.Exit<never, E>)
        } else {
          // One item must not fail the others: the batch rolled back, so each item
          // is retried alone and answered with its own outcome.
          for (const [item, resume] of entries) {
            const own = yield* Effect.exit(options.process([item]))
            resume(Exit.map(own, (out) => out[0]!))
          }
        }
      })

    const answerNow = (entries: ReadonlyArray<readonly [I, Resume<O, E>]>): ReadonlyArray<O> | Undecided => {
      if (options.processNow === undefined) return UNDECIDED
      try {
        return options.processNow(entries.map(([item]) => item))
      } catch (e) {
        runFork(Effect.logWarning("a group could not run now; it runs in a fiber", Cause.die(e)))
        return UNDECIDED
      }
    }

    const flushSoon = () => {
      if (scheduled || closed || waiting.length === 0 || running.size + runningThen >= options.workers) return
      scheduled = true
      setImmediate(flush)
    }
    const runInFiber = (entries: ReadonlyArray<readonly [I, Resume<O, E>]>) => {
      const fiber = runFork(runBatch(entries))
      running.add(fiber)
      fiber.addObserver(() => {
        running.delete(fiber)
        flushSoon()
      })
    }
    const runThen = (entries: ReadonlyArray<readonly [I, Resume<O, E>]>, processThen: NonNullable<typeof options.processThen>) => {
      runningThen++
      let ended = false
      const end = (outcome: Either.Either<ReadonlyArray<O>, unknown>) => {
        if (ended) return
        ended = true
        if (Either.isRight(outcome)) {
          succeedAll(entries, outcome.right)
        } else {
          runFork(Effect.logWarning("a group run with callbacks failed; it runs in a fiber", Cause.die(outcome.left)))
          runInFiber(entries)
        }
        runningThen--
        if (runningThen === 0) for (const idle of onThenIdle.splice(0)) idle()
        flushSoon()
      }
      try {
        processThen(entries.map(([item]) => item), end)
      } catch (e) {
        end(Either.left(e))
      }
    }
    const flush = () => {
      scheduled = false
      if (closed) return
      const entries = waiting.splice(0, options.maxBatch)
      const now = answerNow(entries)
      if (now !== UNDECIDED) {
        succeedAll(entries, now)
        return flushSoon()
      }
      if (options.processThen !== undefined) runThen(entries, options.processThen)
      else runInFiber(entries)
      flushSoon()
    }

    // Closing waits for the batches under way (they may hold a transaction) and
    // interrupts the requests that have not joined one. A batch run with callbacks
    // that fails while closing runs in a fiber: the fibers are awaited after them.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        for (const [, resume] of waiting.splice(0)) resume(Exit.interrupt(FiberId.none))
        return Effect.async<void>((resume) => {
          if (runningThen === 0) resume(Effect.void)
          else onThenIdle.push(() => resume(Effect.void))
        })
      }).pipe(Effect.zipRight(Effect.suspend(() => Fiber.awaitAll([...running]))))
    )

    const enqueue = (item: I, resume: Resume<O, E>): void => {
      if (closed) return resume(Exit.interrupt(FiberId.none))
      waiting.push([item, resume])
      flushSoon()
    }
    return Object.assign((item: I) => Effect.async<O, E>((resume) => enqueue(item, resume)), { enqueue })
  })
