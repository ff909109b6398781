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
 * 3. Fails a file that leaves a server listening or a child process running: the next
 *    file would share the worker with it (a port taken, a child writing to a data dir
 *    the file removed, a process that outlives the suite).
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

/** Node's handle types of a listening server and of a child process. */
const WATCHED = ["TCPServerWrap", "ProcessWrap"] as const
const handleCounts = () => {
  const counts: Record<string, number> = Object.fromEntries(WATCHED.map((t) => [t, 0]))
  for (const type of process.getActiveResourcesInfo()) if (type in counts) counts[type]!++
  return counts
}
const atStart = handleCounts()
const leftOpen = () => {
  const now = handleCounts()
  return WATCHED.filter((t) => now[t]! > atStart[t]!).map((t) => `${t}: ${atStart[t]} at the start, ${now[t]} now`)
}
afterAll(async () => {
  // A handle leaves the list a turn or two after its close callback (a server's, a child's
  // exit): give closes under way up to 2 s to finish before calling it a leak.
  for (let waited = 0; leftOpen().length > 0 && waited < 2_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  expect(leftOpen(), "servers or child processes this file left open (the next file in this worker would share them)").toEqual([])
})
