/**
 * Helpers of the sealing suites:
 * - run `node dist/cli.mjs serve` (and other CLI commands) as child processes;
 * - an INDEPENDENT Merkle v2 implementation (spec 9.6, node:crypto only, no
 *   import from src/) used to check stored roots and proofs;
 * - a direct-database check of the T1 invariants (better-sqlite3 / pg), used
 *   after crash loops and multi-instance runs.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, readdirSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"

/** The few better-sqlite3 calls used here (the package ships no type declarations). */
interface SqliteDatabase {
  pragma(source: string): unknown
  prepare(source: string): { all(...params: Array<unknown>): Array<unknown> }
  close(): void
}
const Database = createRequire(import.meta.url)("better-sqlite3") as new (
  filename: string,
  options?: { readonly fileMustExist?: boolean; readonly readonly?: boolean }
) => SqliteDatabase

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..")
/**
 * The CLI child processes run: dist/cli.mjs, the package's `bin` (`npx attestd`), the
 * esbuild bundle of src/bin.ts that `npm run build` writes. It starts in ~0.5 s where
 * dist/bin.js, the same program as ~2,000 modules, takes ~1.5 s: process tests start
 * dozens of them; `npm start` runs it too.
 */
export const BIN = join(REPO_ROOT, "dist", "cli.mjs")

/** The TypeScript sources under src/ (not .d.ts), relative to `root`, with their modification times. */
const sourceFiles = (root: string): Array<{ readonly rel: string; readonly mtimeMs: number }> => {
  const files: Array<{ rel: string; mtimeMs: number }> = []
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const rel = join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) files.push({ rel, mtimeMs: statSync(join(root, rel)).mtimeMs })
    }
  }
  walk("src")
  return files
}

/** Whether a source's compiled dist/ counterpart is missing or older than it. */
const distIsStale = (root: string) => (source: { readonly rel: string; readonly mtimeMs: number }): boolean => {
  const out = join(root, "dist", relative("src", source.rel).replace(/\.ts$/, ".js"))
  return !existsSync(out) || statSync(out).mtimeMs < source.mtimeMs
}

/** When the bundle dist/cli.mjs was built (-Infinity when it is missing). */
const bundleBuiltAt = (root: string): number => {
  const bundle = join(root, "dist", "cli.mjs")
  return existsSync(bundle) ? statSync(bundle).mtimeMs : -Infinity
}

/** The src/ files whose compiled dist/ counterpart is missing or older than the source. */
export const staleDistFiles = (root = REPO_ROOT): Array<string> => sourceFiles(root).filter(distIsStale(root)).map((s) => s.rel)

/** The src/ files edited after the bundle dist/cli.mjs was built (every one of them when it is missing). */
export const staleBundleFiles = (root = REPO_ROOT): Array<string> => {
  const built = bundleBuiltAt(root)
  return sourceFiles(root).filter((s) => s.mtimeMs > built).map((s) => s.rel)
}

/**
 * Throws a clear error when dist/ or its bundle is missing or older than src/:
 * process tests must never silently run yesterday's build (`npm test` builds first).
 */
export const requireDist = (): void => {
  if (!existsSync(BIN)) throw new Error(`${BIN} is missing: build it first with npm run build`)
  // one walk of src/ for both checks
  const built = bundleBuiltAt(REPO_ROOT)
  const stale = sourceFiles(REPO_ROOT).filter((s) => s.mtimeMs > built || distIsStale(REPO_ROOT)(s)).map((s) => s.rel)
  if (stale.length > 0) {
    throw new Error(`dist/ is older than ${stale.length} source file(s) (${stale.slice(0, 3).join(", ")}…): run npm run build`)
  }
}

// ---------------------------------------------------------------------------
// Small utilities

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export const randomHex32 = (): string => {
  const bytes = new Uint8Array(32)
  crypto.getRandomValues(bytes)
  return Buffer.from(bytes).toString("hex")
}

export { freePort } from "./ports.js"

