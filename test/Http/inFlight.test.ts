/**
 * The drainer's register of responses in flight (src/Server/Drain.ts makeInFlight):
 * an array with swap-remove instead of a Set (README, Performance: "Responses kept by
 * a Set"). For any sequence of adds and removals, in any order and with removals
 * repeated, it holds exactly what a Set would.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeInFlight } from "../../src/Server/Drain.js"

type Op = { readonly _tag: "add" } | { readonly _tag: "remove"; readonly pick: number }

const ops = fc.array(
  fc.oneof(
    fc.constant<Op>({ _tag: "add" }),
    fc.nat().map((pick): Op => ({ _tag: "remove", pick }))
  ),
  { maxLength: 300 }
)

describe("makeInFlight", () => {
  it("holds what a Set holds after any adds and removals", () => {
    fc.assert(
      fc.property(ops, (sequence) => {
        const inFlight = makeInFlight<{ readonly n: number }>()
        const model = new Set<{ readonly n: number }>()
        // every item ever added, with its remover: a removal may pick one already removed
        const added: Array<readonly [{ readonly n: number }, () => void]> = []
        for (const op of sequence) {
          if (op._tag === "add") {
            const item = { n: added.length }
            added.push([item, inFlight.add(item)])
            model.add(item)
          } else if (added.length > 0) {
            const [item, remove] = added[op.pick % added.length]!
            remove()
            model.delete(item)
          }
          expect(inFlight.size()).toBe(model.size)
          expect(new Set(inFlight.items())).toEqual(model)
          expect(inFlight.items()).toHaveLength(model.size)
        }
      })
    )
  })

  it("removes each item once: a second removal leaves the others in place", () => {
    const inFlight = makeInFlight<string>()
    const removeA = inFlight.add("a")
    inFlight.add("b")
    inFlight.add("c")
    removeA()
    removeA()
    expect([...inFlight.items()].sort()).toEqual(["b", "c"])
    expect(inFlight.size()).toBe(2)
  })
})
