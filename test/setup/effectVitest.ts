/**
 * Restores @effect/vitest's methods on vitest's shared `it` before each test file.
 *
 * In @effect/vitest 0.30, `layer(...)` assigns its layer-bound `effect`, `scoped`,
 * `prop`, `flakyTest` and `layer` onto the `it` object that every file imports (an
 * `Object.assign` on vitest's own `it`; effect-smol #2177 stops this upstream, in the
 * 4.x line we cannot use). The unit project runs its files in shared workers
 * (vitest.config.ts, `isolate: false`), so without this a file's `it.effect` would run
 * on the last layer another file built, with that file's TestClock.
 */
import { it } from "@effect/vitest"

type Methods = Pick<typeof it, "effect" | "scoped" | "live" | "scopedLive" | "prop" | "flakyTest" | "layer">

const slot = globalThis as { [key: symbol]: Methods | undefined }
const KEY = Symbol.for("attestd/test/effectVitestMethods")

// The first file in a worker sees the methods as @effect/vitest made them: keep those.
const original = slot[KEY] ??= {
  effect: it.effect,
  scoped: it.scoped,
  live: it.live,
  scopedLive: it.scopedLive,
  prop: it.prop,
  flakyTest: it.flakyTest,
  layer: it.layer
}
Object.assign(it, original)