/** Polls `check` until it returns a value other than undefined/false, or throws after `timeoutMs`. */
export const waitFor = async <A>(
  label: string,
  check: () => Promise<A | undefined | false> | A | undefined | false,
  timeoutMs = 15_000,
  everyMs = 50
): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  while (Date.now() < deadline) {
    try {
      const v = await check()
      if (v !== undefined && v !== false) return v
    } catch (e) {
      lastError = e
    }
    await sleep(everyMs)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${label}${lastError ? `: ${String(lastError)}` : ""}`)
}

// ---------------------------------------------------------------------------
// Child processes

export interface ServeEnv {
  readonly databaseUrl: string
  readonly dataDir: string
  readonly port: number
  /** e.g. "200ms" */
  readonly sealInterval?: string
  readonly extra?: Record<string, string>
}

export const envOf = (e: ServeEnv): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env }
  // Settings of the parent must not leak into the child.
  for (const k of Object.keys(env)) if (k.startsWith("ATTESTD_")) delete env[k]
  return {
    ...env,
    PORT: String(e.port),
    HOST: "127.0.0.1",
    DATABASE_URL: e.databaseUrl,
    ATTESTD_DATA_DIR: e.dataDir,
    ATTESTD_SEAL_INTERVAL: e.sealInterval ?? "200ms",
    ATTESTD_DEFAULT_RATE_LIMIT: "1000000",
    // load generators and pollers all speak from 127.0.0.1: no public limit per address
    ATTESTD_PUBLIC_RATE_LIMIT: "0",
    ...e.extra
  }
}

export interface ServeProcess {
  readonly url: string
  readonly child: ChildProcess
  /** Resolves with the exit code / signal once the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** Last output lines (stdout + stderr), for diagnostics. */
  readonly output: () => string
  readonly kill: (signal?: NodeJS.Signals) => Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/**
 * Starts `node dist/cli.mjs <args>` (a long-running command: `serve`, `worker`) without
 * waiting for it; `url` is where it would serve HTTP on `e.port`.
 */
export const spawnCli = (e: ServeEnv, args: ReadonlyArray<string>): ServeProcess => {
  requireDist()
  const child = spawn(process.execPath, [BIN, ...args], { env: envOf(e), stdio: ["ignore", "pipe", "pipe"], cwd: e.dataDir })
  const lines: Array<string> = []
  const collect = (chunk: Buffer) => {
    for (const line of chunk.toString("utf8").split("\n")) {
      if (line.length === 0) continue
      lines.push(line)
      if (lines.length > 5000) lines.shift()
    }
  }
  child.stdout!.on("data", collect)
  child.stderr!.on("data", collect)
  let done = false
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) => {
    child.once("exit", (code, signal) => {
      done = true
      resolveExit({ code, signal })
    })
  })
  const url = `http://127.0.0.1:${e.port}`
  const proc: ServeProcess = {
    url,
    child,
    exited,
    output: () => lines.join("\n"),
    kill: async (signal = "SIGKILL") => {
      if (!done) child.kill(signal)
      return exited
    }
  }
  return proc
}

/** Starts `node dist/cli.mjs serve` (or `args`) and resolves once GET /v1/healthz answers 200. */
export const startServe = async (e: ServeEnv, readyTimeoutMs = 30_000, args: ReadonlyArray<string> = ["serve"]): Promise<ServeProcess> => {
  const proc = spawnCli(e, args)
  let done = false
  void proc.exited.then(() => {
    done = true
  })
  const url = proc.url
  const exited = proc.exited
  const deadline = Date.now() + readyTimeoutMs
  while (true) {
    if (done) throw new Error(`attestd serve exited before it was ready (${JSON.stringify(await exited)}):\n${proc.output()}`)
    try {
      const res = await fetch(`${url}/v1/healthz`, { signal: AbortSignal.timeout(2000) })
      await res.arrayBuffer()
      if (res.status === 200) return proc
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await proc.kill("SIGKILL")
      throw new Error(`attestd serve on ${url} not ready after ${readyTimeoutMs} ms:\n${proc.output()}`)
    }
    await sleep(50)
  }
}

