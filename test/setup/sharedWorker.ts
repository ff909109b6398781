/**
 * Before and after each file of the unit project, whose files run one after another
 * in shared workers (vitest.config.ts, `isolate: false`).
 *
 * 1. Restores @effect/vitest's methods on vitest's shared `it`. In @effect/vitest 0.30,
 *    `layer(...)` assigns its layer-bound `effect`, `scoped`, `prop`, `flakyTest` and
 *    `layer` onto the `it` object that every file imports (an `Object.assign` on
 *    vitest's own `it`; effect-smol #2177 stops this upstream, in the 4.x line we cannot
 *    use). Without this, a file's `it.effect` would run on the last layer another file
 *    built, with that file's TestClock.
 * 2. Fails a file that leaves the environment variables changed, which the next file in
 *    the worker would otherwise inherit.
 */
import { it } from "@effect/vitest"
import { afterAll, expect } from "vitest"

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

const env = { ...process.env }
afterAll(() => {
  const changed = [...new Set([...Object.keys(env), ...Object.keys(process.env)])].filter((k) => env[k] !== process.env[k])
  expect(changed, "environment variables this file changed and did not restore (the next file in this worker would see them)").toEqual([])
})
