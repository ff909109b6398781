/**
 * Merkle v2 tree building for the sealer (node:crypto, a worker thread); the
 * portable definition, proofs and proof checks are src/Domain/Merkle.ts.
 *
 * Construction (exact):
 * - leaves are raw 32-byte SHA-256 values, SORTED bytewise ascending
 *   (identical to lowercase-hex ascending); duplicates are kept;
 * - internal node = SHA-256(0x01 ‖ left ‖ right);
 * - an odd node at any level is paired with itself;
 * - a one-leaf tree has root = the leaf and an empty proof.
 *
 * A proof is the list of sibling steps from leaf to root. `position: "left"`
 * means the sibling is the LEFT operand: parent = H(0x01 ‖ sibling ‖ current);
 * `"right"` means parent = H(0x01 ‖ current ‖ sibling).
 *
 * Performance notes (measured on the 2-core target, see scripts/bench-merkle.mjs):
 * - bulk node hashing uses a hand-written SHA-256 specialised for the fixed
 *   65-byte node message (no allocation per node, the second block's message
 *   schedule is precomputed for all 256 values of its only variable byte). It
 *   hashes 2^20 leaves' nodes in ~0.47 s of CPU where one `crypto.hash` call
 *   per node (plus the copies in and out) takes ~0.95 s: the native call's
 *   cost is mostly per-call overhead. The kernel is MerkleKernel.ts; `nodeHash`
 *   here uses node:crypto, and the tests check the bulk path against an
 *   independent node:crypto implementation;
 * - leaves are validated and decoded from hex in one typed-array pass, then
 *   sorted through a native `Float64Array#sort` of packed (prefix, index)
 *   keys; equal prefixes are resolved exactly with a bytewise comparison;
 * - `buildTreeParallel` uses one persistent worker thread
 *   (MerkleWorker.ts, compiled beside this module): it sorts half of the keys,
 *   then takes chunks of the lower levels (sorted leaves placed and hashed)
 *   from a shared atomic counter alongside the main thread, so a busy core
 *   just takes fewer chunks. The returned levels are ordinary (non-shared)
 *   Buffers either way.
 */
import * as crypto from "node:crypto"
import type { WorkerJob } from "./MerkleWorker.js"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"
import { type Kernel, makeMerkleKernel } from "./MerkleKernel.js"
import { levelSizes, siblingPath } from "../Domain/Merkle.js"
import type { ProofStep } from "../Domain/Merkle.js"
import { type HashHex, makeHashHex } from "../Domain/HashHex.js"

export { computeRoot, levelSizes, MERKLE_TREE_VERSION, siblingPath, verifyProof } from "../Domain/Merkle.js"
export type { Position, ProofStep, SiblingRef } from "../Domain/Merkle.js"

export interface MerkleTree {
  readonly leafCount: number
  /** levels[0] = sorted leaves concatenated (32·n bytes); each next level the parents; last level = the 32-byte root */
  readonly levels: ReadonlyArray<Buffer>
  readonly root: Buffer
  readonly rootHex: string
  leafHex(index: number): string
  /** index of the leaf in sorted order (binary search), -1 if absent or not 64 lowercase hex */
  leafIndex(hashHex: string): number
  proof(index: number): Array<ProofStep<HashHex>>
}

/**
 * Trees with at least this many leaves are built with the worker thread by
 * `buildTreeParallel`. Measured on the idle 2-core target the worker already
 * pays from ~1k leaves (1,024: 0.59 → 0.45 ms; 4,096: 2.5 → 1.6 ms; 16,384:
 * 10.1 → 6.6 ms; 1M: 735 → 447 ms), but below a few thousand leaves it saves
 * under a millisecond while costing ~15–20% more total CPU, and nothing when
 * the other core is busy.
 */
export const PARALLEL_THRESHOLD = 4_096

// ---------------------------------------------------------------------------
// Small helpers (node:crypto)

const HEX64 = /^[0-9a-f]{64}$/

const isHex64 = (s: unknown): s is string => typeof s === "string" && HEX64.test(s)

const sha256: (data: Uint8Array) => Buffer =
  typeof crypto.hash === "function"
    ? (data) => crypto.hash("sha256", data, "buffer")
    : (data) => crypto.createHash("sha256").update(data).digest()

const nodeInput = Buffer.alloc(65)

