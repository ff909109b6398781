/**
 * The command line as a person uses it, one table: argv → exit code, stdout, stderr of the
 * built CLI (`node dist/cli.mjs …`, stdout and stderr pipes, not terminals). Help without
 * colour codes or padding and with a description for every option; an unknown option is a
 * usage error (exit 2) naming it, never a file name; usage errors and unreadable input exit
 * 2 in every command; a failure is one line, no stack trace; a server that is not there
 * fails at once with its address and the reason; every configuration variable is a serve flag.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { COMMANDS } from "../../src/Cli.js"
import { BIN, requireDist, REPO_ROOT } from "../helpers/process.js"
import { freePort } from "../helpers/server.js"

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
  readonly ms: number
}

let dir: string
let port: number

const run = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> => {
  const base: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: "" }
  for (const k of Object.keys(base)) if (k.startsWith("ATTESTD_") || k === "NO_COLOR" || k === "PORT" || k === "DATABASE_URL") delete base[k]
  const started = Date.now()
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: dir, env: { ...base, ATTESTD_DATA_DIR: join(dir, "data"), ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout: String(stdout), stderr: String(stderr), ms: Date.now() - started })
    })
  })
}

/** The configuration variables of src/Platform/Config.ts. */
const configVariables = (): Array<string> => {
  const source = readFileSync(join(REPO_ROOT, "src", "Platform", "Config.ts"), "utf8")
  return [...new Set([...source.matchAll(/(?:Config\.\w+|duration|durationList|urlList|count|literal\([^)]*\))\("((?:ATTESTD_)?[A-Z_]+)"/g)].map((m) => m[1]!))].sort()
}