/** Runs `node dist/cli.mjs <args>` to completion. */
export const runCli = (e: ServeEnv, args: ReadonlyArray<string>): Promise<{ code: number; stdout: string; stderr: string }> => {
  requireDist()
  return new Promise((resolveRun) => {
    execFile(process.execPath, [BIN, ...args], { env: envOf(e), cwd: e.dataDir, encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0
      resolveRun({ code, stdout, stderr })
    })
  })
}

/** `attestd keys create --label k --scopes attest,batch`; returns the plaintext key. */
export const createKeyCli = async (e: ServeEnv, scopes = "attest,batch"): Promise<string> => {
  const r = await runCli(e, ["keys", "create", "--label", "k", "--scopes", scopes])
  if (r.code !== 0) throw new Error(`keys create failed (${r.code}): ${r.stderr}`)
  const line = r.stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()
  if (!line) throw new Error(`keys create printed no JSON: ${r.stdout}`)
  const parsed = JSON.parse(line) as { key: string }
  return parsed.key
}

// ---------------------------------------------------------------------------
// Independent Merkle v2 (spec 9.6): leaves sorted, node = SHA-256(0x01 ‖ left ‖ right),
// odd node paired with itself, one-leaf root = the leaf.

const sha256 = (b: Buffer): Buffer => createHash("sha256").update(b).digest()
const node = (l: Buffer, r: Buffer): Buffer => sha256(Buffer.concat([Buffer.from([0x01]), l, r]))

/** Every level of the tree, leaves (sorted) first, root last; each level as concatenated 32-byte nodes. */
export const merkleLevelsV2 = (leavesHex: ReadonlyArray<string>): Array<Buffer> => {
  if (leavesHex.length === 0) throw new Error("no leaves")
  let level: Array<Buffer> = [...leavesHex].sort().map((h) => Buffer.from(h, "hex"))
  const out: Array<Buffer> = [Buffer.concat(level)]
  while (level.length > 1) {
    const next: Array<Buffer> = []
    for (let i = 0; i < level.length; i += 2) next.push(node(level[i]!, level[i + 1] ?? level[i]!))
    level = next
    out.push(Buffer.concat(level))
  }
  return out
}

export const merkleRootV2 = (leavesHex: ReadonlyArray<string>): string => merkleLevelsV2(leavesHex).at(-1)!.toString("hex")

/** The root a proof leads to from the leaf ("left": the sibling is the LEFT operand). */
export const rootFromProofV2 = (leafHex: string, proof: ReadonlyArray<{ hash: string; position: string }>): string => {
  let cur: Buffer = Buffer.from(leafHex, "hex")
  for (const step of proof) {
    if (!/^[0-9a-f]{64}$/.test(step.hash)) throw new Error(`bad proof hash ${step.hash}`)
    const sib = Buffer.from(step.hash, "hex")
    if (step.position === "left") cur = node(sib, cur)
    else if (step.position === "right") cur = node(cur, sib)
    else throw new Error(`bad proof position ${String(step.position)}`)
  }
  return cur.toString("hex")
}

/** Expected proof length for a leaf of a tree of n leaves: ceil(log2 n). */
export const proofLength = (n: number): number => (n <= 1 ? 0 : Math.ceil(Math.log2(n)))

// ---------------------------------------------------------------------------
// Direct database access and the T1 invariants

export interface Row {
  readonly [k: string]: unknown
}

/** Runs read queries against the store of `databaseUrl` (sqlite:PATH or postgres://). */
export const withDb = async <A>(databaseUrl: string, f: (query: (sql: string) => Promise<Array<Row>>) => Promise<A>): Promise<A> => {
  if (databaseUrl.startsWith("sqlite:")) {
    const db = new Database(databaseUrl.slice("sqlite:".length), { fileMustExist: true })
    try {
      db.pragma("busy_timeout = 10000")
      return await f(async (q) => db.prepare(q).all() as Array<Row>)
    } finally {
      db.close()
    }
  }
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    return await f(async (q) => (await client.query(q)).rows as Array<Row>)
  } finally {
    await client.end()
  }
}

