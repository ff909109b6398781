import { defineConfig } from "vitest/config"
import { LongestFirst } from "./test/sequencer.js"

// Two projects, both run by `npm test`: `unit` (in-process, fast) and `processes`
// (real child processes: kill -9 loops, several instances on one database, soaks).
// A developer iterating runs `npx vitest --project unit`.
const PROCESS_SUITES = [
  "test/**/kill.test.ts",
  "test/**/multi.test.ts",
  "test/**/soak*.test.ts",
  "test/Ops/*.test.ts",
  // the RFC 3161 clients: JVMs and child processes, mostly waited on
  "test/Timestamping/clients.test.ts"
]

export default defineConfig({
  test: {
    // Tests that start servers, clusters and CLIs took 30-64 s on a slow 2-core host with the
    // whole suite running beside them; a minute was too little there for a correct test.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    poolOptions: {
      // unit: four long-lived forks, each running file after file (`isolate: false`).
      // Loading effect, the platform and the service's modules costs ~1.5–3 s of CPU
      // per file, which every file paid again in a fresh process: 227 s of the suite's
      // CPU ("collect") on two cores. A shared worker loads them once (vitest 274–284 s
      // → 201–219 s on the 2-core machine; three forks: 226 s). minForks equals maxForks:
      // with fewer, the pool retired workers mid-run, vitest 3.2 reported "Terminating
      // worker thread" and an orphaned fork kept running.
      forks: { maxForks: 4, minForks: 4, isolate: false },
      // processes: a fresh worker thread per file, running beside the forks. The files
      // mostly wait on child processes, databases and timers. A separate pool is what lets
      // them overlap with the unit files: in one pool, vitest runs a non-isolated project's
      // files to the end before it starts the next project's.
      threads: { maxThreads: 2, minThreads: 2 }
    },
    reporters: ["default"],
    // long files start first: see test/sequencer.ts
    sequence: { sequencer: LongestFirst },
    // the servers under test log every request; show a test's output only when it fails
    silent: "passed-only",
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/**/*.test.ts"],
          exclude: PROCESS_SUITES,
          pool: "forks",
          // files share a worker: see test/setup/sharedWorker.ts
          setupFiles: ["test/setup/sharedWorker.ts"]
        }
      },
      { extends: true, test: { name: "processes", include: PROCESS_SUITES, pool: "threads" } }
    ]
  }
})
