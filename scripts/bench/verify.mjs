#!/usr/bin/env node
// Time to verify a T2 evidence bundle: in-process (the portable core from dist/,
// warm, median of N) and cold through the CLI, a new process each run: the
// bundle the package's `bin` runs (`npx attestd verify` = `node dist/cli.mjs
// verify`) and, beside it, the unbundled `node dist/bin.js verify` that `npm
// start` uses. Every trust input is given (keys, TSA anchor, headers).
//
//   ATTESTD_KEEP_VERIFY_FIXTURES=/tmp/vfx npx vitest run test/Verify/core.test.ts
//   npm run build && node scripts/bench/verify.mjs /tmp/vfx [runs]
//
// The directory holds t2.json, keys.json, root.pem and headers.json (what the
// test writes). A baseline in the same run: a cold `node -e 0`.
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { median } from "./stats.mjs"

const dir = process.argv[2]
const runs = Number(process.argv[3] ?? 20)
if (!dir) throw new Error("usage: node scripts/bench/verify.mjs DIR [runs]")
const root = new URL("../../", import.meta.url).pathname
const { verifyBundle } = await import(join(root, "dist/Verify/Verifier.js"))
const read = (f) => readFileSync(join(dir, f), "utf8")
const bundle = JSON.parse(read("t2.json"))
const options = { keys: JSON.parse(read("keys.json")).keys, tsaCaPem: read("root.pem"), otsHeaders: JSON.parse(read("headers.json")) }

const time = (f) => {
  const t = performance.now()
  f()
  return performance.now() - t
}

const first = performance.now()
const r0 = await verifyBundle(bundle, options)
const firstMs = performance.now() - first
if (r0.verdict !== "verified") throw new Error(`the bundle does not verify: ${JSON.stringify(r0.checks)}`)
const warm = []
for (let i = 0; i < runs; i++) {
  const t = performance.now()
  await verifyBundle(bundle, options)
  warm.push(performance.now() - t)
}
const verifyArgs = ["verify", join(dir, "t2.json"), "--keys", join(dir, "keys.json"), "--tsa-ca", join(dir, "root.pem"), "--ots-headers", join(dir, "headers.json")]
const cold = []
const coldUnbundled = []
const node0 = []
for (let i = 0; i < Math.min(runs, 7); i++) {
  node0.push(time(() => execFileSync(process.execPath, ["-e", "0"])))
  cold.push(time(() => execFileSync(process.execPath, [join(root, "dist/cli.mjs"), ...verifyArgs], { stdio: "ignore" })))
  coldUnbundled.push(time(() => execFileSync(process.execPath, [join(root, "dist/bin.js"), ...verifyArgs], { stdio: "ignore" })))
}
console.log(`node ${process.version}, load ${(await import("node:os")).loadavg().map((l) => l.toFixed(2)).join(" ")}`)
console.log(`in-process, first call:   ${firstMs.toFixed(1)} ms`)
console.log(`in-process, warm median:  ${median(warm).toFixed(1)} ms (${runs} runs)`)
console.log(`CLI cold median:          ${median(cold).toFixed(0)} ms (${cold.length} runs, dist/cli.mjs)`)
console.log(`unbundled cold median:    ${median(coldUnbundled).toFixed(0)} ms (dist/bin.js)`)
console.log(`node -e 0 cold median:    ${median(node0).toFixed(0)} ms  → CLI = ${(median(cold) / median(node0)).toFixed(1)}× a bare node start`)
