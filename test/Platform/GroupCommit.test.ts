/** Group commit isolates failures: one failing item is answered alone, the rest commit. */
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeGroupCommit } from "../../src/Platform/GroupCommit.js"

describe("group commit", () => {
  it("property: a batch with failing items answers each item with its own outcome", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.boolean(), { minLength: 1, maxLength: 40 }), async (bads) => {
        const committed: Array<number> = []
        const results = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
          const submit = yield* makeGroupCommit<{ n: number; bad: boolean }, number, string>({
            // like a transaction: all or nothing
            process: (items) =>
              items.some((i) => i.bad)
                ? Effect.fail("bad item")
                : Effect.sync(() => (committed.push(...items.map((i) => i.n)), items.map((i) => i.n * 2))),
            maxBatch: 64,
            workers: 1
          })
          return yield* Effect.all(bads.map((bad, n) => Effect.either(submit({ n, bad }))), { concurrency: "unbounded" })
        })))
        results.forEach((r, n) => {
          if (bads[n]) expect(r._tag).toBe("Left")
          else {
            expect(r._tag).toBe("Right")
            if (r._tag === "Right") expect(r.right).toBe(n * 2)
          }
        })
        expect(committed.sort((a, b) => a - b)).toEqual(bads.flatMap((b, n) => (b ? [] : [n])))
      }),
      { numRuns: 50 }
    )
  })
})
