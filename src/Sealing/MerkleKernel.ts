/**
 * The sealer's bulk Merkle v2 kernel: a SHA-256 specialised for the fixed
 * 65-byte node message (no allocation per node; the second block's message
 * schedule is precomputed for all 256 values of its only variable byte), leaf
 * decoding and sort keys. A plain module, run on the main thread by
 * MerkleBuilder.ts and in the worker thread by MerkleWorker.ts.
 *
 * Typed arrays are indexed in tight loops with indices in range by
 * construction, hence the non-null assertions.
 */
export interface Kernel {
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

export function makeMerkleKernel(): Kernel {
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
  // byte only, so K[t]! + W[t]! of block 2 is precomputed for all 256 values.
  const KW2 = new Int32Array(256 * 64);
  for (let v = 0; v < 256; v++) {
    const w = new Int32Array(64);
    w[0] = (v << 24) | 0x800000;
    w[15] = 520;
    for (let t = 16; t < 64; t++) {
      const w15 = w[t - 15]!, w2 = w[t - 2]!;
      const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
      const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
      w[t] = (w[t - 16]! + s0 + w[t - 7]! + s1) | 0;
    }
    for (let t = 0; t < 64; t++) KW2[v * 64 + t] = (w[t]! + K[t]!) | 0;
  }

  // Parents of the 'count' 32-byte nodes at src[srcOff..]! written to dst[dstOff..]!;
  // an odd last node is paired with itself.
  function hashLevel(src: Uint8Array, srcOff: number, count: number, dst: Uint8Array, dstOff: number): void {
    const parents = (count + 1) >>> 1;
    for (let p = 0; p < parents; p++) {
      const lo = srcOff + p * 64;
      const ro = 2 * p + 1 < count ? lo + 32 : lo;
      W[0] = 0x01000000 | (src[lo]! << 16) | (src[lo + 1]! << 8) | src[lo + 2]!;
      for (let j = 1; j < 8; j++) {
        const o = lo + 4 * j - 1;
        W[j] = (src[o]! << 24) | (src[o + 1]! << 16) | (src[o + 2]! << 8) | src[o + 3]!;
      }
      W[8] = (src[lo + 31]! << 24) | (src[ro]! << 16) | (src[ro + 1]! << 8) | src[ro + 2]!;
      for (let j = 1; j < 8; j++) {
        const o = ro + 4 * j - 1;
        W[8 + j] = (src[o]! << 24) | (src[o + 1]! << 16) | (src[o + 2]! << 8) | src[o + 3]!;
      }
      for (let t = 16; t < 64; t++) {
        const w15 = W[t - 15]!, w2 = W[t - 2]!;
        const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
        const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
        W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0;
      }
      let a = IV0, b = IV1, c = IV2, d = IV3, e = IV4, f = IV5, g = IV6, h = IV7;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          ((e & f) ^ (~e & g)) + K[t]! + W[t]!) | 0;
        const t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
          ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      const h0 = (a + IV0) | 0, h1 = (b + IV1) | 0, h2 = (c + IV2) | 0, h3 = (d + IV3) | 0;
      const h4 = (e + IV4) | 0, h5 = (f + IV5) | 0, h6 = (g + IV6) | 0, h7 = (h + IV7) | 0;
      a = h0; b = h1; c = h2; d = h3; e = h4; f = h5; g = h6; h = h7;
      const kb = src[ro + 31]! * 64;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          ((e & f) ^ (~e & g)) + KW2[kb + t]!) | 0;
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

  // Levels from+1 .. sizes.length-1 of a tree stored in buf, level l at byte offset offs[l]!.
  function hashLevels(buf: Uint8Array, offs: ReadonlyArray<number>, sizes: ReadonlyArray<number>, from: number): void {
    for (let l = from; l + 1 < sizes.length; l++) hashLevel(buf, offs[l]!, sizes[l]!, buf, offs[l + 1]!);
  }

  // Chunk c of the lower levels: leaves [c * 2^depth, (c + 1) * 2^depth) of
  // level 0 in buf, hashed up to level 'depth'. At level l < depth the chunk
  // starts at an even node index, so chunks are independent; only the last
  // chunk can be partial, and it ends where the level ends, so pairing an odd
  // last node with itself is exactly the whole-tree rule.
  function hashChunk(buf: Uint8Array, offs: ReadonlyArray<number>, sizes: ReadonlyArray<number>, depth: number, c: number): void {
    for (let l = 0; l < depth; l++) {
      const span = Math.pow(2, depth - l);
      const start = c * span;
      const count = Math.min(span, sizes[l]! - start);
      hashLevel(buf, offs[l]! + start * 32, count, buf, offs[l + 1]! + (start / 2) * 32);
    }
  }

  // Level-0 leaves [from, to) in sorted order: leaf i is decoded leaf
  // keys[i]! mod scale. dec32 / dst32 are Int32Array views, 8 words per leaf.
  function permute(keys: Float64Array, scale: number, dec32: Int32Array, dst32: Int32Array, from: number, to: number): void {
    for (let i = from; i < to; i++) {
      const s = (keys[i]! % scale) * 8, o = i * 8;
      dst32[o] = dec32[s]!; dst32[o + 1] = dec32[s + 1]!; dst32[o + 2] = dec32[s + 2]!; dst32[o + 3] = dec32[s + 3]!;
      dst32[o + 4] = dec32[s + 4]!; dst32[o + 5] = dec32[s + 5]!; dst32[o + 6] = dec32[s + 6]!; dst32[o + 7] = dec32[s + 7]!;
    }
  }

  // Work-shared lower levels: take chunk numbers from the shared counter until
  // none are left; for each, place its sorted leaves into buf and hash it.
  // Returns the chunks done here.
  function runChunks(counter: Int32Array, chunkCount: number, keys: Float64Array, scale: number, dec32: Int32Array, buf: Uint8Array, buf32: Int32Array, offs: ReadonlyArray<number>, sizes: ReadonlyArray<number>, depth: number): Array<number> {
    const done = [];
    const unit = Math.pow(2, depth);
    for (;;) {
      const c = Atomics.add(counter, 0, 1);
      if (c >= chunkCount) return done;
      permute(keys, scale, dec32, buf32, c * unit, Math.min((c + 1) * unit, sizes[0]!));
      hashChunk(buf, offs, sizes, depth, c);
      done.push(c);
    }
  }

  // Two ASCII characters (read as one native-endian uint16) -> byte, or -1.
  const LITTLE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  const HEX2 = new Int32Array(65536).fill(-1);
  const nibble = (ch: number): number => (ch >= 48 && ch <= 57 ? ch - 48 : ch >= 97 && ch <= 102 ? ch - 87 : -1);
  for (let x = 0; x < 256; x++) {
    for (let y = 0; y < 256; y++) {
      const hi = nibble(x), lo = nibble(y);
      if (hi >= 0 && lo >= 0) HEX2[LITTLE ? x | (y << 8) : (x << 8) | y] = (hi << 4) | lo;
    }
  }

  // Validates and decodes 'count' leaves: asc16 is a Uint16Array over 64 ASCII
  // bytes per leaf, dec receives 32 bytes per leaf from byte offset decOff.
  // Returns the index (within this chunk) of the first invalid leaf, or -1.
  function decodeLeaves(asc16: Uint16Array, count: number, dec: Uint8Array, decOff: number): number {
    for (let i = 0; i < count; i++) {
      const s = i * 32, d = decOff + s;
      let bad = 0;
      for (let j = 0; j < 32; j++) {
        const v = HEX2[asc16[s + j]!]!;
        bad |= v;
        dec[d + j] = v;
      }
      if (bad < 0) return i;
    }
    return -1;
  }

  // keys[i] = (first 53 - idxBits bits of leaf i) * 2^idxBits + i, exact in a double.
  function buildKeys(dec: Uint8Array, keys: Float64Array, from: number, to: number, idxBits: number): void {
    const pb = 53 - idxBits;
    const scale = Math.pow(2, idxBits);
    const hiScale = pb > 32 ? Math.pow(2, pb - 32) : 1;
    for (let i = from; i < to; i++) {
      const o = i * 32;
      const top = ((dec[o]! << 24) | (dec[o + 1]! << 16) | (dec[o + 2]! << 8) | dec[o + 3]!) >>> 0;
      let prefix;
      if (pb <= 32) {
        prefix = top >>> (32 - pb);
      } else {
        const next = ((dec[o + 4]! << 24) | (dec[o + 5]! << 16) | (dec[o + 6]! << 8) | dec[o + 7]!) >>> 0;
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