/** SHA-256(0x01 ‖ left ‖ right); both operands must be 32 bytes. */
export const nodeHash = (left: Uint8Array, right: Uint8Array): Buffer => {
  if (left.length !== 32 || right.length !== 32) {
    throw new RangeError("Merkle: nodeHash operands must be 32 bytes each")
  }
  nodeInput[0] = 0x01
  nodeInput.set(left, 1)
  nodeInput.set(right, 33)
  return sha256(nodeInput)
}

const invalidLeaf = (index: number): TypeError =>
  new TypeError(`Merkle: leaf ${index} is not a 64-character lowercase hex SHA-256 digest`)

const emptyTree = (): RangeError => new RangeError("Merkle: cannot build a tree of zero leaves")

// ---------------------------------------------------------------------------
// Bulk kernel (src/Sealing/MerkleKernel.ts), shared with the worker thread

let kernelInstance: Kernel | undefined
const kernel = (): Kernel => {
  if (kernelInstance === undefined) kernelInstance = makeMerkleKernel()
  return kernelInstance
}

// ---------------------------------------------------------------------------
// Tree shape

interface Layout {
  readonly sizes: Array<number>
  /** byte offset of each level inside the single storage buffer */
  readonly offsets: Array<number>
  readonly totalBytes: number
}

const layoutOf = (leafCount: number): Layout => {
  const sizes = levelSizes(leafCount)
  const offsets: Array<number> = []
  let total = 0
  for (const size of sizes) {
    offsets.push(total)
    total += size * 32
  }
  return { sizes, offsets, totalBytes: total }
}

class Tree implements MerkleTree {
  readonly leafCount: number
  readonly levels: ReadonlyArray<Buffer>
  readonly root: Buffer
  readonly rootHex: string
  readonly #leaves: Buffer

  constructor(store: Buffer, layout: Layout) {
    const levels = layout.sizes.map((size, l) => store.subarray(layout.offsets[l]!, layout.offsets[l]! + size * 32))
    this.leafCount = layout.sizes[0]!
    this.levels = levels
    this.#leaves = levels[0]!
    // a copy, so that holding on to the root does not retain the whole tree
    this.root = Buffer.from(levels[levels.length - 1]!)
    this.rootHex = this.root.toString("hex")
  }

  leafHex(index: number): string {
    if (!Number.isSafeInteger(index) || index < 0 || index >= this.leafCount) {
      throw new RangeError(`Merkle: leaf index ${index} out of range for ${this.leafCount} leaves`)
    }
    return this.#leaves.toString("hex", index * 32, index * 32 + 32)
  }

  leafIndex(hashHex: string): number {
    if (!isHex64(hashHex)) return -1
    const target = Buffer.from(hashHex, "hex")
    const leaves = this.#leaves
    // lower bound: first leaf >= target
    let lo = 0
    let hi = this.leafCount
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (leaves.compare(target, 0, 32, mid * 32, mid * 32 + 32) < 0) lo = mid + 1
      else hi = mid
    }
    return lo < this.leafCount && leaves.compare(target, 0, 32, lo * 32, lo * 32 + 32) === 0 ? lo : -1
  }

  proof(index: number): Array<ProofStep<HashHex>> {
    return siblingPath(this.leafCount, index).map(({ index: i, level, position }) => ({
      hash: makeHashHex(this.levels[level]!.toString("hex", i * 32, i * 32 + 32)),
      position
    }))
  }
}

// ---------------------------------------------------------------------------
// Leaf preparation (validate, decode, sort)

const CHUNK = 1024
let chunkAscii: Buffer | undefined
let chunkAscii16: Uint16Array | undefined

/**
 * Validates the leaves and decodes them into dec (32 bytes per leaf from byte
 * offset 0), a chunk at a time through a small reused ASCII buffer. Throws on
 * the first leaf that is not 64 lowercase hex characters.
 */
