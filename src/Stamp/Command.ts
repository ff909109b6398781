/**
 * `attestd stamp FILE…` and `attestd upgrade FILE.attestd.json…`: thin shells over
 * Stamp.ts and Upgrade.ts, talking to the server only through the Promise client
 * (no server code is loaded).
 *
 * stamp   exit 0 every file stamped, 1 some file failed (each reported), 2 bad invocation
 *         or a file that cannot be read (the others are still stamped).
 * upgrade exit 0 every receipt at the level asked, 1 some receipt failed (server error,
 *         evidence that does not match or verify), 2 bad invocation or a receipt that
 *         cannot be read (the others are still upgraded), 3 some receipt still below the
 *         level asked (pending; nothing wrong).
 * stdout carries one JSON report; stderr a progress bar (TTY) or a summary line.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Config, Effect, Option } from "effect"
import { errorMessage, parseDurationMs, progressBar } from "./Files.js"
import { parseHmacKey } from "./Receipt.js"
import { stampFiles } from "./Stamp.js"
import { type Level, upgradeExitCode, upgradeReceipts } from "./Upgrade.js"

export class UsageError extends Error {}

/** What a command body may touch besides its files: ATTESTD_URL / ATTESTD_API_KEY, and Console for its output. */
export interface Io {
  readonly env: { readonly url: string; readonly apiKey: string }
  /** one line on stdout */
  readonly out: (line: string) => void
  /** one line on stderr */
  readonly err: (line: string) => void
}

export const serverOf = (flag: Option.Option<string>, io: Io): string => {
  const url = Option.getOrElse(flag, () => io.env.url)
  if (url === "") throw new UsageError("no server: give --server URL or set ATTESTD_URL")
  let u: URL
  try {
    u = new URL(url)
  } catch {
    throw new UsageError(`--server ${url} is not a URL`)
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`--server ${url} is not an http(s) URL`)
  return u.href.replace(/\/+$/, "").replace(/\/v1$/, "")
}

export const keyOf = (flag: Option.Option<string>, io: Io): string | undefined => {
  const k = Option.getOrElse(flag, () => io.env.apiKey)
  return k === "" ? undefined : k
}

/** Runs a command body; a UsageError prints `{ok:false,error}` and exits 2. */
export const shell = (name: string, body: (io: Io) => Promise<number>) =>
  Effect.gen(function*() {
    const console = yield* Effect.console
    const env = yield* Config.all({
      url: Config.string("ATTESTD_URL").pipe(Config.withDefault("")),
      apiKey: Config.string("ATTESTD_API_KEY").pipe(Config.withDefault(""))
    }).pipe(Effect.orDie)
    const io: Io = { env, out: (line) => console.unsafe.log(line), err: (line) => console.unsafe.error(line) }
    const code = yield* Effect.promise(() =>
      body(io).catch(async (e: unknown) => {
        const message = errorMessage(e)
        io.err(`attestd ${name}: ${message}`)
        io.out(JSON.stringify({ ok: false, error: message }))
        return e instanceof UsageError ? 2 : 1
      })
    )
    yield* Effect.sync(() => {
      process.exitCode = code
    })
  })

export const serverOption = Options.text("server").pipe(
  Options.withDescription("the attestd instance (default: ATTESTD_URL)"),
  Options.optional
)
export const keyOption = Options.text("key").pipe(
  Options.withDescription("API key (default: ATTESTD_API_KEY, which keeps it out of the process list)"),
  Options.optional
)

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

