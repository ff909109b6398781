/**
 * Merkle v2 — pure, dependency-free Merkle tree construction and proofs.
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
 *   cost is mostly per-call overhead. `nodeHash`, `computeRoot` and
 *   `verifyProof` use node:crypto, and the tests check the bulk path against
 *   an independent node:crypto implementation;
 * - leaves are validated and decoded from hex in one typed-array pass, then
 *   sorted through a native `Float64Array#sort` of packed (prefix, index)
 *   keys; equal prefixes are resolved exactly with a bytewise comparison;
 * - `buildTreeParallel` uses one persistent worker thread (inline source,
 *   `eval: true`, so no file path is involved): it sorts half of the keys,
 *   then takes chunks of the lower levels (sorted leaves placed and hashed)
 *   from a shared atomic counter alongside the main thread, so a busy core
 *   just takes fewer chunks. The returned levels are ordinary (non-shared)
 *   Buffers either way.
 */
import * as crypto from "node:crypto"
import { Worker } from "node:worker_threads"

export type Position = "left" | "right"

export interface ProofStep {
  readonly hash: string
  readonly position: Position
}

export const MERKLE_TREE_VERSION = 2

export interface MerkleTree {
  readonly leafCount: number
  /** levels[0] = sorted leaves concatenated (32·n bytes); each next level the parents; last level = the 32-byte root */
  readonly levels: ReadonlyArray<Buffer>
  readonly root: Buffer
  readonly rootHex: string
  leafHex(index: number): string
  /** index of the leaf in sorted order (binary search), -1 if absent or not 64 lowercase hex */
  leafIndex(hashHex: string): number
  proof(index: number): Array<ProofStep>
}