const NO_STACK = (r: Run) => {
  expect(r.stderr, r.stderr).not.toMatch(/^\s+at /m)
  expect(r.stderr).not.toMatch(/"cause"|\{"time"/)
}
const ONE_LINE = (r: Run) => expect(r.stderr.trimEnd().split("\n"), r.stderr).toHaveLength(1)
const PLAIN_HELP = (r: Run) => {
  expect(r.stdout).not.toMatch(/\u001b/)
  for (const line of r.stdout.split("\n")) {
    expect(line, JSON.stringify(line.slice(0, 80))).not.toMatch(/\s$/)
    expect(line, JSON.stringify(line.slice(0, 80))).not.toMatch(/ {8,}/)
  }
  expect(r.stdout).not.toMatch(/A user-defined piece of text|A true or false value\.|An integer\./)
}
/** Every option heading (`--name …`) is followed by a line of its own description, not only @effect/cli's boilerplate. */
const DESCRIBED = (r: Run) => {
  const lines = r.stdout.split("\n")
  const builtIn = /^(--completions|--log-level|\(-h, --help\)|--wizard|--version)/
  lines.forEach((line, i) => {
    if (!/^(--|\(-)/.test(line) || builtIn.test(line)) return
    const text = lines.slice(i + 1, i + 8).filter((l) => l.startsWith("  ") && !/^  (One of the following|This setting is optional|This option may be repeated)/.test(l))
    expect(text.length, `${line} has no description`).toBeGreaterThan(0)
  })
}

interface Case {
  readonly argv: ReadonlyArray<string>
  readonly env?: Record<string, string>
  readonly code: number
  readonly stdout?: RegExp | "" | ((r: Run) => void)
  readonly stderr?: RegExp | "" | ((r: Run) => void)
  readonly check?: ReadonlyArray<(r: Run) => void>
}

const cases = (): ReadonlyArray<Case> => [
  // help
  { argv: ["--help"], code: 0, stdout: /COMMANDS/, check: [PLAIN_HELP, DESCRIBED] },
  { argv: ["stamp", "--help"], code: 0, stdout: /--server/, check: [PLAIN_HELP, DESCRIBED] },
  { argv: ["verify", "--help"], code: 0, stdout: /--tsa-ca/, check: [PLAIN_HELP, DESCRIBED] },
  { argv: ["list", "--help"], code: 0, stdout: /--level/, check: [PLAIN_HELP, DESCRIBED] },
  { argv: ["keys", "create", "--help"], code: 0, stdout: /attest, batch, metadata:read, metadata:write, tags:read, tags:write/, check: [PLAIN_HELP, DESCRIBED] },
  ...[["upgrade"], ["worker"], ["brand", "set"], ["keys", "revoke"], ["keys", "list"], ["healthcheck"], ["backup"], ["restore"], ["import"], ["migrate"]].map(
    (command): Case => ({ argv: [...command, "--help"], code: 0, stdout: /USAGE/, check: [PLAIN_HELP, DESCRIBED] })
  ),
  { argv: ["serve", "--help"], code: 0, stdout: (r) => {
    for (const variable of configVariables()) expect(r.stdout, `serve --help names ${variable}`).toContain(`same as ${variable}`)
  }, check: [PLAIN_HELP, DESCRIBED] },
  // unknown options and commands: usage errors naming them, never file names
  { argv: ["stamp", "--sorce", "erp", "f"], code: 2, stdout: "", stderr: /unknown option --sorce/, check: [ONE_LINE, NO_STACK, () => expect(readdirSync(dir).filter((f) => /^(erp|f|--sorce)\.attestd\.json$/.test(f))).toEqual([])] },
  { argv: ["verify", "--bogus", "x"], code: 2, stdout: "", stderr: /unknown option --bogus/, check: [ONE_LINE, NO_STACK] },
  { argv: ["upgrade", "r.attestd.json", "--wiat", "T1"], code: 2, stdout: "", stderr: /unknown option --wiat/, check: [ONE_LINE, NO_STACK] },
  { argv: ["keys", "create", "--label", "x", "--scope", "attest"], code: 2, stderr: /unknown option --scope\b/, check: [ONE_LINE, NO_STACK] },
  { argv: ["serve", "--metrics-prot", "9"], code: 2, stderr: /unknown option --metrics-prot/, check: [ONE_LINE, NO_STACK] },
  { argv: ["frobnicate"], code: 2, stderr: /subcommand/, check: [ONE_LINE, NO_STACK] },
  { argv: ["keys", "create", "--label", "x", "--rate-limit", "-5"], code: 2, stderr: /--rate-limit must be at least 1/, check: [ONE_LINE, NO_STACK] },
  // other usage errors and unreadable input
  { argv: ["keys", "create", "--label", "x", "--scopes", ""], code: 2, stdout: "", stderr: /--scopes names no scope/, check: [ONE_LINE, NO_STACK] },
  { argv: ["keys", "create", "--label", "x", "--scopes", "attest,fly"], code: 2, stderr: /unknown scope\(s\): fly/, check: [ONE_LINE, NO_STACK] },
  { argv: ["verify"], code: 2, stderr: /Missing argument/, check: [NO_STACK] },
  { argv: ["verify", "missing.json"], code: 2, stderr: /cannot read bundle/, check: [ONE_LINE, NO_STACK] },
  { argv: ["verify", "not-json.json"], code: 2, stderr: /not JSON/, check: [ONE_LINE, NO_STACK] },
  { argv: ["stamp", "missing.txt", "--server", "http://127.0.0.1:1"], code: 2, check: [NO_STACK] },
  { argv: ["upgrade", "missing.attestd.json", "--server", "http://127.0.0.1:1"], code: 2, check: [NO_STACK] },
  { argv: ["stamp", "data.txt"], code: 2, stderr: /no server/, check: [ONE_LINE, NO_STACK] },
  { argv: ["list"], env: { ATTESTD_URL: "http://127.0.0.1:1" }, code: 2, stderr: /no API key/, check: [ONE_LINE, NO_STACK] },
  { argv: ["brand", "set", "acme", "--file", "not-json.json"], code: 2, stderr: /cannot read not-json\.json/, check: [ONE_LINE, NO_STACK] },
  { argv: ["serve", "--port", "abc"], code: 2, stderr: /PORT \(--port\)/, check: [ONE_LINE, NO_STACK] },
  { argv: ["serve", "--metrics-port", "abc"], code: 2, stderr: /ATTESTD_METRICS_PORT \(--metrics-port\)/, check: [ONE_LINE, NO_STACK] },
  { argv: ["serve", "--default-rate-limit", "many"], code: 2, stderr: /ATTESTD_DEFAULT_RATE_LIMIT \(--default-rate-limit\)/, check: [ONE_LINE, NO_STACK] },
  // user errors: one clear line; a server that is not there: at once, with the address and the reason
  { argv: ["keys", "revoke", "key_nothing"], code: 1, stderr: /no active key key_nothing/, check: [ONE_LINE, NO_STACK] },
  { argv: ["stamp", "data.txt", "--server", "http://127.0.0.1:{port}"], code: 1, stderr: /127\.0\.0\.1:{port}.*connection refused/, check: [ONE_LINE, NO_STACK] },
  { argv: ["upgrade", "stamped.attestd.json", "--server", "http://127.0.0.1:{port}"], code: 1, stderr: /127\.0\.0\.1:{port}.*connection refused/, check: [NO_STACK] },
  { argv: ["list", "--server", "http://127.0.0.1:{port}", "--key", "atk_test_x"], code: 1, stderr: /connection refused/, check: [ONE_LINE, NO_STACK] },
  { argv: ["verify", "stamped.attestd.json", "--server", "http://127.0.0.1:{port}"], code: 2, stderr: /127\.0\.0\.1:{port}.*connection refused/, check: [ONE_LINE, NO_STACK] }
]

describe("attestd as a person uses it (the built CLI)", () => {
  beforeAll(async () => {
    requireDist()
    dir = mkdtempSync(join(tmpdir(), "attestd-usage-"))
    port = await freePort()
    writeFileSync(join(dir, "not-json.json"), "{ nope")
    writeFileSync(join(dir, "data.txt"), "data\n")
    writeFileSync(join(dir, "stamped.attestd.json"), JSON.stringify({ id: "att_AAAAAAAAAAAAAAAAAAAAAAAA", hash_hex: "0".repeat(64), level: "T0", t0: {} }))
  })
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  it("the unknown-option check knows every command the help lists", async () => {
    const help = await run(["--help"])
    const listed = help.stdout.split("\n").flatMap((l) => {
      const m = /^  - ([a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)*)/.exec(l)
      return m ? [m[1]!] : []
    })
    const runnable = listed.filter((p) => !listed.some((q) => q.startsWith(`${p} `)))
    expect([...COMMANDS.keys()].sort()).toEqual(runnable.sort())
  })

  // Each case is a process of its own: they run a few at a time (vitest's maxConcurrency).
  for (const c of cases()) {
    it.concurrent(`attestd ${c.argv.map((a) => (a === "" ? "''" : a)).join(" ")} → ${c.code}`, async () => {
      const argv = c.argv.map((a) => a.replace("{port}", String(port)))
      const r = await run(argv, c.env)
      expect(r.code, `stdout: ${r.stdout}\nstderr: ${r.stderr}`).toBe(c.code)
      for (const [what, expected] of [["stdout", c.stdout], ["stderr", c.stderr]] as const) {
        if (expected === undefined) continue
        if (expected === "") expect(r[what], what).toBe("")
        else if (typeof expected === "function") expected(r)
        else expect(r[what], what).toMatch(new RegExp(expected.source.replace("{port}", String(port))))
      }
      for (const check of c.check ?? []) check(r)
    })
  }
})
