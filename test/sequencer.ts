/**
 * Longest files first, so that no fork sits idle at the end waiting for one
 * long file that started last (longest-processing-time-first scheduling). A
 * file's weight is its duration in vitest's cache when there is one (a
 * developer's machine), else the estimate below (a clean clone has no cache:
 * vitest would order by file size, and the soak, a small file, would start
 * last), else 0. Ties keep vitest's own order. Estimates only order the run:
 * a stale one costs a little time, never a result.
 */
import { relative } from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/** Seconds each file took on a quiet run of this 2-core machine (the longest ones only). */
const ESTIMATES: Readonly<Record<string, number>> = {
  "test/Soak/soak.test.ts": 36,
  "test/Anchoring/kill.test.ts": 28,
  "test/Sealing/kill.test.ts": 23,
  "test/Anchoring/simulatedChain.test.ts": 21,
  "test/Anchoring/anchorer.test.ts": 19,
  "test/Stamp/stamp.test.ts": 18,
  "test/Client/effectClient.test.ts": 17,
  "test/Http/limits.test.ts": 15,
  "test/Webhooks/kill.test.ts": 15,
  "test/Ops/backup.test.ts": 12,
  "test/Anchoring/ots.test.ts": 12,
  "test/Webhooks/delivery.test.ts": 11,
  "test/Anchoring/multi.test.ts": 10,
  "test/Ops/shutdown.test.ts": 10
}

export class LongestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
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
