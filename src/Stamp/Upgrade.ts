/**
 * `attestd upgrade FILE.attestd.json…`: asks the server for the latest evidence of
 * each receipt and rewrites the receipt when the level rose (T0 → T1 → T2); writes
 * `FILE.ots` (the standard OpenTimestamps file, its digest the file's SHA-256) as
 * soon as the server has a calendar proof, and again when it changes (pending →
 * Bitcoin-confirmed). With `wait`, polls with backoff until every receipt has reached
 * the level asked, or the timeout.
 *
 * A receipt's id, hash_hex and whole t0 are what it proves; an upgrade never changes
 * them. An answer that names another id or hash, or carries another t0 (a back-dated
 * one signed by another key, say), is refused; the new tiers are verified (Check.ts)
 * against the keys and TSA anchors the instance publishes before the receipt is
 * rewritten; so a confused, spoofed or hostile server cannot overwrite good evidence.
 */
import { existsSync, readFileSync } from "node:fs"
import { AttestdError, createClient, type RetryOptions } from "../Client/Client.js"
import { base64ToBytes, bytesToHex } from "../Domain/Bytes.js"
import { parseDetachedFile } from "../Domain/Ots.js"
import { type PublishedTrust, publishedTrust } from "./PublishedTrust.js"
import { refusalOf } from "./Check.js"
import { dataPathOf, errorMessage, mapLimit, writeAtomic } from "./Files.js"
import { parseReceipt, type Receipt, receiptDocument } from "./Receipt.js"

export type Level = "T0" | "T1" | "T2"
const rank = (l: unknown): number => ["T0", "T1", "T2"].indexOf(l as string)

export interface UpgradeOptions {
  readonly receipts: ReadonlyArray<string>
  readonly server: string
  readonly apiKey?: string | undefined
  /** The level every receipt must reach (default T2). */
  readonly target: Level
  /** Poll until the target is reached, for at most this long; 0 or undefined: one pass. */
  readonly waitMs?: number | undefined
  readonly fetch?: typeof globalThis.fetch
  readonly retry?: Omit<RetryOptions, "onRetry">
  readonly sleep?: (ms: number) => Promise<void>
  /** First and largest pause between passes (default 1 s and 30 s; doubling). */
  readonly pollMs?: { readonly first: number; readonly max: number }
  readonly onPass?: (pass: number, pending: number) => void
}

export interface UpgradeResult {
  readonly receipt: string
  readonly id: string | null
  readonly previous_level: string | null
  readonly level: string | null
  /** True when the receipt was rewritten by this run. */
  readonly upgraded: boolean
  /** The .ots file written or refreshed by this run, if any. */
  readonly ots: string | null
  readonly reached: boolean
  readonly error: string | null
}

export interface UpgradeSummary {
  readonly receipts: ReadonlyArray<UpgradeResult>
  readonly reached: number
  readonly pending: number
  readonly failed: number
  readonly passes: number
  readonly requests: number
  readonly elapsedMs: number
}

interface State {
  readonly path: string
  receipt: Receipt | null
  id: string | null
  previous: string | null
  upgraded: boolean
  ots: string | null
  error: string | null
}

/** JSON with object keys sorted: two values compare equal when they hold the same data. */
const canonical = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) =>
    x !== null && typeof x === "object" && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : x)

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i])

