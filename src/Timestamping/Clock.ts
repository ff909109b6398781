/**
 * Clock discipline for the RFC 3161 authority (CONTRACT §6): whether this
 * instance's clock may be written into a token. The SNTP monitor provides the
 * live implementation; without NTP servers (demo) the clock is unmonitored and
 * taken as trusted. The TSA refuses with `timeNotAvailable` while `Untrusted`.
 */
import { Context, Effect, Layer } from "effect"

export type ClockState =
  | { readonly _tag: "Unmonitored" }
  | {
    readonly _tag: "Trusted"
    /** Median offset of the servers that answered (server − local), ms. */
    readonly offsetMs: number
    /** Half the median round trip, ms: what the offset may be wrong by. */
    readonly halfRoundTripMs: number
    readonly checkedAtMillis: number
  }
  | {
    readonly _tag: "Untrusted"
    /** The median offset when some servers answered, else null. */
    readonly offsetMs: number | null
    readonly reason: string
    readonly checkedAtMillis: number | null
  }

export class ClockDiscipline extends Context.Tag("Timestamping/ClockDiscipline")<ClockDiscipline, {
  /** The clock's state now. */
  readonly state: Effect.Effect<ClockState>
  /** The tolerance (ATTESTD_CLOCK_TOLERANCE), ms: the accuracy written into tokens. */
  readonly toleranceMs: number
}>() {
  /** No NTP servers configured: the clock is taken as trusted and reported as unmonitored. */
  static readonly unmonitored = (toleranceMs: number) =>
    Layer.succeed(ClockDiscipline, { state: Effect.succeed({ _tag: "Unmonitored" } as const), toleranceMs })
}

/** Whether a token may be issued in this state. */
export const issuable = (state: ClockState): boolean => state._tag !== "Untrusted"
