/** File helpers of the stamp commands (Node): streamed SHA-256, atomic writes, receipt paths. */
import { createHash, randomBytes } from "node:crypto"
import { createReadStream, renameSync, rmSync, writeFileSync } from "node:fs"
import { fetchFailure } from "./PublishedTrust.js"
import { RECEIPT_SUFFIX } from "./Receipt.js"

/** SHA-256 (hex) of a file, streamed: the file is never held whole in memory, never uploaded. */
export const sha256File = (path: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const h = createHash("sha256")
    createReadStream(path)
      .on("data", (chunk) => h.update(chunk))
      .on("error", reject)
      .on("end", () => resolve(h.digest("hex")))
  })

/**
 * Writes through a new temporary file in the same directory (mode 0600, never an existing
 * file) and a rename, so a reader never sees half a receipt and a crash leaves the old one.
 */
export const writeAtomic = (path: string, data: string | Uint8Array): void => {
  const tmp = `${path}.${randomBytes(6).toString("hex")}.tmp`
  try {
    writeFileSync(tmp, data, { mode: 0o600, flag: "wx" })
    renameSync(tmp, path)
  } catch (e) {
    rmSync(tmp, { force: true })
    throw e
  }
}

export const receiptPathOf = (file: string): string => `${file}${RECEIPT_SUFFIX}`

/** The data file a receipt belongs to (`a.pdf.attestd.json` → `a.pdf`), or null for another name. */
export const dataPathOf = (receipt: string): string | null =>
  receipt.endsWith(RECEIPT_SUFFIX) && receipt.length > RECEIPT_SUFFIX.length ? receipt.slice(0, -RECEIPT_SUFFIX.length) : null

export const errorMessage = (e: unknown): string => {
  // node's fetch says only "fetch failed"; the reason (connection refused, …) is its cause
  if (e instanceof TypeError && e.message === "fetch failed") return `cannot reach the server: ${fetchFailure(e)}`
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code
    return typeof code === "string" && code.length > 0 && !e.message.includes(code) ? `${code}: ${e.message}` : e.message
  }
  return String(e)
}

/** Runs `f` over `items` with at most `limit` in flight; results in input order. */
export const mapLimit = async <A, B>(items: ReadonlyArray<A>, limit: number, f: (a: A, i: number) => Promise<B>): Promise<Array<B>> => {
  const out = new Array<B>(items.length)
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await f(items[i]!, i)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  return out
}

/** A one-line progress bar on a TTY; nothing elsewhere. */
export const progressBar = (stream: NodeJS.WriteStream, label: string) => {
  let last = 0
  let shown = false
  const draw = (done: number, total: number, force = false) => {
    const now = Date.now()
    if (!force && now - last < 100) return
    last = now
    shown = true
    const width = 30
    const filled = total === 0 ? width : Math.round((done / total) * width)
    stream.write(`\r${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${total}`)
  }
  return {
    update: (done: number, total: number) => draw(done, total),
    finish: (done: number, total: number) => {
      draw(done, total, true)
      if (shown) stream.write("\n")
    }
  }
}

/** `500ms`, `2s`, `1m`, `24h` (as the server's settings) → milliseconds. */
export const parseDurationMs = (s: string): number | null => {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$/.exec(s)
  if (!m) return null
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as "ms" | "s" | "m" | "h"]
  return Math.round(Number(m[1]) * unit)
}
