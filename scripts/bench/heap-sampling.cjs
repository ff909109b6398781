// Preloaded (node --require) into an attestd server by scripts/bench/allocations.mjs:
// V8's sampling heap profiler through an in-process inspector session, keeping the
// samples of objects the GC has since collected (a per-request allocation is
// collected within microseconds, and a profile of live objects would not show it).
// BENCH_ALLOCATIONS_SURVIVORS=1 drops the samples of objects a scavenge collected, keeping
// what survived one: what the young generation copies and then promotes to the old.
// SIGUSR1 starts sampling; SIGUSR2 stops it and writes the bytes sampled per
// allocating function to $BENCH_ALLOCATIONS_OUT as JSON.
"use strict"
const inspector = require("node:inspector")
const { writeFileSync } = require("node:fs")

const session = new inspector.Session()
session.connect()
session.post("HeapProfiler.enable")

process.on("SIGUSR1", () => {
  session.post("HeapProfiler.startSampling", {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: process.env.BENCH_ALLOCATIONS_SURVIVORS !== "1"
  })
})

process.on("SIGUSR2", () => {
  session.post("HeapProfiler.stopSampling", (err, result) => {
    if (err) throw new Error(`heap sampling: ${err.message}`)
    const bytes = new Map() // "function file:line" -> bytes sampled
    const nameOf = (f) => {
      const file = f.url.replace(/^.*node_modules\//, "").replace(/^.*\/(dist|build)\//, "$1/")
      return `${f.functionName || "(anonymous)"} ${file}:${f.lineNumber + 1}`
    }
    // A built-in (Map.prototype.set, an iterator's next, ...) has no file: it is
    // named with the nearest caller that has one.
    // BENCH_ALLOCATIONS_DEPTH > 0 also names that many callers above each site.
    const depth = Number(process.env.BENCH_ALLOCATIONS_DEPTH ?? 0)
    const walk = (node, callers) => {
      const f = node.callFrame
      const own = nameOf(f)
      const caller = callers[callers.length - 1]
      let site = f.url === "" && caller !== undefined ? `${f.functionName || "(native)"} ← ${caller}` : own
      for (let i = 2; i <= depth + 1 && callers.length - i >= 0; i++) site += ` ← ${callers[callers.length - i]}`
      bytes.set(site, (bytes.get(site) ?? 0) + node.selfSize)
      const next = f.url === "" ? callers : [...callers, own]
      for (const child of node.children) walk(child, next)
    }
    walk(result.profile.head, [])
    writeFileSync(process.env.BENCH_ALLOCATIONS_OUT, JSON.stringify([...bytes.entries()].map(([site, b]) => ({ site, bytes: b }))))
  })
})
