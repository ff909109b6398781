/** One program over Steps, driven now (values), as an Effect (Effects) and with callbacks (waiting): the same result each way. */
import { Effect, Either } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { done, type Program, runEffect, runNow, runThen, type Step, waiting } from "../../src/Platform/Steps.js"

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

  /** A program's outcome driven with callbacks; `later` says which steps resume on a later turn. */
  const outcomeThen = <A>(program: Program<A>) =>
    new Promise<Either.Either<A, unknown>>((resolve) => runThen(program, resolve))
  const waitingStep = (later: boolean) => <A>(f: () => A): Step<A> =>
    waiting((resume) => {
      const answer = () => {
        try {
          resume(Either.right(f()))
        } catch (e) {
          resume(Either.left(e))
        }
      }
      if (later) setImmediate(answer)
      else answer()
    })

  it("property: driven with callbacks, a program gives the result it gives now, its steps resuming at once or later", async () => {
    await fc.assert(fc.asyncProperty(
      fc.array(fc.tuple(fc.integer({ min: -1000, max: 1000 }), fc.boolean()), { maxLength: 20 }),
      fc.boolean(),
      async (xs, innerLater) => {
        const f = (x: number) => x * 3 + 1
        const now = runNow(sumOf((x) => done(f(x)), (body) => done(runNow(body())), xs.map(([x]) => x)))
        const laterOf = new Map(xs.map(([x, later]) => [x, later]))
        const then = await outcomeThen(sumOf(
          (x) => waitingStep(laterOf.get(x) ?? innerLater)(() => f(x)),
          (body) => ({ *[Symbol.iterator]() { return yield* body() } }),
          xs.map(([x]) => x)
        ))
        expect(then).toEqual(Either.right(now))
      }
    ), { numRuns: 50 })
  })

  it("with callbacks, a step's error is thrown at its yield*: the program may catch it, or it ends the program", async () => {
    const failing = (x: number) => waitingStep(x % 2 === 0)(() => {
      if (x > 1) throw new Error(`too big: ${x}`)
      return x
    })
    expect(await outcomeThen(sumOf(failing, (body) => ({ *[Symbol.iterator]() { return yield* body() } }), [1, 2]))).toEqual(
      Either.left(new Error("too big: 2"))
    )
    function* caught(): Program<string> {
      try {
        yield* failing(3)
        return "not reached"
      } catch (e) {
        return `caught ${(e as Error).message}, then ${yield* failing(1)}`
      }
    }
    expect(await outcomeThen(caught())).toEqual(Either.right("caught too big: 3, then 1"))
  })

  it("with callbacks, a step that throws as it starts fails at its yield*, a second resume is ignored, and an Effect step is refused", async () => {
    const throwing: Step<number> = waiting(() => {
      throw new Error("could not start")
    })
    expect(await outcomeThen(sumOf(() => throwing, (body) => done(runNow(body())), [1]))).toEqual(Either.left(new Error("could not start")))
    const twice: Step<number> = waiting((resume) => {
      resume(Either.right(1))
      resume(Either.right(2))
      setImmediate(() => resume(Either.left(new Error("late"))))
    })
    function* twiceTwice(): Program<number> {
      return (yield* twice) + (yield* twice)
    }
    expect(await outcomeThen(twiceTwice())).toEqual(Either.right(2))
    const outcome = await outcomeThen(sumOf((x) => Effect.succeed(x), (body) => done(runNow(body())), [1]))
    expect(Either.isLeft(outcome) && String(outcome.left)).toMatch(/not `waiting`/)
  })

  it("with callbacks, 100,000 steps that resume at once run in one loop, not deeper in the stack", async () => {
    function* many(): Program<number> {
      let n = 0
      for (let i = 0; i < 100_000; i++) n += yield* waitingStep(false)(() => 1)
      return n
    }
    expect(await outcomeThen(many())).toEqual(Either.right(100_000))
  })

  it("runNow refuses a program that yields: a step that is not a computed value", () => {
    expect(() => runNow(sumOf((x) => Effect.succeed(x), (body) => done(runNow(body())), [1]))).toThrow(/yielded/)
  })

  it("an Effect step's failure fails the program run as an Effect", () => {
    const failing = runEffect<number, string>(() => sumOf((x) => (x > 1 ? Effect.fail("too big") : Effect.succeed(x)), runEffect, [1, 2]))
    expect(Effect.runSync(Effect.flip(failing))).toBe("too big")
  })
})