export interface SealingSnapshot {
  readonly attestations: number
  readonly byLevel: Record<string, number>
  readonly batches: number
  readonly violations: ReadonlyArray<string>
  /** hash_hex → id */
  readonly ids: ReadonlyMap<string, string>
  readonly hashCounts: ReadonlyMap<string, number>
  readonly windowEnds: ReadonlyArray<string>
}

const bytesOf = (v: unknown): Buffer => Buffer.from(v as Uint8Array)

/**
 * Checks every T1 invariant straight from the tables:
 * - a batch's leaf_count equals the number of attestations carrying its batch_id;
 * - no T1 attestation lacks batch_id / leaf_index / t1_at, no T0 attestation has them;
 * - each attestation hash appears in exactly one batch's stored leaves (level 0 of
 *   merkle_chunks), and a batch's stored leaves are exactly the sorted hashes of its
 *   attestations; leaf_index is the position in that order;
 * - every stored level equals an independent Merkle v2 recomputation, and the
 *   batch's merkle_root is the recomputed root;
 * - the outbox holds exactly one t1_complete per T1 attestation and none for T0;
 * - window_end is unique.
 */
export const checkSealingInvariants = async (databaseUrl: string): Promise<SealingSnapshot> =>
  withDb(databaseUrl, async (query) => {
    const violations: Array<string> = []
    const atts = await query("SELECT seq, id, hash_hex, level, batch_id, leaf_index, t1_at FROM attestations ORDER BY seq")
    const batches = await query("SELECT id, window_end, merkle_root, leaf_count FROM batches ORDER BY id")
    const chunks = await query("SELECT batch_id, level, chunk, nodes FROM merkle_chunks ORDER BY batch_id, level, chunk")
    const outbox = await query(
      "SELECT attestation_seq, COUNT(*) AS n FROM outbox WHERE event_type = 't1_complete' GROUP BY attestation_seq"
    )

    const byLevel: Record<string, number> = { T0: 0, T1: 0, T2: 0 }
    const ids = new Map<string, string>()
    const hashCounts = new Map<string, number>()
    const byBatch = new Map<number, Array<{ hash: string; leafIndex: number | null; seq: number }>>()
    for (const a of atts) {
      const hash = String(a.hash_hex)
      const level = String(a.level)
      byLevel[level] = (byLevel[level] ?? 0) + 1
      ids.set(hash, String(a.id))
      hashCounts.set(hash, (hashCounts.get(hash) ?? 0) + 1)
      const batchId = a.batch_id === null ? null : Number(a.batch_id)
      const leafIndex = a.leaf_index === null ? null : Number(a.leaf_index)
      if (level === "T0") {
        if (batchId !== null || leafIndex !== null || a.t1_at !== null) violations.push(`T0 attestation ${a.id} has T1 data (batch ${batchId})`)
      } else {
        if (batchId === null) violations.push(`${level} attestation ${a.id} lacks batch_id`)
        if (leafIndex === null) violations.push(`${level} attestation ${a.id} lacks leaf_index`)
        if (a.t1_at === null) violations.push(`${level} attestation ${a.id} lacks t1_at`)
      }
      if (batchId !== null) {
        let list = byBatch.get(batchId)
        if (!list) byBatch.set(batchId, list = [])
        list.push({ hash, leafIndex, seq: Number(a.seq) })
      }
    }
    for (const [hash, n] of hashCounts) if (n !== 1) violations.push(`hash ${hash} stored ${n} times`)

    const batchIds = new Set(batches.map((b) => Number(b.id)))
    for (const id of byBatch.keys()) if (!batchIds.has(id)) violations.push(`attestations reference missing batch ${id}`)

    const windowCounts = new Map<string, number>()
    for (const b of batches) windowCounts.set(String(b.window_end), (windowCounts.get(String(b.window_end)) ?? 0) + 1)
    for (const [w, n] of windowCounts) if (n > 1) violations.push(`window ${w} sealed ${n} times`)

    const chunksOf = new Map<number, Map<number, Array<{ chunk: number; nodes: Buffer }>>>()
    for (const c of chunks) {
      const b = Number(c.batch_id)
      let levels = chunksOf.get(b)
      if (!levels) chunksOf.set(b, levels = new Map())
      let list = levels.get(Number(c.level))
      if (!list) levels.set(Number(c.level), list = [])
      list.push({ chunk: Number(c.chunk), nodes: bytesOf(c.nodes) })
    }
    for (const b of chunksOf.keys()) if (!batchIds.has(b)) violations.push(`merkle_chunks of missing batch ${b}`)

    const leafOwner = new Map<string, number>()
    for (const b of batches) {
      const id = Number(b.id)
      const members = byBatch.get(id) ?? []
      if (Number(b.leaf_count) !== members.length) {
        violations.push(`batch ${id}: leaf_count ${b.leaf_count} but ${members.length} attestations`)
      }
      if (members.length === 0) {
        violations.push(`batch ${id} has no attestations`)
        continue
      }
      const sorted = members.map((m) => m.hash).sort()
      for (const m of members) {
        if (m.leafIndex !== sorted.indexOf(m.hash)) violations.push(`batch ${id}: leaf ${m.hash} has leaf_index ${m.leafIndex}, expected ${sorted.indexOf(m.hash)}`)
      }
      const expected = merkleLevelsV2(sorted)
      const root = expected.at(-1)!.toString("hex")
      if (root !== b.merkle_root) violations.push(`batch ${id}: merkle_root ${b.merkle_root} != recomputed ${root}`)
      const stored = chunksOf.get(id)
      if (!stored) {
        violations.push(`batch ${id} has no merkle_chunks`)
        continue
      }
      if (stored.size !== expected.length) violations.push(`batch ${id}: ${stored.size} stored levels, expected ${expected.length}`)
      expected.forEach((levelBytes, l) => {
        const parts = (stored.get(l) ?? []).sort((x, y) => x.chunk - y.chunk)
        parts.forEach((p, i) => {
          if (p.chunk !== i) violations.push(`batch ${id} level ${l}: chunk ${p.chunk} at position ${i}`)
        })
        const joined = Buffer.concat(parts.map((p) => p.nodes))
        if (!joined.equals(levelBytes)) violations.push(`batch ${id} level ${l}: stored nodes differ from the recomputed level`)
      })
      const leaves = Buffer.concat((stored.get(0) ?? []).sort((x, y) => x.chunk - y.chunk).map((p) => p.nodes))
      for (let off = 0; off + 32 <= leaves.length; off += 32) {
        const h = leaves.subarray(off, off + 32).toString("hex")
        const owner = leafOwner.get(h)
        if (owner !== undefined && owner !== id) violations.push(`hash ${h} is a leaf of batches ${owner} and ${id}`)
        leafOwner.set(h, id)
      }
    }

    const events = new Map(outbox.map((o) => [Number(o.attestation_seq), Number(o.n)]))
    for (const a of atts) {
      const n = events.get(Number(a.seq)) ?? 0
      const expectedEvents = a.level === "T0" ? 0 : 1
      if (n !== expectedEvents) violations.push(`attestation ${a.id} (${a.level}) has ${n} t1_complete events, expected ${expectedEvents}`)
    }
    const seqs = new Set(atts.map((a) => Number(a.seq)))
    for (const seq of events.keys()) if (!seqs.has(seq)) violations.push(`t1_complete event for unknown attestation seq ${seq}`)

    return {
      attestations: atts.length,
      byLevel,
      batches: batches.length,
      violations,
      ids,
      hashCounts,
      windowEnds: batches.map((b) => String(b.window_end))
    }
  })

