/**
 * How a background loop (sealer, anchorer, OTS upgrader, webhook dispatcher, rate-limit
 * flush) lives through a database outage: it pauses and resumes by itself, and says so
 * twice, not once per attempt. The first attempt that fails because the database is out
 * of reach, or because conflicts outlasted their retries (under serializable isolation and
 * load), logs "paused" with which of the two it was; the next attempt that succeeds logs
 * "resumed" with how long it lasted; the failures in between are silent. Any other failure
 * is the loop's own to report.
 */
import { Cause, Effect, Option } from "effect"
import { transientDatabaseFailure } from "./Sql.js"

const REASONS = {
  unavailable: "the database is unavailable",
  conflict: "its transactions kept conflicting past their retries"
} as const

export interface OutageLog {
  /** One attempt: a database outage is logged once and answered with None; other failures pass on. */
  readonly attempt: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<Option.Option<A>, E, R>
}

/** The outage log of one loop, named in its two lines. */
export const makeOutageLog = (loop: string): Effect.Effect<OutageLog> =>
  Effect.sync(() => {
    let pausedAt: number | undefined
    const paused = (cause: Cause.Cause<unknown>, why: keyof typeof REASONS) =>
      Effect.suspend(() => {
        if (pausedAt !== undefined) return Effect.void
        pausedAt = Date.now()
        const first = Cause.pretty(cause).split("\n")[0]!.slice(0, 300)
        return Effect.logWarning(`${loop} paused: ${REASONS[why]} (${first}); it resumes by itself when the database answers`)
      })
    const resumed = Effect.suspend(() => {
      if (pausedAt === undefined) return Effect.void
      const ms = Date.now() - pausedAt
      pausedAt = undefined
      return Effect.logInfo(`${loop} resumed after ${ms} ms`)
    })
    return {
      attempt: <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.matchCauseEffect(effect, {
          onFailure: (cause) =>
            Option.match(transientDatabaseFailure(cause), {
              onNone: () => Effect.failCause(cause),
              onSome: (why) => Effect.as(paused(cause, why), Option.none<A>())
            }),
          onSuccess: (a) => Effect.as(resumed, Option.some(a))
        })
    }
  })
