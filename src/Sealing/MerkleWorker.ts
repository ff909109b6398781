/** The Merkle builder's worker thread (spawned by MerkleBuilder.ts): runs the kernel on shared memory. */
import { parentPort } from "node:worker_threads"
import { makeMerkleKernel } from "./MerkleKernel.js"

/** A job the builder posts (with an id the worker echoes in its reply). */
export type WorkerJob =
  | {
    readonly op: "sortKeys"
    readonly dec: SharedArrayBuffer
    readonly keys: SharedArrayBuffer
    readonly from: number
    readonly to: number
    readonly idxBits: number
  }
  | {
    readonly op: "chunks"
    readonly counter: SharedArrayBuffer
    readonly chunkCount: number
    readonly keys: SharedArrayBuffer
    readonly scale: number
    readonly dec: SharedArrayBuffer
    readonly out: SharedArrayBuffer
    readonly offsets: ReadonlyArray<number>
    readonly sizes: ReadonlyArray<number>
    readonly depth: number
  }

type Job = WorkerJob & { readonly id: number }

const port = parentPort
if (port === null) throw new Error("MerkleWorker.ts runs as a worker thread only")
const kernel = makeMerkleKernel()

port.on("message", (m: Job) => {
  try {
    if (m.op === "sortKeys") {
      kernel.buildKeys(new Uint8Array(m.dec), new Float64Array(m.keys), m.from, m.to, m.idxBits)
      new Float64Array(m.keys, m.from * 8, m.to - m.from).sort()
      port.postMessage({ id: m.id, chunks: [] })
    } else if (m.op === "chunks") {
      const chunks = kernel.runChunks(
        new Int32Array(m.counter),
        m.chunkCount,
        new Float64Array(m.keys),
        m.scale,
        new Int32Array(m.dec),
        new Uint8Array(m.out),
        new Int32Array(m.out),
        m.offsets,
        m.sizes,
        m.depth
      )
      port.postMessage({ id: m.id, chunks })
    } else {
      throw new Error(`unknown op ${(m as { op: string }).op}`)
    }
  } catch (e) {
    port.postMessage({ id: (m as { id: number }).id, error: String((e instanceof Error && e.stack) || e) })
  }
})
