/**
 * What a synchronous step answers when it cannot decide without waiting (a
 * limiter whose view is stale, a database that is busy): the caller then takes
 * the Effect path, which can wait. A step that answers it has changed nothing.
 */
export const UNDECIDED: unique symbol = Symbol.for("attestd/Undecided")
export type Undecided = typeof UNDECIDED
