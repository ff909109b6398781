/**
 * The `attestd` command line run in-process: the same Command tree `node dist/cli.mjs`
 * runs (src/Cli.ts), on an argv, with its environment given as a ConfigProvider and
 * its Console captured. A command costs milliseconds instead of a node start and a
 * bundle load (~1 s of CPU each); one smoke test per command still runs the real
 * process (test/Cli/cli.test.ts, test/Stamp/stamp.test.ts).
 *
 * Commands report their exit code through process.exitCode (as bin.ts does) and a
 * failed effect means exit 1 (NodeRuntime.runMain); a run may change the working
 * directory (relative paths in arguments and output); so runs are serialized.
 */
import { NodeContext } from "@effect/platform-node"
import { Cause, ConfigProvider, Console, Effect, Exit, Logger } from "effect"
import { Console as NodeConsole } from "node:console"
import { Writable } from "node:stream"
import { cli } from "../../src/Cli.js"
import { envOf, type ServeEnv } from "./process.js"

export interface CliRun {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

const sink = (chunks: Array<string>) =>
  new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk))
      done()
    }
  })

/** An Effect Console over a node Console (which writes to the given streams). */
const effectConsole = (unsafe: Console.UnsafeConsole): Console.Console => ({
  [Console.TypeId]: Console.TypeId,
  assert: (condition, ...args) => Effect.sync(() => unsafe.assert(condition, ...args)),
  clear: Effect.sync(() => unsafe.clear()),
  count: (label) => Effect.sync(() => unsafe.count(label)),
  countReset: (label) => Effect.sync(() => unsafe.countReset(label)),
  debug: (...args) => Effect.sync(() => unsafe.debug(...args)),
  dir: (item, options) => Effect.sync(() => unsafe.dir(item, options)),
  dirxml: (...args) => Effect.sync(() => unsafe.dirxml(...args)),
  error: (...args) => Effect.sync(() => unsafe.error(...args)),
  group: (options) => Effect.sync(() => (options?.collapsed ? unsafe.groupCollapsed(options.label) : unsafe.group(options?.label))),
  groupEnd: Effect.sync(() => unsafe.groupEnd()),
  info: (...args) => Effect.sync(() => unsafe.info(...args)),
  log: (...args) => Effect.sync(() => unsafe.log(...args)),
  table: (data, properties) => Effect.sync(() => unsafe.table(data, properties)),
  time: (label) => Effect.sync(() => unsafe.time(label)),
  timeEnd: (label) => Effect.sync(() => unsafe.timeEnd(label)),
  timeLog: (label, ...args) => Effect.sync(() => unsafe.timeLog(label, ...args)),
  trace: (...args) => Effect.sync(() => unsafe.trace(...args)),
  warn: (...args) => Effect.sync(() => unsafe.warn(...args)),
  unsafe
})

let queue: Promise<unknown> = Promise.resolve()

/**
 * `attestd ARGS…` in this process, seeing only `env` (as the process would see only
 * these variables), in `options.cwd` if given. Resolves with its exit code and what it printed.
 */
export const cliInProcess = (args: ReadonlyArray<string>, env: Record<string, string> = {}, options: { readonly cwd?: string } = {}): Promise<CliRun> => {
  const run = queue.then(async (): Promise<CliRun> => {
    const out: Array<string> = []
    const err: Array<string> = []
    const unsafe = new NodeConsole({ stdout: sink(out), stderr: sink(err), colorMode: false })
    const before = process.exitCode
    const cwd = options.cwd === undefined ? undefined : process.cwd()
    process.exitCode = undefined
    try {
      if (options.cwd !== undefined) process.chdir(options.cwd)
      const exit = await Effect.runPromiseExit(
        cli(["node", "attestd", ...args]).pipe(
          Effect.provide(NodeContext.layer),
          // commands log to stderr (bin.ts: LoggingLive toStderr)
          Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => unsafe.error(String(message))))),
          Effect.withConsole(effectConsole(unsafe)),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
        )
      )
      if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) unsafe.error(Cause.pretty(exit.cause))
      const code = Exit.isFailure(exit) ? 1 : typeof process.exitCode === "number" ? process.exitCode : Number(process.exitCode ?? 0)
      return { code, stdout: out.join(""), stderr: err.join("") }
    } finally {
      if (cwd !== undefined) process.chdir(cwd)
      process.exitCode = before
    }
  })
  queue = run.catch(() => undefined)
  return run
}

/**
 * `cliInProcess` with the settings a `node dist/cli.mjs` child gets from `runCli(e, args)`
 * (test/helpers/process.ts). It stays in the test's working directory, not the data dir:
 * the processes project runs in worker threads, which cannot change directory, so paths
 * in `args` must be absolute.
 */
export const cliInProcessFor = (e: ServeEnv, args: ReadonlyArray<string>): Promise<CliRun> =>
  cliInProcess(
    args,
    Object.fromEntries(
      Object.entries(envOf(e)).filter((entry): entry is [string, string] =>
        entry[1] !== undefined && (entry[0].startsWith("ATTESTD_") || ["PORT", "HOST", "DATABASE_URL"].includes(entry[0]))
      )
    )
  )