export interface SiblingRef {
  readonly level: number
  readonly index: number
  readonly position: Position
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
// Bulk kernel: plain JS source, instantiated on the main thread with
// `new Function` and evaluated verbatim inside the worker. No type syntax,
// no backticks, no template substitutions inside.

const KERNEL_SRC = String.raw`
"use strict";
function makeMerkleKernel() {
  const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
  ]);
  const IV0 = 0x6a09e667 | 0, IV1 = 0xbb67ae85 | 0, IV2 = 0x3c6ef372 | 0, IV3 = 0xa54ff53a | 0;
  const IV4 = 0x510e527f | 0, IV5 = 0x9b05688c | 0, IV6 = 0x1f83d9ab | 0, IV7 = 0x5be0cd19 | 0;
  const W = new Int32Array(64);

  // The node message is 65 bytes: block 1 = 0x01 ‖ left ‖ right[0..31),
  // block 2 = right[31] ‖ 0x80 ‖ zeros ‖ bit length 520. Block 2 varies in one
  // byte only, so K[t] + W[t] of block 2 is precomputed for all 256 values.
  const KW2 = new Int32Array(256 * 64);
  for (let v = 0; v < 256; v++) {
    const w = new Int32Array(64);
    w[0] = (v << 24) | 0x800000;
    w[15] = 520;
    for (let t = 16; t < 64; t++) {
      const w15 = w[t - 15], w2 = w[t - 2];
      const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
      const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
    }
    for (let t = 0; t < 64; t++) KW2[v * 64 + t] = (w[t] + K[t]) | 0;
  }

  // Parents of the 'count' 32-byte nodes at src[srcOff..] written to dst[dstOff..];
  // an odd last node is paired with itself.
  function hashLevel(src, srcOff, count, dst, dstOff) {
    const parents = (count + 1) >>> 1;
    for (let p = 0; p < parents; p++) {
      const lo = srcOff + p * 64;
      const ro = 2 * p + 1 < count ? lo + 32 : lo;
      W[0] = 0x01000000 | (src[lo] << 16) | (src[lo + 1] << 8) | src[lo + 2];
      for (let j = 1; j < 8; j++) {
        const o = lo + 4 * j - 1;
        W[j] = (src[o] << 24) | (src[o + 1] << 16) | (src[o + 2] << 8) | src[o + 3];
      }
      W[8] = (src[lo + 31] << 24) | (src[ro] << 16) | (src[ro + 1] << 8) | src[ro + 2];
      for (let j = 1; j < 8; j++) {
        const o = ro + 4 * j - 1;
        W[8 + j] = (src[o] << 24) | (src[o + 1] << 16) | (src[o + 2] << 8) | src[o + 3];
      }
      for (let t = 16; t < 64; t++) {
        const w15 = W[t - 15], w2 = W[t - 2];
        const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
        const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
        W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
      }
      let a = IV0, b = IV1, c = IV2, d = IV3, e = IV4, f = IV5, g = IV6, h = IV7;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
        const t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
          ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      const h0 = (a + IV0) | 0, h1 = (b + IV1) | 0, h2 = (c + IV2) | 0, h3 = (d + IV3) | 0;
      const h4 = (e + IV4) | 0, h5 = (f + IV5) | 0, h6 = (g + IV6) | 0, h7 = (h + IV7) | 0;
      a = h0; b = h1; c = h2; d = h3; e = h4; f = h5; g = h6; h = h7;
      const kb = src[ro + 31] * 64;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          ((e & f) ^ (~e & g)) + KW2[kb + t]) | 0;
        const t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
          ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      const o = dstOff + p * 32;
      let x = (a + h0) | 0;
      dst[o] = x >>> 24; dst[o + 1] = x >>> 16; dst[o + 2] = x >>> 8; dst[o + 3] = x;
      x = (b + h1) | 0;
      dst[o + 4] = x >>> 24; dst[o + 5] = x >>> 16; dst[o + 6] = x >>> 8; dst[o + 7] = x;
      x = (c + h2) | 0;
      dst[o + 8] = x >>> 24; dst[o + 9] = x >>> 16; dst[o + 10] = x >>> 8; dst[o + 11] = x;
      x = (d + h3) | 0;
      dst[o + 12] = x >>> 24; dst[o + 13] = x >>> 16; dst[o + 14] = x >>> 8; dst[o + 15] = x;
      x = (e + h4) | 0;
      dst[o + 16] = x >>> 24; dst[o + 17] = x >>> 16; dst[o + 18] = x >>> 8; dst[o + 19] = x;
      x = (f + h5) | 0;
      dst[o + 20] = x >>> 24; dst[o + 21] = x >>> 16; dst[o + 22] = x >>> 8; dst[o + 23] = x;
      x = (g + h6) | 0;
      dst[o + 24] = x >>> 24; dst[o + 25] = x >>> 16; dst[o + 26] = x >>> 8; dst[o + 27] = x;
      x = (h + h7) | 0;
      dst[o + 28] = x >>> 24; dst[o + 29] = x >>> 16; dst[o + 30] = x >>> 8; dst[o + 31] = x;
    }
  }

  // Levels from+1 .. sizes.length-1 of a tree stored in buf, level l at byte offset offs[l].
  function hashLevels(buf, offs, sizes, from) {
    for (let l = from; l + 1 < sizes.length; l++) hashLevel(buf, offs[l], sizes[l], buf, offs[l + 1]);
  }

  // Chunk c of the lower levels: leaves [c * 2^depth, (c + 1) * 2^depth) of
  // level 0 in buf, hashed up to level 'depth'. At level l < depth the chunk
  // starts at an even node index, so chunks are independent; only the last
  // chunk can be partial, and it ends where the level ends, so pairing an odd
  // last node with itself is exactly the whole-tree rule.
  function hashChunk(buf, offs, sizes, depth, c) {
    for (let l = 0; l < depth; l++) {
      const span = Math.pow(2, depth - l);
      const start = c * span;
      const count = Math.min(span, sizes[l] - start);
      hashLevel(buf, offs[l] + start * 32, count, buf, offs[l + 1] + (start / 2) * 32);
    }
  }

  // Level-0 leaves [from, to) in sorted order: leaf i is decoded leaf
  // keys[i] mod scale. dec32 / dst32 are Int32Array views, 8 words per leaf.
  function permute(keys, scale, dec32, dst32, from, to) {
    for (let i = from; i < to; i++) {
      const s = (keys[i] % scale) * 8, o = i * 8;
      dst32[o] = dec32[s]; dst32[o + 1] = dec32[s + 1]; dst32[o + 2] = dec32[s + 2]; dst32[o + 3] = dec32[s + 3];
      dst32[o + 4] = dec32[s + 4]; dst32[o + 5] = dec32[s + 5]; dst32[o + 6] = dec32[s + 6]; dst32[o + 7] = dec32[s + 7];
    }
  }

  // Work-shared lower levels: take chunk numbers from the shared counter until
  // none are left; for each, place its sorted leaves into buf and hash it.
  // Returns the chunks done here.
  function runChunks(counter, chunkCount, keys, scale, dec32, buf, buf32, offs, sizes, depth) {
    const done = [];
    const unit = Math.pow(2, depth);
    for (;;) {
      const c = Atomics.add(counter, 0, 1);
      if (c >= chunkCount) return done;
      permute(keys, scale, dec32, buf32, c * unit, Math.min((c + 1) * unit, sizes[0]));
      hashChunk(buf, offs, sizes, depth, c);
      done.push(c);
    }
  }

  // Two ASCII characters (read as one native-endian uint16) -> byte, or -1.
  const LITTLE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  const HEX2 = new Int32Array(65536).fill(-1);
  const nibble = (ch) => (ch >= 48 && ch <= 57 ? ch - 48 : ch >= 97 && ch <= 102 ? ch - 87 : -1);
  for (let x = 0; x < 256; x++) {
    for (let y = 0; y < 256; y++) {
      const hi = nibble(x), lo = nibble(y);
      if (hi >= 0 && lo >= 0) HEX2[LITTLE ? x | (y << 8) : (x << 8) | y] = (hi << 4) | lo;
    }
  }

  // Validates and decodes 'count' leaves: asc16 is a Uint16Array over 64 ASCII
  // bytes per leaf, dec receives 32 bytes per leaf from byte offset decOff.
  // Returns the index (within this chunk) of the first invalid leaf, or -1.
  function decodeLeaves(asc16, count, dec, decOff) {
    for (let i = 0; i < count; i++) {
      const s = i * 32, d = decOff + s;
      let bad = 0;
      for (let j = 0; j < 32; j++) {
        const v = HEX2[asc16[s + j]];
        bad |= v;
        dec[d + j] = v;
      }
      if (bad < 0) return i;
    }
    return -1;
  }

  // keys[i] = (first 53 - idxBits bits of leaf i) * 2^idxBits + i, exact in a double.
  function buildKeys(dec, keys, from, to, idxBits) {
    const pb = 53 - idxBits;
    const scale = Math.pow(2, idxBits);
    const hiScale = pb > 32 ? Math.pow(2, pb - 32) : 1;
    for (let i = from; i < to; i++) {
      const o = i * 32;
      const top = ((dec[o] << 24) | (dec[o + 1] << 16) | (dec[o + 2] << 8) | dec[o + 3]) >>> 0;
      let prefix;
      if (pb <= 32) {
        prefix = top >>> (32 - pb);
      } else {
        const next = ((dec[o + 4] << 24) | (dec[o + 5] << 16) | (dec[o + 6] << 8) | dec[o + 7]) >>> 0;
        prefix = top * hiScale + (next >>> (64 - pb));
      }
      keys[i] = prefix * scale + i;
    }
  }

  return {
    hashLevel: hashLevel,
    hashLevels: hashLevels,
    hashChunk: hashChunk,
    permute: permute,
    runChunks: runChunks,
    decodeLeaves: decodeLeaves,
    buildKeys: buildKeys
  };
}
`

interface Kernel {
  readonly hashLevel: (src: Uint8Array, srcOff: number, count: number, dst: Uint8Array, dstOff: number) => void
  readonly hashLevels: (buf: Uint8Array, offs: ReadonlyArray<number>, sizes: ReadonlyArray<number>, from: number) => void
  readonly hashChunk: (
    buf: Uint8Array,
    offs: ReadonlyArray<number>,
    sizes: ReadonlyArray<number>,
    depth: number,
    chunk: number
  ) => void
  readonly permute: (keys: Float64Array, scale: number, dec32: Int32Array, dst32: Int32Array, from: number, to: number) => void
  readonly runChunks: (
    counter: Int32Array,
    chunkCount: number,
    keys: Float64Array,
    scale: number,
    dec32: Int32Array,
    buf: Uint8Array,
    buf32: Int32Array,
    offs: ReadonlyArray<number>,
    sizes: ReadonlyArray<number>,
    depth: number
  ) => Array<number>
  readonly decodeLeaves: (asc16: Uint16Array, count: number, dec: Uint8Array, decOff: number) => number
  readonly buildKeys: (dec: Uint8Array, keys: Float64Array, from: number, to: number, idxBits: number) => void
}

let kernelInstance: Kernel | undefined
const kernel = (): Kernel => {
  if (kernelInstance === undefined) {
    // eslint-disable-next-line @typescript-eslint/no-implied-eval
    kernelInstance = new Function(`${KERNEL_SRC}\nreturn makeMerkleKernel();`)() as Kernel
  }
  return kernelInstance
}

// ---------------------------------------------------------------------------
// Tree shape

/** Number of nodes at each level, leaves first, root (1) last. */
export const levelSizes = (leafCount: number): Array<number> => {
  if (!Number.isSafeInteger(leafCount) || leafCount < 1) {
    throw new RangeError(`Merkle: leafCount must be a positive integer, got ${leafCount}`)
  }
  const sizes = [leafCount]
  let size = leafCount
  while (size > 1) {
    size = Math.ceil(size / 2)
    sizes.push(size)
  }
  return sizes
}

/**
 * The stored node (level, index) that is the sibling at each proof step, leaf
 * to root. For a duplicated odd node the sibling is the node itself (same
 * index, position "right").
 */
export const siblingPath = (leafCount: number, leafIndex: number): Array<SiblingRef> => {
  const sizes = levelSizes(leafCount)
  if (!Number.isSafeInteger(leafIndex) || leafIndex < 0 || leafIndex >= leafCount) {
    throw new RangeError(`Merkle: leaf index ${leafIndex} out of range for ${leafCount} leaves`)
  }
  const path: Array<SiblingRef> = []
  let index = leafIndex
  for (let level = 0; level + 1 < sizes.length; level++) {
    const size = sizes[level]!
    if (index % 2 === 1) {
      path.push({ level, index: index - 1, position: "left" })
    } else {
      path.push({ level, index: index + 1 < size ? index + 1 : index, position: "right" })
    }
    index = Math.floor(index / 2)
  }
  return path
}

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

