/**
 * One program, two drivers. A program written as a generator over `Step`s runs
 * as an Effect when its steps are Effects (`runEffect`: Effect.gen drives it, and
 * each `yield* step` waits as usual), and synchronously when its steps are values
 * computed already (`done`, `runNow`: the generator never yields, so it finishes
 * in its first `next()`). The group commit of attests is one such program: on
 * SQLite it runs now, in the event loop's turn, on the connection's synchronous
 * API (SqliteNow), and elsewhere, or when the connection is busy, in a fiber
 * through @effect/sql (Attestor). Its logic is written once.
 */
import { Effect } from "effect"

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
