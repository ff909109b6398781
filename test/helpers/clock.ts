/** A Clock stopped at `ms` (epoch milliseconds), for `Effect.withClock` in tests that replay times. */
import { Clock, Effect } from "effect"

export const clockAt = (ms: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => ms,
  unsafeCurrentTimeNanos: () => BigInt(ms) * 1_000_000n,
  currentTimeMillis: Effect.succeed(ms),
  currentTimeNanos: Effect.succeed(BigInt(ms) * 1_000_000n),
  sleep: () => Effect.void
})
