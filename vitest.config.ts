import { defineConfig } from "vitest/config"
import { LongestFirst } from "./test/sequencer.js"

// Two projects, both run by `npm test`: `unit` (in-process, fast) and `processes`
// (real child processes: kill -9 loops, several instances on one database, soaks).
// A developer iterating runs `npx vitest --project unit`.
const PROCESS_SUITES = ["test/**/kill.test.ts", "test/**/multi.test.ts", "test/**/soak*.test.ts", "test/Ops/*.test.ts"]

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Four forks on two cores: the files mostly wait on child processes, databases and
    // timers. Measured on the 2-core machine, same tree: vitest took 302 s with three
    // forks and 256 s with four.
    poolOptions: { forks: { maxForks: 4, minForks: 1 } },
    reporters: ["default"],
    // long files start first: see test/sequencer.ts
    sequence: { sequencer: LongestFirst },
    // the servers under test log every request; show a test's output only when it fails
    silent: "passed-only",
    projects: [
      { extends: true, test: { name: "unit", include: ["test/**/*.test.ts"], exclude: PROCESS_SUITES } },
      { extends: true, test: { name: "processes", include: PROCESS_SUITES } }
    ]
  }
})
