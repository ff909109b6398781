/**
 * The in-memory limiter (SQLite, one process) reads its verdict from its flat
 * buckets in place. Here it is held to a model that keeps every admitted hit
 * as a (second, count) list and computes the verdict from it, over random hits on
 * a few keys, windows and costs, with a clock that mostly moves forward and
 * sometimes back. The first version of this test ran against the build before
 * the change too (where the verdict came from `verdictOf` over a list of pairs
 * built on every hit).
 */
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { makeMemoryLimiter } from "../../src/Auth/RateLimiter.js"
import { clockAt } from "../helpers/clock.js"

interface Hit {
  readonly key: number
  readonly step: number
  readonly limit: number
  readonly window: number
  readonly cost: number
}

const hitArb: fc.Arbitrary<Hit> = fc.record({
  key: fc.integer({ min: 0, max: 2 }),
  step: fc.integer({ min: -2, max: 20 }),
  limit: fc.integer({ min: 1, max: 8 }),
  window: fc.constantFrom(60, 3, 1),
  cost: fc.integer({ min: 0, max: 3 })
})

/**
 * The model: per key, its window length and its admitted hits. With `maxKeys`, keys are
 * held in an array, least recently hit first: before a new key is added to a full
 * limiter, the expired keys at the least recent end go (up to the first key hit in the
 * last minute), then the least recent ones until there is room.
 */
const model = (maxKeys = Infinity) => {
  const keys = new Map<number, { window: number; hits: Array<[number, number]> }>()
  const order: Array<number> = []
  const lastSecond = (k: { hits: Array<[number, number]> }) => k.hits.length === 0 ? -Infinity : k.hits[k.hits.length - 1]![0]
  const drop = (key: number) => {
    keys.delete(key)
    order.splice(order.indexOf(key), 1)
  }
  return (h: Hit, second: number) => {
    if (!keys.has(h.key) && keys.size >= maxKeys) {
      for (const key of [...order]) {
        const k = keys.get(key)!
        if (lastSecond(k) <= second - k.window) drop(key)
        else if (lastSecond(k) > second - 60) break
      }
      while (keys.size >= maxKeys) drop(order[0]!)
    }
    const k = keys.get(h.key) ?? { window: h.window, hits: [] }
    keys.set(h.key, k)
    if (order.includes(h.key)) order.splice(order.indexOf(h.key), 1)
    order.push(h.key)
    k.window = Math.max(k.window, h.window)
    // expired seconds leave from the front (after the clock went back, the list is not sorted)
    while (k.hits.length > 0 && k.hits[0]![0] <= second - h.window) k.hits.shift()
    const admitted = k.hits.reduce((n, [, c]) => n + c, 0) + h.cost <= h.limit
    if (admitted) {
      const last = k.hits[k.hits.length - 1]
      if (last !== undefined && last[0] === second) last[1] += h.cost
      else k.hits.push([second, h.cost])
    }
    // the verdict as the limiter once computed it, from the list
    const inWindow = k.hits.filter(([s]) => s > second - h.window && s <= second)
    const used = inWindow.reduce((n, [, c]) => n + c, 0)
    const reset = inWindow.reduce((acc, [s, c]) => (c > 0 && s < acc ? s : acc), second) + h.window
    return {
      allowed: admitted,
      limit: h.limit,
      remaining: Math.max(0, h.limit - used),
      reset,
      retryAfter: admitted ? 0 : Math.max(1, reset - second)
    }
  }
}

describe("the in-memory limiter", () => {
  it("property: answers as the model does", () => {
    fc.assert(
      fc.property(fc.array(hitArb, { minLength: 1, maxLength: 80 }), (hits) => {
        const limiter = makeMemoryLimiter()
        const expected = model()
        let ms = 1_000_000_000
        for (const h of hits) {
          ms = Math.max(0, ms + h.step * 250)
          const verdict = Effect.runSync(Effect.withClock(limiter.hit(`k${h.key}`, h.limit, h.window, h.cost), clockAt(ms)))
          expect(verdict).toEqual(expected(h, Math.floor(ms / 1000)))
        }
      }),
      { numRuns: 2_000 }
    )
  })

  it("property: with room for fewer keys than are hit, forgets the least recently hit as the model does", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.array(hitArb.map((h) => ({ ...h, key: h.key + (h.step % 2 === 0 ? 0 : 1) })), { minLength: 1, maxLength: 80 }),
        (maxKeys, hits) => {
          const limiter = makeMemoryLimiter({ maxKeys })
          const expected = model(maxKeys)
          let ms = 1_000_000_000
          for (const h of hits) {
            ms = Math.max(0, ms + h.step * 250)
            const verdict = Effect.runSync(Effect.withClock(limiter.hit(`k${h.key}`, h.limit, h.window, h.cost), clockAt(ms)))
            expect(verdict).toEqual(expected(h, Math.floor(ms / 1000)))
            expect(limiter.size()).toBeLessThanOrEqual(maxKeys)
          }
        }
      ),
      { numRuns: 2_000 }
    )
  })
})