export const upgradeReceipts = async (o: UpgradeOptions): Promise<UpgradeSummary> => {
  const started = Date.now()
  let requests = 0
  const baseFetch = o.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a))
  const counted: typeof globalThis.fetch = (input, init) => {
    requests++
    return baseFetch(input, init)
  }
  const client = createClient({
    baseUrl: o.server,
    ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}),
    fetch: counted,
    retry: { maxAttempts: 6, maxElapsedMs: 60_000, ...o.retry }
  })
  // Fetched once, on the first receipt that needs it; a failure is every such receipt's error.
  let trust: Promise<PublishedTrust> | undefined
  const trustOnce = () => (trust ??= publishedTrust(o.server, counted).catch((e: unknown) => Promise.reject(new Error(`cannot get the instance's published trust: ${errorMessage(e)}`))))
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)))

  const states: Array<State> = o.receipts.map((path) => {
    const s: State = { path, receipt: null, id: null, previous: null, upgraded: false, ots: null, error: null }
    try {
      const receipt = parseReceipt(JSON.parse(readFileSync(path, "utf8")) as unknown)
      const id = receipt.evidence.id
      if (typeof id !== "string" || typeof receipt.evidence.hash_hex !== "string") throw new Error("not a receipt: no id / hash_hex")
      s.receipt = receipt
      s.id = id
      s.previous = String(receipt.evidence.level)
    } catch (e) {
      s.error = `cannot read receipt: ${errorMessage(e)}`
    }
    return s
  })

  /** Writes FILE.ots beside the data file when the proof is new or changed. */
  const writeOts = (s: State, proof: Uint8Array): void => {
    const data = dataPathOf(s.path)
    if (data === null || s.receipt!.hmac !== null) return // an HMAC stamp's .ots would not match the file
    const digest = (() => {
      try {
        return bytesToHex(parseDetachedFile(proof).digest)
      } catch (e) {
        throw new Error(`refused the server's .ots proof: ${errorMessage(e)}`)
      }
    })()
    if (digest !== s.receipt!.evidence.hash_hex) throw new Error(`refused the server's .ots proof: its file digest ${digest} is not the receipt's hash_hex`)
    const path = `${data}.ots`
    if (existsSync(path) && sameBytes(new Uint8Array(readFileSync(path)), proof)) return
    writeAtomic(path, proof)
    s.ots = path
  }

  const step = async (s: State): Promise<void> => {
    const old = s.receipt!.evidence
    try {
      const fresh = await client.evidence(s.id!)
      if (fresh.id !== old.id || fresh.hash_hex !== old.hash_hex) {
        throw new Error(`the server's evidence names ${String(fresh.id)} / ${String(fresh.hash_hex)}, the receipt ${String(old.id)} / ${String(old.hash_hex)}`)
      }
      if (canonical(fresh.t0) !== canonical(old.t0)) {
        throw new Error(`refused the server's evidence: its t0 differs from the receipt's (an upgrade never changes T0)`)
      }
      if (rank(fresh.level) > rank(old.level)) {
        // The receipt's own id, hash_hex and t0, with the new tiers.
        const next: Record<string, unknown> = { ...fresh, id: old.id, hash_hex: old.hash_hex, t0: old.t0 }
        const refusal = await refusalOf(next, await trustOnce())
        if (refusal !== null) throw new Error(`refused the server's ${String(fresh.level)} evidence: ${refusal}`)
        writeAtomic(s.path, `${JSON.stringify(receiptDocument(next, s.receipt!.hmac), null, 2)}\n`)
        s.receipt = { ...s.receipt!, evidence: next }
        s.upgraded = true
      }
      const t2 = s.receipt!.evidence.t2 as { otsProof?: unknown } | undefined
      if (t2 && typeof t2.otsProof === "string") writeOts(s, base64ToBytes(t2.otsProof))
      else if (rank(s.receipt!.evidence.level) >= 1) {
        // A calendar's pending proof exists before T2; the standard tools can upgrade it themselves.
        const proof = await client.otsProof(s.id!).catch((e) => {
          if (e instanceof AttestdError && e.status === 404) return null
          throw e
        })
        if (proof !== null) writeOts(s, new Uint8Array(proof))
      }
    } catch (e) {
      s.error = errorMessage(e)
    }
  }

  const reached = (s: State) => s.error === null && rank(s.receipt!.evidence.level) >= rank(o.target)
  // The instance's trust first, once: a wrong server fails here at once, before any retries.
  if (states.some((s) => s.error === null)) await trustOnce()
  let passes = 0
  let delay = o.pollMs?.first ?? 1000
  const deadline = Date.now() + (o.waitMs ?? 0)
  for (;;) {
    const open = states.filter((s) => s.error === null && !reached(s))
    if (open.length === 0) break
    if (passes > 0) {
      if (Date.now() + delay > deadline) break
      await sleep(delay)
      delay = Math.min(delay * 2, o.pollMs?.max ?? 30_000)
    }
    passes++
    // The first pass also refreshes receipts already at the target (a newer .ots, say).
    await mapLimit(passes === 1 ? states.filter((s) => s.error === null) : open, 8, step)
    o.onPass?.(passes, states.filter((s) => s.error === null && !reached(s)).length)
    if (!o.waitMs) break
  }
  if (passes === 0) await mapLimit(states.filter((s) => s.error === null), 8, step)

  const results: Array<UpgradeResult> = states.map((s) => ({
    receipt: s.path,
    id: s.id,
    previous_level: s.previous,
    level: s.receipt ? String(s.receipt.evidence.level) : null,
    upgraded: s.upgraded,
    ots: s.ots,
    reached: reached(s),
    error: s.error
  }))
  const failed = results.filter((r) => r.error !== null).length
  const ok = results.filter((r) => r.reached).length
  return { receipts: results, reached: ok, pending: results.length - ok - failed, failed, passes, requests, elapsedMs: Date.now() - started }
}

/** Exit code of `attestd upgrade`: 0 every receipt at the level asked, 2 some receipt could not be read, 1 some receipt failed, 3 some still below it. */
export const upgradeExitCode = (s: UpgradeSummary): number =>
  s.receipts.some((r) => r.error?.startsWith("cannot read receipt") === true) ? 2 : s.failed > 0 ? 1 : s.pending > 0 ? 3 : 0
