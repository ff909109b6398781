#!/usr/bin/env node
// Merkle v2 benchmark: build time (validate + sort + every node hash, i.e. all
// proofs available) for buildTree and buildTreeParallel, proof generation, and
// a node:crypto baseline of 999,999 single-shot SHA-256 calls on 65 bytes.
//
//   npx tsc -p tsconfig.build.json && node scripts/bench-merkle.mjs [sizes...]
//   MERKLE_MODULE=/tmp/merkle.mjs node scripts/bench-merkle.mjs 10000 1000000
//
// MERKLE_MODULE (or the modulePath option) points at a compiled Merkle module,
// e.g. one built with
//   npx esbuild src/Sealing/MerkleBuilder.ts --format=esm --platform=node --outfile=/tmp/merkle.mjs
// Default: ../dist/Sealing/MerkleBuilder.js relative to this script.
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { median } from "./bench/stats.mjs"

const DEFAULT_SIZES = [10_000, 100_000, 1_000_000]
const BASELINE_CALLS = 999_999

const loadMerkle = (modulePath) =>
  import(
    modulePath
      ? pathToFileURL(path.resolve(modulePath)).href
      : new URL("../dist/Sealing/MerkleBuilder.js", import.meta.url).href
  )

const randomLeaves = (n) => {
  const bytes = crypto.randomBytes(32 * n)
  const leaves = new Array(n)
  for (let i = 0; i < n; i++) leaves[i] = bytes.toString("hex", i * 32, i * 32 + 32)
  return leaves
}

/**
 * Per-thread scheduler statistics (Linux /proc/self/task/<tid>/schedstat):
 * CPU time of the main thread, of all threads, and time spent runnable but
 * waiting for a CPU. On a shared machine wall times mostly measure the other
 * load; main-thread CPU is what buildTreeParallel's wall time would be with a
 * free second core. undefined where /proc is not available.
 */
const schedSnapshot = () => {
  try {
    const pid = String(process.pid)
    let main = 0
    let all = 0
    let wait = 0
    for (const tid of fs.readdirSync("/proc/self/task")) {
      let fields
      try {
        fields = fs.readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ").map(Number)
      } catch {
        continue // thread exited meanwhile
      }
      all += fields[0]
      wait += fields[1]
      if (tid === pid) main = fields[0]
    }
    return { main, all, wait }
  } catch {
    return undefined
  }
}


const timeBest = async (repeats, fn) => {
  const runs = []
  const main = []
  const all = []
  const wait = []
  let result
  for (let r = 0; r < repeats; r++) {
    const s0 = schedSnapshot()
    const t0 = performance.now()
    result = await fn()
    runs.push(performance.now() - t0)
    const s1 = schedSnapshot()
    if (s0 !== undefined && s1 !== undefined) {
      main.push((s1.main - s0.main) / 1e6)
      all.push((s1.all - s0.all) / 1e6)
      wait.push((s1.wait - s0.wait) / 1e6)
    }
  }
  return {
    bestMs: Math.min(...runs),
    runsMs: runs,
    mainCpuMs: main.length > 0 ? median(main) : undefined,
    cpuMs: all.length > 0 ? median(all) : undefined,
    waitMs: wait.length > 0 ? median(wait) : undefined,
    result
  }
}

const timing = (t) => ({
  bestMs: t.bestMs,
  runsMs: t.runsMs,
  mainCpuMs: t.mainCpuMs,
  cpuMs: t.cpuMs,
  waitMs: t.waitMs
})

const sha256Once =
  typeof crypto.hash === "function"
    ? (b) => crypto.hash("sha256", b, "buffer")
    : (b) => crypto.createHash("sha256").update(b).digest()

/**
 * Runs the benchmark and returns one row per measurement:
 *   { name, leaves, bestMs, runsMs, mainCpuMs, cpuMs, waitMs, note }
 * bestMs: best wall time; mainCpuMs / cpuMs / waitMs: medians over the runs of
 * main-thread CPU, all-threads CPU and run-queue wait (Linux; else undefined).
 * name: "buildTree" | "buildTreeParallel" | "proofs" | "baseline" | "worker cold start"
 */
