/**
 * `attestd stamp FILE…`: hashes each file locally (streamed), attests the digests in
 * batches of up to 100 (POST /v1/attest/batch), fetches each attestation's evidence
 * bundle and writes it beside the file as `FILE.attestd.json` (see Receipt.ts).
 *
 * Files go through in chunks of 100: hash, attest, fetch evidence, write; so memory
 * stays bounded and progress is steady. Every call goes through the Promise client,
 * whose retries (429, 5xx, network errors; backoff with full jitter, Retry-After) make
 * a busy or briefly failing server cost time, not files: attesting is idempotent, so
 * a retried batch gives the same IDs. A file that fails is reported and the rest go on.
 *
 * Every bundle is verified (Check.ts) against the keys and TSA anchors the instance
 * publishes before its receipt is written: a bad signature is that file's error.
 */
import { createClient, type RetryOptions } from "../Client/Client.js"
import { type PublishedTrust, publishedTrust } from "./PublishedTrust.js"
import { refusalOf } from "./Check.js"
import { errorMessage, mapLimit, receiptPathOf, sha256File, writeAtomic } from "./Files.js"
import { type HmacDigestSpec, hmacOfDigest, hmacSpec, receiptDocument } from "./Receipt.js"

export const STAMP_BATCH = 100

export interface StampOptions {
  readonly files: ReadonlyArray<string>
  readonly server: string
  readonly apiKey?: string | undefined
  readonly source?: string | undefined
  readonly extraData?: Record<string, unknown> | undefined
  readonly hmacKey?: Uint8Array | undefined
  readonly fetch?: typeof globalThis.fetch
  readonly retry?: Omit<RetryOptions, "onRetry">
  /** Called after each file is done (stamped or failed). */
  readonly onProgress?: (done: number, total: number) => void
}

export type FileResult =
  | { readonly file: string; readonly ok: true; readonly receipt: string; readonly id: string; readonly hash_hex: string; readonly level: string; readonly status: string }
  | { readonly file: string; readonly ok: false; readonly error: string; readonly id?: string }

export interface StampSummary {
  readonly files: ReadonlyArray<FileResult>
  readonly stamped: number
  readonly failed: number
  /** HTTP requests sent, retries included. */
  readonly requests: number
  readonly retries: number
  readonly retriedStatuses: Readonly<Record<string, number>>
  readonly elapsedMs: number
}

const HASH_CONCURRENCY = 4
const EVIDENCE_CONCURRENCY = 8

export const stampFiles = async (o: StampOptions): Promise<StampSummary> => {
  const started = Date.now()
  let requests = 0
  let retries = 0
  const retriedStatuses: Record<string, number> = {}
  const baseFetch = o.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a))
  const counted: typeof globalThis.fetch = (input, init) => {
    requests++
    return baseFetch(input, init)
  }
  const client = createClient({
    baseUrl: o.server,
    ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}),
    fetch: counted,
    retry: {
      maxAttempts: 8,
      maxElapsedMs: 120_000,
      ...o.retry,
      onRetry: (info) => {
        retries++
        const k = info.status === null ? "network" : String(info.status)
        retriedStatuses[k] = (retriedStatuses[k] ?? 0) + 1
      }
    }
  })
  // Fetched once, without retries, before the first attest: a wrong --server fails at once, with its reason.
  let trust: PublishedTrust | undefined
  const hmac: HmacDigestSpec | null = o.hmacKey ? await hmacSpec(o.hmacKey) : null
  const results: Array<FileResult> = []
  let done = 0
  const finish = (r: FileResult) => {
    results.push(r)
    o.onProgress?.(++done, o.files.length)
  }

  for (let at = 0; at < o.files.length; at += STAMP_BATCH) {
    const chunk = o.files.slice(at, at + STAMP_BATCH)
    const hashed = await mapLimit(chunk, HASH_CONCURRENCY, async (file) => {
      try {
        const sha = await sha256File(file)
        return { file, hash: o.hmacKey ? await hmacOfDigest(o.hmacKey, sha) : sha }
      } catch (e) {
        finish({ file, ok: false, error: `cannot read: ${errorMessage(e)}` })
        return null
      }
    })
    const todo = hashed.filter((h): h is { file: string; hash: string } => h !== null)
    if (todo.length === 0) continue
    // Two files with the same content share one attestation (and one place in the batch).
    const hashes = [...new Set(todo.map((t) => t.hash))]
    trust ??= await publishedTrust(o.server, counted)
    const published = trust
    let byHash: Map<string, { readonly id: string; readonly status: string }>
    try {
      const reply = await client.attestBatch({
        hashes,
        ...(o.source !== undefined ? { source: o.source } : {}),
        ...(o.extraData !== undefined ? { extra_data: o.extraData } : {})
      })
      byHash = new Map(reply.attestations.map((a) => [a.hash_hex, { id: a.id, status: a.status }]))
    } catch (e) {
      for (const t of todo) finish({ file: t.file, ok: false, error: `attest failed: ${errorMessage(e)}` })
      continue
    }
    const evidence = new Map<string, Promise<Record<string, unknown>>>()
    const evidenceOf = (id: string) => {
      let p = evidence.get(id)
      if (!p) evidence.set(id, p = client.evidence(id))
      return p
    }
    await mapLimit(todo, EVIDENCE_CONCURRENCY, async (t) => {
      const item = byHash.get(t.hash)
      if (!item) return finish({ file: t.file, ok: false, error: `the server's reply lacks hash ${t.hash}` })
      try {
        const bundle = await evidenceOf(item.id)
        if (bundle.id !== item.id || bundle.hash_hex !== t.hash) {
          throw new Error(`evidence of ${item.id} names ${String(bundle.id)} / ${String(bundle.hash_hex)}`)
        }
        const refusal = await refusalOf(bundle, published)
        if (refusal !== null) throw new Error(`the server's evidence was refused: ${refusal}`)
        const receipt = receiptPathOf(t.file)
        writeAtomic(receipt, `${JSON.stringify(receiptDocument(bundle, hmac), null, 2)}\n`)
        finish({ file: t.file, ok: true, receipt, id: item.id, hash_hex: t.hash, level: String(bundle.level), status: item.status })
      } catch (e) {
        finish({ file: t.file, ok: false, id: item.id, error: `attested as ${item.id}, but no receipt written: ${errorMessage(e)}` })
      }
    })
  }
  const order = new Map(o.files.map((f, i) => [f, i]))
  results.sort((a, b) => order.get(a.file)! - order.get(b.file)!)
  const stamped = results.filter((r) => r.ok).length
  return {
    files: results,
    stamped,
    failed: results.length - stamped,
    requests,
    retries,
    retriedStatuses,
    elapsedMs: Date.now() - started
  }
}
