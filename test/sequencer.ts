/**
 * Longest files first, so that no fork sits idle at the end waiting for one
 * long file that started last (longest-processing-time-first scheduling). A
 * file's weight is its duration in vitest's cache when there is one (a
 * developer's machine), else the estimate below (a clean clone has no cache:
 * vitest would order by file size, and the soak, a small file, would start
 * last), else 0. Ties keep vitest's own order. Estimates only order the run:
 * a stale one costs a little time, never a result. ATTESTD_TEST_SHUFFLE_SEED
 * shuffles the files instead (see `sort`).
 */
import { relative } from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * Seconds each file took in a clean-clone run of `npm test` on this 2-core machine
 * (2026-11-29; the files of 15 s or more). The two projects run in
 * separate pools (vitest.config.ts), each ordered by this.
 */
const ESTIMATES: Readonly<Record<string, number>> = {
  "test/Ops/pooler.test.ts": 76,
  "test/Ops/keyCustody.test.ts": 67,
  "test/Anchoring/anchorer.test.ts": 63,
  "test/Stamp/stamp.test.ts": 59,
  "test/Cli/cli.test.ts": 59,
  "test/Browser/verifierPage.test.ts": 57,
  "test/Claims/fuzz.test.ts": 56,
  "test/Anchoring/kill.test.ts": 56,
  "test/Http/limits.test.ts": 55,
  "test/Soak/soak.test.ts": 54,
  "test/Client/effectClient.test.ts": 42,
  "test/Ops/binary.test.ts": 37,
  "test/Sealing/kill.test.ts": 34,
  "test/Cli/usage.test.ts": 33,
  "test/Webhooks/kill.test.ts": 29,
  "test/Sealing/sealer.test.ts": 27,
  "test/Census/derivedLists.test.ts": 27,
  "test/Timestamping/clients.test.ts": 26,
  "test/Ops/replica.test.ts": 26,
  "test/Ops/backup.test.ts": 26,
  "test/Sealing/MerkleBuilder.test.ts": 25,
  "test/Sealing/http.test.ts": 23,
  "test/Census/scan.test.ts": 23,
  "test/Anchoring/ots.test.ts": 22,
  "test/Client/readme.test.ts": 21,
  "test/Webhooks/fairness.test.ts": 20,
  "test/Webhooks/delivery.test.ts": 20,
  "test/Ops/shutdown.test.ts": 20,
  "test/Anchoring/simulatedChain.test.ts": 19,
  "test/Http/edge.test.ts": 18,
  "test/Claims/tags.test.ts": 18,
  "test/Claims/shareTokens.test.ts": 18,
  "test/Webhooks/api.test.ts": 17,
  "test/Client/operations.test.ts": 17,
  "test/Auth/multi.test.ts": 17,
  "test/Ops/import.test.ts": 16,
  "test/Anchoring/multi.test.ts": 16,
  "test/Sealing/multi.test.ts": 15
}

/** Fisher–Yates with a seeded generator (mulberry32): the same seed, the same order. */
const seededShuffle = <A>(items: Array<A>, seed: number): Array<A> => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[items[i], items[j]] = [items[j]!, items[i]!]
  }
  return items
}

export class LongestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    // ATTESTD_TEST_SHUFFLE_SEED=N: the files in a random order, one order per N (shuffled from
    // the files sorted by path), to find a file that passes only after another has run in its
    // worker. Tests within a file keep their order: many suites are the steps of one story.
    // (vitest's --sequence.shuffle would shuffle those steps, and with a custom sequencer it
    // does not shuffle files at all.)
    const seed = process.env.ATTESTD_TEST_SHUFFLE_SEED
    if (seed !== undefined && seed !== "") {
      if (!/^\d+$/.test(seed)) throw new Error(`ATTESTD_TEST_SHUFFLE_SEED must be a whole number, got ${JSON.stringify(seed)}`)
      const byPath = [...files].sort((a, b) => (a.moduleId < b.moduleId ? -1 : a.moduleId > b.moduleId ? 1 : 0))
      return seededShuffle(byPath, Number(seed))
    }
    const ordered = await super.sort(files)
    const root = this.ctx.config.root
    const weight = (file: TestSpecification): number => {
      const path = relative(root, file.moduleId)
      const cached = this.ctx.cache.getFileTestResults(`${file.project.name}:${path}`)
      return cached?.duration !== undefined ? cached.duration / 1000 : (ESTIMATES[path] ?? 0)
    }
    const weights = new Map(ordered.map((f) => [f, weight(f)]))
    // Array.prototype.sort is stable: equal weights keep vitest's order
    return ordered.sort((a, b) => weights.get(b)! - weights.get(a)!)
  }
}