export async function benchMerkle({
  sizes = DEFAULT_SIZES,
  repeats = 3,
  proofSample = 100_000,
  modulePath = process.env.MERKLE_MODULE,
  log = () => {}
} = {}) {
  const M = await loadMerkle(modulePath)
  const rows = []

  // node:crypto baseline: 999,999 one-shot hashes of a 65-byte buffer
  const input = Buffer.alloc(65)
  input[0] = 1
  crypto.randomFillSync(input, 1)
  const baseline = await timeBest(repeats, () => {
    let acc = 0
    for (let i = 0; i < BASELINE_CALLS; i++) {
      input[1] = i
      acc ^= sha256Once(input)[0]
    }
    return acc
  })
  rows.push({
    name: "baseline",
    leaves: BASELINE_CALLS + 1,
    ...timing(baseline),
    note: `${BASELINE_CALLS.toLocaleString("en-US")} × ${typeof crypto.hash === "function" ? "crypto.hash" : "createHash"}('sha256', 65 B)`
  })
  log(`baseline ${baseline.bestMs.toFixed(0)} ms`)

  // start the worker outside the timed runs, but report what that costs
  if (typeof M.terminateMerkleWorker === "function") await M.terminateMerkleWorker()
  const warmLeaves = randomLeaves((M.PARALLEL_THRESHOLD ?? 16_384) + 1)
  const cold = await timeBest(1, () => M.buildTreeParallel(warmLeaves))
  const warm = await timeBest(repeats, () => M.buildTreeParallel(warmLeaves))
  rows.push({
    name: "worker cold start",
    leaves: warmLeaves.length,
    ...timing(cold),
    note: `first buildTreeParallel incl. worker spawn; warm: ${warm.bestMs.toFixed(1)} ms`
  })

  for (const n of sizes) {
    const leaves = randomLeaves(n)
    const sync = await timeBest(repeats, () => M.buildTree(leaves))
    log(`buildTree ${n}: ${sync.bestMs.toFixed(0)} ms`)
    const statsBefore = typeof M.merkleWorkerStats === "function" ? M.merkleWorkerStats() : undefined
    const par = await timeBest(repeats, () => M.buildTreeParallel(leaves))
    log(`buildTreeParallel ${n}: ${par.bestMs.toFixed(0)} ms`)
    if (par.result.rootHex !== sync.result.rootHex) throw new Error(`root mismatch at ${n} leaves`)
    let usedWorker = "?"
    if (statsBefore !== undefined) {
      const after = M.merkleWorkerStats()
      usedWorker = after.workerBuilds - statsBefore.workerBuilds === repeats
        ? "worker"
        : after.fallbacks > statsBefore.fallbacks
        ? "FELL BACK to sync"
        : "sync (below threshold)"
    }
    rows.push({ name: "buildTree", leaves: n, ...timing(sync), note: "" })
    rows.push({
      name: "buildTreeParallel",
      leaves: n,
      ...timing(par),
      note: `${usedWorker}, ×${(sync.bestMs / par.bestMs).toFixed(2)} vs buildTree`
    })

    const tree = sync.result
    const count = Math.min(n, proofSample)
    const stride = n / count
    const proofs = await timeBest(repeats, () => {
      let steps = 0
      for (let k = 0; k < count; k++) steps += tree.proof(Math.floor(k * stride)).length
      return steps
    })
    const perProofUs = (proofs.bestMs * 1000) / count
    rows.push({
      name: "proofs",
      leaves: n,
      ...timing(proofs),
      note: count === n
        ? `all ${n.toLocaleString("en-US")} proofs, ${perProofUs.toFixed(2)} µs each`
        : `${count.toLocaleString("en-US")} of ${n.toLocaleString("en-US")} proofs, ${perProofUs.toFixed(2)} µs each (all ≈ ${
          ((perProofUs * n) / 1000).toFixed(0)
        } ms)`
    })
  }
  return rows
}

const formatTable = (rows) => {
  const header = ["case", "leaves", "best ms", "runs ms", "main cpu", "all cpu", "rq wait", "note"]
  const ms = (x) => (x === undefined ? "-" : x.toFixed(1))
  const body = rows.map((r) => [
    r.name,
    r.leaves.toLocaleString("en-US"),
    r.bestMs.toFixed(1),
    r.runsMs.map((x) => x.toFixed(0)).join(" / "),
    ms(r.mainCpuMs),
    ms(r.cpuMs),
    ms(r.waitMs),
    r.note
  ])
  const right = new Set([1, 2, 4, 5, 6])
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)))
  const line = (cells) => cells.map((c, i) => (right.has(i) ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ")
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n")
}

async function main() {
  const args = process.argv.slice(2).map((a) => Number(a.replace(/_/g, "")))
  const sizes = args.length > 0 && args.every((n) => Number.isSafeInteger(n) && n > 0) ? args : DEFAULT_SIZES
  console.log(
    `node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}), load ${
      os.loadavg().map((x) => x.toFixed(2)).join(" ")
    }`
  )
  const rows = await benchMerkle({ sizes })
  console.log(formatTable(rows))
  console.log("main cpu / all cpu / rq wait: medians (ms) of main-thread CPU, all-threads CPU, time runnable but waiting for a CPU")
  console.log(`load after: ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`)
  const M = await loadMerkle(process.env.MERKLE_MODULE)
  if (typeof M.terminateMerkleWorker === "function") await M.terminateMerkleWorker()
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(e)
    process.exitCode = 1
  })
}
