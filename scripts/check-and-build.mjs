#!/usr/bin/env node
// `npm test`'s first step: the typecheck (src and test) and the build (dist/, the bundled CLI,
// the verifier page) at once. They share nothing but the sources, and each is one tsc run
// that mostly keeps one core busy: side by side they take ~20 s instead of ~31 s one after
// the other on a 2-core machine. Each one's output is printed when it ends; exit 1 if
// either failed.
import { spawn } from "node:child_process"

const npm = process.platform === "win32" ? "npm.cmd" : "npm"

const run = (name, args) =>
  new Promise((resolve) => {
    const started = Date.now()
    const child = spawn(npm, args, { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    child.stdout.on("data", (c) => (out += c))
    child.stderr.on("data", (c) => (out += c))
    child.on("close", (code) => {
      const ok = code === 0
      process.stdout.write(`${out}${ok ? "" : "\n"}[${name}] ${ok ? "ok" : `FAILED (exit ${code})`} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`)
      resolve(ok)
    })
  })

const results = await Promise.all([run("typecheck", ["run", "--silent", "typecheck"]), run("build", ["run", "--silent", "build"])])
process.exit(results.every(Boolean) ? 0 : 1)
