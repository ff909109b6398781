/**
 * Merkle v2 tree building for the sealer and the anchorer, with node:crypto; the
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
 * Leaves are sorted as hex strings (a plain `sort()` of 1M hex strings takes
 * ~0.5 s here, a bytewise Buffer compare ~2.3 s) and each node is one
 * `crypto.hash` call.
 */
import { hash } from "node:crypto"
import { isHex64, levelSizes, siblingPath } from "../Domain/Merkle.js"
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

/** SHA-256(0x01 ‖ left ‖ right); both operands must be 32 bytes. */
export const nodeHash = (left: Uint8Array, right: Uint8Array): Buffer => {
  if (left.length !== 32 || right.length !== 32) {
    throw new RangeError("Merkle: nodeHash operands must be 32 bytes each")
  }
  const input = Buffer.allocUnsafe(65)
  input[0] = 0x01
  input.set(left, 1)
  input.set(right, 33)
  return hash("sha256", input, "buffer")
}

/** The level above `level` (n nodes of 32 bytes): each pair hashed, an odd last node paired with itself. */
const parentLevel = (level: Buffer): Buffer => {
  const n = level.length / 32
  const parents = Buffer.allocUnsafe(Math.ceil(n / 2) * 32)
  const input = Buffer.allocUnsafe(65)
  input[0] = 0x01
  for (let i = 0; i < n; i += 2) {
    const right = i + 1 < n ? i + 1 : i
    level.copy(input, 1, i * 32, i * 32 + 32)
    level.copy(input, 33, right * 32, right * 32 + 32)
    parents.set(hash("sha256", input, "buffer"), (i / 2) * 32)
  }
  return parents
}

class Tree implements MerkleTree {
  readonly leafCount: number
  readonly root: Buffer
  readonly rootHex: string

  constructor(readonly levels: ReadonlyArray<Buffer>) {
    this.leafCount = levels[0]!.length / 32
    this.root = levels[levels.length - 1]!
    this.rootHex = this.root.toString("hex")
  }

  leafHex(index: number): string {
    if (!Number.isSafeInteger(index) || index < 0 || index >= this.leafCount) {
      throw new RangeError(`Merkle: leaf index ${index} out of range for ${this.leafCount} leaves`)
    }
    return this.levels[0]!.toString("hex", index * 32, index * 32 + 32)
  }

  leafIndex(hashHex: string): number {
    if (!isHex64(hashHex)) return -1
    const target = Buffer.from(hashHex, "hex")
    const leaves = this.levels[0]!
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

/**
 * Builds the tree. Throws a RangeError on an empty list and a TypeError on a
 * leaf that is not 64 lowercase hex characters.
 */
export const buildTree = (leavesHex: ReadonlyArray<string>): MerkleTree => {
  if (leavesHex.length === 0) throw new RangeError("Merkle: cannot build a tree of zero leaves")
  leavesHex.forEach((leaf, i) => {
    if (!isHex64(leaf)) throw new TypeError(`Merkle: leaf ${i} is not a 64-character lowercase hex SHA-256 digest`)
  })
  const sorted = [...leavesHex].sort()
  const leaves = Buffer.allocUnsafe(sorted.length * 32)
  sorted.forEach((leaf, i) => leaves.write(leaf, i * 32, 32, "hex"))
  const levels: Array<Buffer> = [leaves]
  for (let size = levelSizes(sorted.length).length - 1; size > 0; size--) levels.push(parentLevel(levels[levels.length - 1]!))
  return new Tree(levels)
}

/** Root (hex) of the tree over the given leaves. */
export const merkleRoot = (leavesHex: ReadonlyArray<string>): string => buildTree(leavesHex).rootHex
