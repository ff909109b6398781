/** One program over Steps, driven now (values) and as an Effect (Effects): the same result either way. */
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { done, type Program, runEffect, runNow, type Step } from "../../src/Platform/Steps.js"

/** Sums what `step` gives for each x, in a nested program, as the Attestor nests its transaction. */
function* sumOf(step: (x: number) => Step<number>, inner: <A>(body: () => Program<A>) => Step<A>, xs: ReadonlyArray<number>): Program<number> {
  let total = 0
  for (const x of xs) total += yield* step(x)
  total += yield* inner(function*() {
    return (yield* step(total)) * 2
  })
  return total
}

describe("Steps", () => {
  it("property: a program gives the same result driven now and as an Effect", () => {
    fc.assert(fc.property(fc.array(fc.integer({ min: -1000, max: 1000 }), { maxLength: 20 }), (xs) => {
      const f = (x: number) => x * 3 + 1
      const now = runNow(sumOf((x) => done(f(x)), (body) => done(runNow(body())), xs))
      const effect = Effect.runSync(runEffect(() => sumOf((x) => Effect.sync(() => f(x)), (body) => runEffect(body), xs)))
      expect(now).toBe(effect)
      const plain = xs.reduce((a, x) => a + f(x), 0)
      expect(now).toBe(plain + f(plain) * 2)
    }))
  })

  it("runNow refuses a program that yields: a step that is not a computed value", () => {
    expect(() => runNow(sumOf((x) => Effect.succeed(x), (body) => done(runNow(body())), [1]))).toThrow(/yielded/)
  })

  it("an Effect step's failure fails the program run as an Effect", () => {
    const failing = runEffect<number, string>(() => sumOf((x) => (x > 1 ? Effect.fail("too big") : Effect.succeed(x)), runEffect, [1, 2]))
    expect(Effect.runSync(Effect.flip(failing))).toBe("too big")
  })
})