const decodeAll = (leavesHex: ReadonlyArray<string>, dec: Uint8Array): void => {
  if (chunkAscii === undefined || chunkAscii16 === undefined) {
    chunkAscii = Buffer.allocUnsafeSlow(CHUNK * 64)
    chunkAscii16 = new Uint16Array(chunkAscii.buffer, chunkAscii.byteOffset, CHUNK * 32)
  }
  const asc = chunkAscii
  const k = kernel()
  const n = leavesHex.length
  for (let base = 0; base < n; base += CHUNK) {
    const count = Math.min(CHUNK, n - base)
    for (let j = 0; j < count; j++) {
      const s: unknown = leavesHex[base + j]
      // utf8: a non-ASCII character either does not fit (short write) or leaves
      // bytes >= 0x80 in the buffer, which the hex decoder rejects.
      if (typeof s !== "string" || s.length !== 64 || asc.write(s, j * 64, 64, "utf8") !== 64) {
        throw invalidLeaf(base + j)
      }
    }
    const bad = k.decodeLeaves(chunkAscii16, count, dec, base * 32)
    if (bad >= 0) throw invalidLeaf(base + bad)
  }
}

/** Bits needed for a leaf index (at least 1). */
const indexBits = (n: number): number => Math.max(1, 32 - Math.clz32(n - 1))

/**
 * Keys sorted by (prefix, index) become sorted by leaf bytes: runs of equal
 * prefixes (rare for digests, but possible) are re-ordered bytewise in place.
 */
const resolveTies = (keys: Float64Array, idxBits: number, dec: Buffer): void => {
  const n = keys.length
  const scale = 2 ** idxBits
  let i = 0
  while (i + 1 < n) {
    const prefix = Math.floor(keys[i]! / scale)
    if (Math.floor(keys[i + 1]! / scale) !== prefix) {
      i++
      continue
    }
    let j = i + 2
    while (j < n && Math.floor(keys[j]! / scale) === prefix) j++
    const run = Array.from(keys.subarray(i, j), (key) => key % scale)
    // Buffer#compare(target, tStart, tEnd, sStart, sEnd) orders the source slice (a) against the target (b)
    run.sort((a, b) => dec.compare(dec, b * 32, b * 32 + 32, a * 32, a * 32 + 32))
    for (let r = 0; r < run.length; r++) keys[i + r] = prefix * scale + run[r]!
    i = j
  }
}

const int32View = (bytes: Uint8Array, leaves: number): Int32Array =>
  new Int32Array(bytes.buffer, bytes.byteOffset, leaves * 8)

/**
 * Height of the independently hashed chunks of the lower levels: chunks of
 * 2^depth leaves (at most 8,192 leaves = 256 KiB, so a chunk's levels stay in
 * cache), about 64 or more chunks per tree so that two threads sharing them
 * finish close together.
 */
const chunkDepth = (n: number): number => Math.min(13, Math.max(0, indexBits(n) - 6))

// ---------------------------------------------------------------------------
// Synchronous build

/**
 * Builds the tree. Throws a RangeError on an empty list and a TypeError on a
 * leaf that is not 64 lowercase hex characters.
 */
export const buildTree = (leavesHex: ReadonlyArray<string>): MerkleTree => {
  const n = leavesHex.length
  if (n === 0) throw emptyTree()
  const k = kernel()
  const layout = layoutOf(n)
  // The decoded (unsorted) leaves live where levels 1.. will go: those levels
  // hold at least n - 1 nodes, plus one spare node at the end. Fresh memory is
  // expensive (page faults), so one allocation serves both.
  const store = Buffer.allocUnsafeSlow(layout.totalBytes + 32)
  const dec = store.subarray(n * 32, n * 64)
  decodeAll(leavesHex, dec)
  const idxBits = indexBits(n)
  const keys = new Float64Array(n)
  k.buildKeys(dec, keys, 0, n, idxBits)
  keys.sort()
  resolveTies(keys, idxBits, dec)
  // all leaves first: hashing overwrites the decoded leaves
  k.permute(keys, 2 ** idxBits, int32View(dec, n), int32View(store, n), 0, n)
  const depth = chunkDepth(n)
  const chunks = Math.ceil(n / 2 ** depth)
  for (let c = 0; c < chunks; c++) k.hashChunk(store, layout.offsets, layout.sizes, depth, c)
  k.hashLevels(store, layout.offsets, layout.sizes, depth)
  return new Tree(store, layout)
}

/** Root (hex) of the tree over the given leaves. */
export const merkleRoot = (leavesHex: ReadonlyArray<string>): string => buildTree(leavesHex).rootHex

// ---------------------------------------------------------------------------
// Worker (second core)

/**
 * The worker's compiled module, beside this one (dist/Sealing/MerkleWorker.js).
 * When this module runs from TypeScript sources (vitest), there is no compiled
 * worker beside it: ATTESTD_MERKLE_WORKER may name one (the tests bundle
 * MerkleWorker.ts with esbuild), else trees are built on the main thread.
 */