  proof(index: number): Array<ProofStep> {
    return siblingPath(this.leafCount, index).map(({ index: i, level, position }) => ({
      hash: this.levels[level]!.toString("hex", i * 32, i * 32 + 32),
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

const WORKER_SRC = `${KERNEL_SRC}
const { parentPort } = require("node:worker_threads");
const kernel = makeMerkleKernel();
parentPort.on("message", (m) => {
  try {
    if (m.op === "sortKeys") {
      kernel.buildKeys(new Uint8Array(m.dec), new Float64Array(m.keys), m.from, m.to, m.idxBits);
      new Float64Array(m.keys, m.from * 8, m.to - m.from).sort();
      parentPort.postMessage({ id: m.id, chunks: [] });
    } else if (m.op === "chunks") {
      const chunks = kernel.runChunks(
        new Int32Array(m.counter), m.chunkCount, new Float64Array(m.keys), m.scale,
        new Int32Array(m.dec), new Uint8Array(m.out), new Int32Array(m.out), m.offsets, m.sizes, m.depth
      );
      parentPort.postMessage({ id: m.id, chunks: chunks });
    } else {
      throw new Error("unknown op " + m.op);
    }
  } catch (e) {
    parentPort.postMessage({ id: m.id, error: String((e && e.stack) || e) });
  }
});
`

type WorkerJob =
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
    this.#worker = new Worker(WORKER_SRC, { eval: true })
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

// ---------------------------------------------------------------------------
// Proof verification

/** Root reached from the leaf through the proof. Throws on malformed input. */
export const computeRoot = (leafHex: string, proof: ReadonlyArray<ProofStep>): string => {
  if (!isHex64(leafHex)) throw new TypeError("Merkle: leaf is not a 64-character lowercase hex SHA-256 digest")
  let current: Buffer = Buffer.from(leafHex, "hex")
  for (const step of proof) {
    if (typeof step !== "object" || step === null || !isHex64(step.hash)) {
      throw new TypeError("Merkle: proof step hash is not 64 lowercase hex characters")
    }
    const sibling = Buffer.from(step.hash, "hex")
    if (step.position === "left") current = nodeHash(sibling, current)
    else if (step.position === "right") current = nodeHash(current, sibling)
    else throw new TypeError("Merkle: proof step position must be \"left\" or \"right\"")
  }
  return current.toString("hex")
}

/** True iff the proof leads from the leaf to rootHex; false (never throws) on malformed input. */
export const verifyProof = (leafHex: string, proof: ReadonlyArray<ProofStep>, rootHex: string): boolean => {
  try {
    return isHex64(rootHex) && Array.isArray(proof) && computeRoot(leafHex, proof) === rootHex
  } catch {
    return false
  }
}