// ---------------------------------------------------------------------------
// A client's POST of an idempotent request (an attest: the same hash answers the same id).

/** Whether a fetch failed because the server closed the connection before any answer. */
const closedBeforeAnswer = (e: unknown): boolean =>
  e instanceof TypeError && typeof e.cause === "object" && e.cause !== null && (e.cause as { code?: unknown }).code === "UND_ERR_SOCKET"

/**
 * `fetch`, sent once more when the connection closed before an answer, as a production client
 * does for an idempotent request (RFC 9112 §9.3.1.1; attestd's client retries attests too).
 * A keep-alive connection idle for the server's timeout (ATTESTD_KEEP_ALIVE_TIMEOUT, of which
 * the client is told) can be closed by the server just as a client whose timer ran late (a
 * loaded test machine) sends on it; no server can prevent that race, only make it rarer.
 */
export const postIdempotent = async (url: string, init: RequestInit): Promise<Response> => {
  try {
    return await fetch(url, init)
  } catch (e) {
    if (!closedBeforeAnswer(e)) throw e
    // shown with a failing test's output: how often the race was met
    console.log(`[client] ${url}: the connection closed before an answer; sent once more`)
    return fetch(url, init)
  }
}

// ---------------------------------------------------------------------------
// A load generator: attests batches of fresh hashes and records what the server acknowledged.

