/**
 * Merkle v2 — pure and portable (Node and browsers; no node:*, no Buffer).
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
 * The sealer's fast tree builder (node:crypto, a worker thread, 1M leaves)
 * is src/Sealing/MerkleBuilder.ts.
 */
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, hexToBytes } from "./Bytes.js"

export type Position = "left" | "right"

/** A proof step: a sibling's hash (a HashHex in the proofs the service builds) and its side. */
export interface ProofStep<Hash extends string = string> {
  readonly hash: Hash
  readonly position: Position
}

export const MERKLE_TREE_VERSION = 2

export interface SiblingRef {
  readonly level: number
  readonly index: number
  readonly position: Position
}

const HEX64 = /^[0-9a-f]{64}$/

export const isHex64 = (s: unknown): s is string => typeof s === "string" && HEX64.test(s)

/** SHA-256(0x01 ‖ left ‖ right); both operands must be 32 bytes. */
export const nodeHash = (left: Uint8Array, right: Uint8Array): Uint8Array => {
  if (left.length !== 32 || right.length !== 32) {
    throw new RangeError("Merkle: nodeHash operands must be 32 bytes each")
  }
  const input = new Uint8Array(65)
  input[0] = 0x01
  input.set(left, 1)
  input.set(right, 33)
  return sha256(input)
}

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

/** Root reached from the leaf through the proof. Throws on malformed input. */
export const computeRoot = (leafHex: string, proof: ReadonlyArray<ProofStep>): string => {
  if (!isHex64(leafHex)) throw new TypeError("Merkle: leaf is not a 64-character lowercase hex SHA-256 digest")
  let current = hexToBytes(leafHex)
  for (const step of proof) {
    if (typeof step !== "object" || step === null || !isHex64(step.hash)) {
      throw new TypeError("Merkle: proof step hash is not 64 lowercase hex characters")
    }
    const sibling = hexToBytes(step.hash)
    if (step.position === "left") current = nodeHash(sibling, current)
    else if (step.position === "right") current = nodeHash(current, sibling)
    else throw new TypeError("Merkle: proof step position must be \"left\" or \"right\"")
  }
  return bytesToHex(current)
}

/** True iff the proof leads from the leaf to rootHex; false (never throws) on malformed input. */
export const verifyProof = (leafHex: string, proof: ReadonlyArray<ProofStep>, rootHex: string): boolean => {
  try {
    return isHex64(rootHex) && Array.isArray(proof) && computeRoot(leafHex, proof) === rootHex
  } catch {
    return false
  }
}
