/**
 * Waits on the outside world (a database that does not answer, a lease that must be
 * renewed) in real time: a fiber's Clock may be a TestClock, which must neither skip
 * these waits nor be kept from its own by them.
 */
import { Effect } from "effect"

/** A pause of `ms` of real time (setTimeout), whatever Clock the fiber has. */
export const sleepRealTime = (ms: number): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

/**
 * `effect`, unless `other` completes first: then `effect` is abandoned, interrupted in the
 * background and not awaited (interrupting a query in flight sends a cancel through the
 * same unreachable database, which must not delay the answer). Both sides can be
 * interrupted even in an uninterruptible region (a finalizer, the platform's request
 * fiber), or the race would wait for its loser.
 */
export const abandonedFor = <A, E, R, A2, E2, R2>(
  effect: Effect.Effect<A, E, R>,
  other: Effect.Effect<A2, E2, R2>
): Effect.Effect<A | A2, E | E2, R | R2> => Effect.raceFirst(Effect.interruptible(Effect.disconnect(effect)), Effect.interruptible(other))

/** `effect`, or `onTimeout` once `ms` of real time have passed (abandonedFor). */
export const timeoutRealTime = <A, E, R, A2, E2, R2>(
  effect: Effect.Effect<A, E, R>,
  ms: number,
  onTimeout: Effect.Effect<A2, E2, R2>
): Effect.Effect<A | A2, E | E2, R | R2> => abandonedFor(effect, Effect.zipRight(sleepRealTime(ms), onTimeout))
