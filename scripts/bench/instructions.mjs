// Instructions per request, counted by callgrind (valgrind): `BENCH_ONLY=instructions npm run bench`.
//
// A load run's server CPU per request moves by ±15% between runs on a shared 2-core machine,
// which hides a change of a few percent. Callgrind counts the instructions the server executes
// instead: for the same code, the same requests and the same concurrency the count barely moves
// whatever else the machine does. It is not time (a cache miss costs more than an instruction),
// so it judges code changes, A against B (BENCH_DIST), not the machine.
//
// Each scenario gets a fresh server on SQLite under `valgrind --tool=callgrind --instr-atstart=no`
// (no counting while it starts and warms up), the usual API key and 1000 seeded hashes, then
// BENCH_IR_WARMUP requests, counting switched on (callgrind_control -i on), BENCH_IR_REQUESTS
// requests over BENCH_IR_CONNECTIONS connections, a dump (callgrind_control -d), and the dump's
// total divided by the requests. Every thread of the server is counted (V8's GC helpers too).
// Valgrind runs the server ~50× slower: a few thousand requests per scenario take a minute or two.
import { execFile, spawn } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import autocannon from "autocannon"
import { SCENARIOS } from "./http.mjs"
import { attestdEnv, benchNodeArgs, BIN, createApiKey, freePort, randomHashHex, seedHashes, waitHealthy } from "./lib.mjs"

const exec = (cmd, args, timeout = 120_000, env = process.env) =>
  new Promise((resolve, reject) =>
    execFile(cmd, args, { timeout, encoding: "utf8", env }, (err, stdout, stderr) => (err ? reject(new Error(`${cmd} ${args.join(" ")}: ${err.message}\n${stderr}`)) : resolve(stdout)))
  )

const haveValgrind = () => exec("valgrind", ["--version"], 10_000).then(() => true, () => false)

/** Sends `amount` requests of `request` over `connections` connections and waits for every answer. */
const drive = (url, request, amount, connections) =>
  new Promise((resolve, reject) => {
    const instance = autocannon({ url, connections, amount, timeout: 120, requests: [request] }, (err, result) => (err ? reject(err) : resolve(result)))
    instance.on("error", reject)
  })

/** The total instruction count (Ir) of a callgrind dump. */
const totalIr = (file) => {
  const text = readFileSync(file, "utf8")
  const m = /^(?:totals|summary):\s+(\d+)/m.exec(text)
  if (!m) throw new Error(`no totals in ${file}`)
  return Number(m[1])
}

const startUnderCallgrind = async (dir) => {
  const port = await freePort()
  const dataDir = path.join(dir, "data")
  const serverEnv = attestdEnv({ dataDir, port })
  const env = { ...process.env, ...serverEnv }
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k]
  const out = path.join(dir, "callgrind.out.%p")
  const child = spawn("valgrind", [
    "--tool=callgrind",
    "--instr-atstart=no",
    "--smc-check=all-non-file", // V8 writes the code it runs
    `--callgrind-out-file=${out}`,
    process.execPath,
    ...benchNodeArgs(),
    BIN,
    "serve",
    "--no-workers"
  ], { env, stdio: ["ignore", "ignore", "pipe"] })
  let stderr = ""
  child.stderr.on("data", (c) => (stderr = (stderr + c).slice(-4000)))
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })))
  const proc = { name: "attestd-callgrind", exited, logFile: "(valgrind stderr)", tail: () => stderr }
  const url = `http://127.0.0.1:${port}`
  await waitHealthy(proc, `${url}/v1/healthz`, 600_000)
  return { child, url, env: serverEnv, exited, stop: async () => {
    child.kill("SIGINT")
    await Promise.race([exited, new Promise((r) => setTimeout(r, 60_000))])
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  } }
}

export const benchInstructions = async ({ scenarios, requests, warmup, connections, seed = 1000, log }) => {
  if (!(await haveValgrind())) {
    log("  skipped: valgrind is not installed")
    return { skipped: "valgrind missing" }
  }
  const rows = []
  for (const scenario of scenarios) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "attestd-ir-"))
    let server
    try {
      server = await startUnderCallgrind(dir)
      const key = await createApiKey({ env: server.env })
      const existing = Array.from({ length: seed }, randomHashHex)
      await seedHashes(server.url, key, existing)
      const request = SCENARIOS[scenario].request({ key, existing })
      await drive(server.url, request, warmup, connections)
      // vgdb, which callgrind_control talks through, names its pipes after $HOST and $USER:
      // the server's HOST (its listen address) must be the one callgrind_control sees
      const control = (...args) => exec("callgrind_control", [...args, String(server.child.pid)], 120_000, { ...process.env, HOST: server.env.HOST })
      await control("-i", "on")
      const result = await drive(server.url, request, requests, connections)
      const dumped = await control("-d")
      if (process.env.BENCH_IR_KEEP) log(dumped)
      // the dump callgrind_control asked for: callgrind.out.<pid>.1 (the file without a suffix is written at exit)
      const dump = readdirSync(dir).find((f) => /^callgrind\.out\.\d+\.1$/.test(f))
      if (dump === undefined) throw new Error(`no callgrind dump in ${dir}: ${readdirSync(dir).join(", ")}`)
      const ir = totalIr(path.join(dir, dump))
      const answered = result.requests.total
      const perRequest = ir / answered
      rows.push({ scenario, requests: answered, non2xx: result.non2xx, ir, irPerRequest: perRequest })
      log(`  ${scenario}: ${(perRequest / 1000).toFixed(0)}k instructions per request (${answered} requests, ${result.non2xx} non-2xx)`)
    } finally {
      await server?.stop()
      if (existsSync(dir) && !process.env.BENCH_IR_KEEP) rmSync(dir, { recursive: true, force: true })
    }
  }
  return { rows, requests, warmup, connections }
}
