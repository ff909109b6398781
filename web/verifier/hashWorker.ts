/**
 * Hashes a Blob with SHA-256 in a Worker, streamed chunk by chunk: the document
 * never leaves the browser and is never held whole in memory.
 * Message in: `{ blob }`; out: `{ progress }`… then `{ digest }` or `{ error }`.
 */
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex } from "@noble/hashes/utils.js"

const scope = globalThis as unknown as {
  onmessage: ((e: MessageEvent<{ blob: Blob }>) => void) | null
  postMessage: (m: unknown) => void
}

scope.onmessage = (e) => {
  const blob = e.data.blob
  const hash = sha256.create()
  const reader = blob.stream().getReader()
  let done = 0
  const pump = (): Promise<void> =>
    reader.read().then((r) => {
      if (r.done) {
        scope.postMessage({ digest: bytesToHex(hash.digest()) })
        return
      }
      hash.update(r.value)
      done += r.value.byteLength
      scope.postMessage({ progress: blob.size === 0 ? 1 : done / blob.size })
      return pump()
    })
  pump().catch((err: unknown) => scope.postMessage({ error: err instanceof Error ? err.message : String(err) }))
}