const workerFile = (): string => {
  const override = process.env.ATTESTD_MERKLE_WORKER
  if (override !== undefined && override !== "") return override
  const here = fileURLToPath(import.meta.url)
  if (!here.endsWith(".js")) throw new WorkerFailure("no compiled Merkle worker beside the TypeScript sources")
  return fileURLToPath(new URL("./MerkleWorker.js", import.meta.url))
}

interface WorkerReply {
  readonly id: number
  /** chunks hashed by the worker (op "chunks") */
  readonly chunks?: ReadonlyArray<number>
  readonly error?: string
}

class WorkerFailure extends Error {}

/**
 * One persistent worker. It is unref'd while idle so that it never keeps the
 * process alive, and ref'd while a job is in flight so that an awaited job
 * cannot be cut short by the event loop running empty.
 */
class KernelWorker {
  readonly #worker: Worker
  readonly #pending = new Map<
    number,
    { resolve: (chunks: ReadonlyArray<number>) => void; reject: (e: Error) => void }
  >()
  #nextId = 0
  #dead = false

  constructor() {
    this.#worker = new Worker(workerFile())
    this.#worker.unref()
    this.#worker.on("message", (reply: WorkerReply) => {
      const job = this.#pending.get(reply.id)
      if (job === undefined) return
      this.#settled(reply.id)
      if (reply.error !== undefined) job.reject(new WorkerFailure(reply.error))
      else job.resolve(reply.chunks ?? [])
    })
    this.#worker.on("error", (e: Error) => this.#fail(e))
    this.#worker.on("exit", (code) => this.#fail(new WorkerFailure(`Merkle worker exited with code ${code}`)))
  }

  get dead(): boolean {
    return this.#dead
  }

  run(job: WorkerJob): Promise<ReadonlyArray<number>> {
    if (this.#dead) return Promise.reject(new WorkerFailure("Merkle worker is not running"))
    const id = this.#nextId++
    return new Promise<ReadonlyArray<number>>((resolve, reject) => {
      if (this.#pending.size === 0) this.#worker.ref()
      this.#pending.set(id, { resolve, reject })
      this.#worker.postMessage({ ...job, id })
    })
  }

  terminate(): Promise<number> {
    this.#dead = true
    return this.#worker.terminate()
  }

  #settled(id: number): void {
    this.#pending.delete(id)
    if (this.#pending.size === 0) this.#worker.unref()
  }

  #fail(cause: Error): void {
    this.#dead = true
    const jobs = [...this.#pending.values()]
    this.#pending.clear()
    this.#worker.unref()
    for (const job of jobs) job.reject(cause instanceof WorkerFailure ? cause : new WorkerFailure(cause.message))
  }
}

let sharedWorker: KernelWorker | undefined

const stats = { workerBuilds: 0, fallbacks: 0, chunks: 0, workerChunks: 0 }

/**
 * Diagnostics: how many `buildTreeParallel` calls were built with the worker
 * (workerBuilds) and how many fell back to `buildTree` because the worker
 * failed (fallbacks); of the lower-level chunks of those builds, how many the
 * worker hashed (workerChunks of chunks).
 */
export const merkleWorkerStats = (): {
  readonly workerBuilds: number
  readonly fallbacks: number
  readonly chunks: number
  readonly workerChunks: number
} => ({ ...stats })

const getWorker = (): KernelWorker => {
  if (sharedWorker === undefined || sharedWorker.dead) sharedWorker = new KernelWorker()
  return sharedWorker
}

/** Stops the shared worker thread (it is re-created on demand). Not needed for process exit: the idle worker is unref'd. */
export const terminateMerkleWorker = async (): Promise<void> => {
  const worker = sharedWorker
  sharedWorker = undefined
  if (worker !== undefined) await worker.terminate()
}

/** Merges the sorted ranges [0, h) and [h, n) of keys into out. */
const mergeHalves = (keys: Float64Array, h: number, out: Float64Array): void => {
  const n = keys.length
  let i = 0
  let j = h
  let o = 0
  while (i < h && j < n) {
    const a = keys[i]!
    const b = keys[j]!
    if (a <= b) {
      out[o++] = a
      i++
    } else {
      out[o++] = b
      j++
    }
  }
  while (i < h) out[o++] = keys[i++]!
  while (j < n) out[o++] = keys[j++]!
}

const buildWithWorker = async (leavesHex: ReadonlyArray<string>, worker: KernelWorker): Promise<MerkleTree> => {
  const n = leavesHex.length
  const k = kernel()
  const layout = layoutOf(n)

  // 1. decode here; keys built and sorted: second half in the worker, first half here
  const decShared = new SharedArrayBuffer(n * 32)
  const dec = Buffer.from(decShared)
  decodeAll(leavesHex, dec)
  const unsortedShared = new SharedArrayBuffer(n * 8)
  const unsorted = new Float64Array(unsortedShared)
  const idxBits = indexBits(n)
  const half = n >>> 1
  const sortedHalf = worker.run({ op: "sortKeys", dec: decShared, keys: unsortedShared, from: half, to: n, idxBits })
  k.buildKeys(dec, unsorted, 0, half, idxBits)
  unsorted.subarray(0, half).sort()
  await sortedHalf
  const keysShared = new SharedArrayBuffer(n * 8)
  const keys = new Float64Array(keysShared)
  mergeHalves(unsorted, half, keys)
  resolveTies(keys, idxBits, dec)

  // 2. lower levels in chunks of 2^depth leaves, shared out through an atomic
  //    counter so that a busy core simply takes fewer chunks. Chunks done
  //    here are written straight into the tree; the worker's go to a shared
  //    buffer with the same layout (pages it never touches are never
  //    allocated) and are copied over afterwards.
  const depth = chunkDepth(n)
  const unit = 2 ** depth
  const chunkCount = Math.ceil(n / unit)
  const offsets = layout.offsets.slice(0, depth + 1)
  const sizes = layout.sizes.slice(0, depth + 1)
  const outShared = new SharedArrayBuffer(offsets[depth]! + sizes[depth]! * 32)
  const out = Buffer.from(outShared)
  const counterShared = new SharedArrayBuffer(4)
  const store = Buffer.allocUnsafeSlow(layout.totalBytes)
  const scale = 2 ** idxBits
  const theirs = worker.run({
    op: "chunks",
    counter: counterShared,
    chunkCount,
    keys: keysShared,
    scale,
    dec: decShared,
    out: outShared,
    offsets,
    sizes,
    depth
  })
  const mine = k.runChunks(
    new Int32Array(counterShared),
    chunkCount,
    keys,
    scale,
    int32View(dec, n),
    store,
    int32View(store, n),
    offsets,
    sizes,
    depth
  )
  const workerChunks = await theirs
  if (mine.length + workerChunks.length !== chunkCount) {
    throw new WorkerFailure(`Merkle worker: ${mine.length} + ${workerChunks.length} of ${chunkCount} chunks done`)
  }
  stats.chunks += chunkCount
  stats.workerChunks += workerChunks.length
  for (const c of workerChunks) {
    for (let l = 0; l <= depth; l++) {
      const span = 2 ** (depth - l)
      const start = offsets[l]! + c * span * 32
      const end = offsets[l]! + Math.min((c + 1) * span, sizes[l]!) * 32
      out.copy(store, start, start, end)
    }
  }

  // 3. the few top levels
  k.hashLevels(store, layout.offsets, layout.sizes, depth)
  return new Tree(store, layout)
}

/**
 * Same result as `buildTree`. Trees of at least PARALLEL_THRESHOLD leaves are
 * built with a worker thread sharing the work; smaller ones are built
 * synchronously, and so is any tree whose worker fails (see
 * `merkleWorkerStats`). Validation (hex, empty list) happens on the main thread
 * before anything is sent, with the same errors as `buildTree`, as a rejection.
 */
export const buildTreeParallel = async (leavesHex: ReadonlyArray<string>): Promise<MerkleTree> => {
  if (leavesHex.length < PARALLEL_THRESHOLD) return buildTree(leavesHex)
  let worker: KernelWorker
  try {
    worker = getWorker()
  } catch {
    stats.fallbacks++
    return buildTree(leavesHex)
  }
  try {
    const tree = await buildWithWorker(leavesHex, worker)
    stats.workerBuilds++
    return tree
  } catch (e) {
    if (!(e instanceof WorkerFailure)) throw e
    stats.fallbacks++
    return buildTree(leavesHex)
  }
}