export interface AckLog {
  /** hash_hex → attestation id, for every hash acknowledged with 200/201. */
  readonly acked: Map<string, string>
  sent: number
  /** Why each failed request failed (status and body, or the error), for the assertion's message. */
  readonly failures: Array<string>
}

export const newAckLog = (): AckLog => ({ acked: new Map(), sent: 0, failures: [] })

/**
 * Sends attest requests (batches of `batchSize` fresh hashes, every fourth
 * request a single attest) to `urls()` with `concurrency` loops until `stop()`
 * returns true. Connection errors (a killed server) are counted, not thrown.
 */
export const attestLoad = async (options: {
  readonly urls: () => ReadonlyArray<string>
  readonly key: string
  readonly stop: () => boolean
  readonly log: AckLog
  readonly concurrency?: number
  readonly batchSize?: number
  /** Hashes to re-send now and then (idempotency across requests / instances). */
  readonly shared?: ReadonlyArray<string>
}): Promise<void> => {
  const { log } = options
  const batchSize = options.batchSize ?? 20
  let turn = 0
  const one = async (): Promise<void> => {
    while (!options.stop()) {
      const urls = options.urls()
      const base = urls[turn++ % urls.length]!
      const single = turn % 4 === 0
      const hashes = single ? [randomHex32()] : Array.from({ length: batchSize }, randomHex32)
      if (!single && options.shared && options.shared.length > 0 && turn % 3 === 0) {
        hashes.push(options.shared[turn % options.shared.length]!)
      }
      log.sent += hashes.length
      try {
        const res = await postIdempotent(single ? `${base}/v1/attest` : `${base}/v1/attest/batch`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${options.key}` },
          body: JSON.stringify(single ? { hash_hex: hashes[0] } : { hashes }),
          signal: AbortSignal.timeout(10_000)
        })
        const text = await res.text()
        if (res.status === 200 || res.status === 201) {
          const body = JSON.parse(text) as { id?: string; hash_hex?: string; attestations?: Array<{ id: string; hash_hex: string }> }
          const items = single ? [{ id: body.id!, hash_hex: body.hash_hex! }] : body.attestations ?? []
          for (const item of items) {
            const prev = log.acked.get(item.hash_hex)
            if (prev !== undefined && prev !== item.id) throw new Error(`hash ${item.hash_hex} acknowledged with ids ${prev} and ${item.id}`)
            log.acked.set(item.hash_hex, item.id)
          }
        } else {
          log.failures.push(`${new Date().toISOString()} ${base} ${res.status} ${text.slice(0, 300)}`)
          await sleep(20)
        }
      } catch (e) {
        if (e instanceof Error && e.message.startsWith("hash ")) throw e
        const cause = e instanceof Error && e.cause instanceof Error ? ` (${e.cause.message})` : ""
        log.failures.push(`${new Date().toISOString()} ${base} ${e instanceof Error ? e.message : String(e)}${cause}`)
        await sleep(20)
      }
    }
  }
  await Promise.all(Array.from({ length: options.concurrency ?? 3 }, one))
}
