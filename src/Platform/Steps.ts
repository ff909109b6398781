/**
 * One program, three drivers. A program written as a generator over `Step`s runs
 * as an Effect when its steps are Effects (`runEffect`: Effect.gen drives it, and
 * each `yield* step` waits as usual); synchronously when its steps are values
 * computed already (`done`, `runNow`: the generator never yields, so it finishes
 * in its first `next()`); and with callbacks when its steps wait for one
 * (`waiting`, `runThen`: each step resumes the generator from a driver's
 * callback, with no fiber). The group commit of attests is one such program: on
 * SQLite it runs now, in the event loop's turn, on the connection's synchronous
 * API (SqliteNow); on Postgres with callbacks on a pool client (PgDirect); and
 * when neither can take it, in a fiber through @effect/sql (Attestor). Its
 * logic is written once.
 */
import { Effect, Either } from "effect"

/** A step: an Effect (whose iterator yields it), or a value already computed (`done`). */
export type Step<A> = { readonly [Symbol.iterator]: () => Iterator<unknown, A, any> }

/** A program over steps, returning A. */
export type Program<A> = Generator<unknown, A, any>

/** A value as a step that yields nothing: `yield* done(a)` is `a`, at once. */
export const done = <A>(value: A): Step<A> => ({
  [Symbol.iterator]: () => ({ next: () => ({ done: true, value }) })
})

/** The result of a program whose steps are all `done`: it runs to its end now. */
export const runNow = <A>(program: Program<A>): A => {
  const first = program.next()
  if (first.done !== true) throw new Error("a program run now yielded: one of its steps is not a computed value")
  return first.value
}

/**
 * A program whose steps are Effects, as an Effect. Its steps' errors and
 * requirements are not in the program's type: the caller states them (`E`), and
 * steps must require nothing the caller's context does not hold.
 */
export const runEffect = <A, E = never>(program: () => Program<A>): Effect.Effect<A, E> =>
  Effect.gen(program as () => Generator<never, A, any>)

/** What a `waiting` step yields to `runThen`: how to start it. */
class Waiting {
  constructor(readonly start: (resume: (outcome: Either.Either<unknown, unknown>) => void) => void) {}
}

/**
 * A step whose iterator is `gen(...args)`, for a generator function written once at
 * module level. Steps are built this way rather than as an object with a generator
 * method (`{ *[Symbol.iterator]() { … } }`) or a generator function written inside
 * another function. A generator function made per call kept what it closed over (a
 * group's requests, through its callback) alive through every scavenge until the next
 * full collection, and promoted: measured, and reproduced with a bare node server. The
 * likely reason: V8 gives each generator function object a map of its own when it is
 * first called, in the old generation and pointing back at the function (README,
 * Performance: "Generators made per call"; test/Structure/generators.test.ts).
 */
export const stepOf = <Args extends ReadonlyArray<unknown>, A>(
  gen: (...args: Args) => Iterator<unknown, A, any>,
  ...args: Args
): Step<A> => ({ [Symbol.iterator]: () => gen(...args) })

function* waitFor(start: Waiting["start"]): Generator<unknown, unknown, unknown> {
  return yield new Waiting(start)
}

/**
 * A step that waits for a callback: `start` begins it and calls `resume` once,
 * with its value (right) or its error (left). Only `runThen` drives it.
 */
export const waiting = <A>(start: (resume: (outcome: Either.Either<A, unknown>) => void) => void): Step<A> =>
  stepOf(waitFor, start as Waiting["start"]) as Step<A>

/**
 * Runs a program whose steps are `waiting` (or `done`) and calls `k` once with
 * its result or its error: a step's error is thrown into the program at its
 * `yield*`, and a throw the program does not catch ends it. A step that resumes
 * at once continues in the same loop, not deeper in the stack.
 */
export const runThen = <A>(program: Program<A>, k: (outcome: Either.Either<A, unknown>) => void): void => {
  let input: Either.Either<unknown, unknown> = Either.right(undefined)
  const advance = (): void => {
    for (;;) {
      let r: IteratorResult<unknown, A>
      try {
        r = Either.isRight(input) ? program.next(input.right) : program.throw(input.left)
      } catch (e) {
        return k(Either.left(e))
      }
      if (r.done === true) return k(Either.right(r.value))
      const step = r.value
      if (!(step instanceof Waiting)) {
        input = Either.left(new Error("a program run with callbacks yielded a step that is not `waiting`"))
        continue
      }
      let inLoop = true
      let resumedInLoop = false
      let resumed = false
      const resume = (outcome: Either.Either<unknown, unknown>) => {
        if (resumed) return
        resumed = true
        input = outcome
        if (inLoop) resumedInLoop = true
        else advance()
      }
      try {
        step.start(resume)
      } catch (e) {
        resume(Either.left(e))
      }
      inLoop = false
      if (!resumedInLoop) return
    }
  }
  advance()
}