export const stampCommand = Command.make(
  "stamp",
  {
    files: Args.file({ name: "FILE", exists: "either" }).pipe(Args.withDescription("the files to stamp: each is hashed here, never uploaded"), Args.atLeast(1)),
    server: serverOption,
    key: keyOption,
    source: Options.text("source").pipe(Options.withDescription("source label stored with each claim"), Options.optional),
    extraData: Options.text("extra-data").pipe(Options.withDescription("a JSON object stored with each claim"), Options.optional),
    hmacKey: Options.text("hmac-key").pipe(
      Options.withDescription("hex key: attest HMAC-SHA256(key, hex SHA-256 of the file) instead of the SHA-256 (low-entropy files); the receipt records this, never the key"),
      Options.optional
    )
  },
  (a) =>
    shell("stamp", async (io) => {
      const server = serverOf(a.server, io)
      let extraData: Record<string, unknown> | undefined
      if (Option.isSome(a.extraData)) {
        let parsed: unknown
        try {
          parsed = JSON.parse(a.extraData.value)
        } catch (e) {
          throw new UsageError(`--extra-data is not JSON: ${errorMessage(e)}`)
        }
        if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new UsageError("--extra-data must be a JSON object")
        extraData = parsed as Record<string, unknown>
      }
      let hmacKey: Uint8Array | undefined
      if (Option.isSome(a.hmacKey)) {
        try {
          hmacKey = parseHmacKey(a.hmacKey.value)
        } catch (e) {
          throw new UsageError(errorMessage(e))
        }
      }
      const bar = process.stderr.isTTY ? progressBar(process.stderr, "stamping") : null
      const summary = await stampFiles({
        files: a.files,
        server,
        apiKey: keyOf(a.key, io),
        source: Option.getOrUndefined(a.source),
        extraData,
        hmacKey,
        ...(bar ? { onProgress: bar.update } : {})
      })
      bar?.finish(summary.files.length, a.files.length)
      for (const f of summary.files) if (!f.ok) io.err(`attestd stamp: ${f.file}: ${f.error}`)
      io.out(JSON.stringify({ ok: summary.failed === 0, ...summary }))
      io.err(
        `stamped ${summary.stamped} of ${a.files.length} file(s)${summary.failed > 0 ? `, ${summary.failed} failed` : ""} in ${seconds(summary.elapsedMs)}` +
          ` (${summary.requests} requests, ${summary.retries} retried)`
      )
      return summary.files.some((f) => !f.ok && f.error.startsWith("cannot read")) ? 2 : summary.failed === 0 ? 0 : 1
    })
).pipe(Command.withDescription("hash files locally (never uploaded), attest them in batches of 100, check each answer against the instance's published keys, write FILE.attestd.json beside each; exit 0 all stamped, 1 some failed, 2 bad invocation or unreadable file"))

export const upgradeCommand = Command.make(
  "upgrade",
  {
    receipts: Args.file({ name: "FILE.attestd.json", exists: "either" }).pipe(Args.withDescription("receipts written by attestd stamp"), Args.atLeast(1)),
    server: serverOption,
    key: keyOption,
    wait: Options.choice("wait", ["T1", "T2"]).pipe(
      Options.withDescription("poll with backoff until every receipt reached this level (or --timeout)"),
      Options.optional
    ),
    timeout: Options.text("timeout").pipe(Options.withDescription("how long --wait may poll: 500ms, 30s, 10m, 24h (default 10m)"), Options.optional)
  },
  (a) =>
    shell("upgrade", async (io) => {
      const server = serverOf(a.server, io)
      const target: Level = Option.getOrElse(a.wait, () => "T2" as const)
      let waitMs: number | undefined
      if (Option.isSome(a.wait)) {
        const t = Option.getOrElse(a.timeout, () => "10m")
        const ms = parseDurationMs(t)
        if (ms === null) throw new UsageError(`--timeout ${t} is not a duration (500ms, 30s, 10m, 24h)`)
        waitMs = ms
      } else if (Option.isSome(a.timeout)) throw new UsageError("--timeout needs --wait T1|T2")
      const summary = await upgradeReceipts({
        receipts: a.receipts,
        server,
        apiKey: keyOf(a.key, io),
        target,
        waitMs,
        ...(process.stderr.isTTY
          ? { onPass: (pass: number, pending: number) => process.stderr.write(`\rupgrade pass ${pass}: ${pending} below ${target}   `) }
          : {})
      })
      if (process.stderr.isTTY && summary.passes > 0) process.stderr.write("\n")
      for (const r of summary.receipts) if (r.error !== null) io.err(`attestd upgrade: ${r.receipt}: ${r.error}`)
      io.out(JSON.stringify({ ok: upgradeExitCode(summary) === 0, target, ...summary }))
      const upgraded = summary.receipts.filter((r) => r.upgraded).length
      io.err(
        `${summary.reached} of ${summary.receipts.length} receipt(s) at ${target}, ${upgraded} upgraded, ${summary.pending} pending, ${summary.failed} failed` +
          ` (${seconds(summary.elapsedMs)}, ${summary.requests} requests)`
      )
      return upgradeExitCode(summary)
    })
).pipe(Command.withDescription("fetch the latest evidence for receipts, check it against the instance's published trust, rewrite them when the level rose (id, hash and T0 kept), write FILE.ots; exit 0 all at the level asked (T2 unless --wait), 1 some failed, 2 bad invocation or unreadable receipt, 3 some still pending"))
