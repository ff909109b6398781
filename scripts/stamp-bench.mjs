#!/usr/bin/env node
// Times `attestd stamp` on N small files (default 500) against a fresh demo server
// (dist/, SQLite in a temp dir), as a user runs it: one process, batches of 100,
// one evidence request per attestation. Prints one JSON line.
//   npm run build && node scripts/stamp-bench.mjs [N]
import { execFile, spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const BIN = join(ROOT, "dist", "bin.js")
const n = Number(process.argv[2] ?? 500)
const dir = mkdtempSync(join(tmpdir(), "attestd-stamp-bench-"))
const port = await new Promise((r) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const p = s.address().port
    s.close(() => r(p))
  })
})
const env = { ...process.env, PORT: String(port), HOST: "127.0.0.1", DATABASE_URL: `sqlite:${join(dir, "attestd.db")}`, ATTESTD_DATA_DIR: dir }
const run = (args, extra = {}) =>
  new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...env, ...extra }, encoding: "utf8", maxBuffer: 64 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }))
  })
const key = JSON.parse((await run(["keys", "create", "--label", "bench", "--scopes", "attest"])).stdout.trim().split("\n").pop()).key
const server = spawn(process.execPath, [BIN, "serve"], { env, stdio: "ignore" })
try {
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/v1/healthz`)).ok) break
    } catch {}
    if (i > 300) throw new Error("server not ready")
    await new Promise((r) => setTimeout(r, 100))
  }
  const files = Array.from({ length: n }, (_, i) => {
    const f = join(dir, `f${i}.dat`)
    writeFileSync(f, `bench file ${i} ${Math.random()}`)
    return f
  })
  const started = Date.now()
  const r = await run(["stamp", ...files], { ATTESTD_URL: url, ATTESTD_API_KEY: key })
  const wallMs = Date.now() - started
  const report = JSON.parse(r.stdout.trim().split("\n").pop())
  console.log(JSON.stringify({ files: n, exit: r.code, stamped: report.stamped, requests: report.requests, retries: report.retries, stampMs: report.elapsedMs, processWallMs: wallMs }))
} finally {
  server.kill("SIGTERM")
  await new Promise((r) => server.once("exit", r))
  rmSync(dir, { recursive: true, force: true })
}
