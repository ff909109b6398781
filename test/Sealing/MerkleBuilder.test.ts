import fc from "fast-check"
import { createHash } from "node:crypto"
import { describe, expect, it } from "vitest"
import * as Portable from "../../src/Domain/Merkle.js"
import {
  buildTree,
  computeRoot,
  levelSizes,
  MERKLE_TREE_VERSION,
  merkleRoot,
  nodeHash,
  type ProofStep,
  siblingPath,
  verifyProof
} from "../../src/Sealing/MerkleBuilder.js"

describe("Merkle v2: the portable module agrees with the sealer's builder", () => {
  it("same node hash, same proofs", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { minLength: 1, maxLength: 40 }), (raw) => {
        const leaves = raw.map((b) => Buffer.from(b).toString("hex"))
        const tree = buildTree(leaves)
        const a = Buffer.from(raw[0]!)
        const b = Buffer.from(raw[raw.length - 1]!)
        expect(Buffer.from(Portable.nodeHash(a, b)).equals(nodeHash(a, b))).toBe(true)
        for (let i = 0; i < tree.leafCount; i++) {
          expect(Portable.computeRoot(tree.leafHex(i), tree.proof(i))).toBe(tree.rootHex)
          expect(Portable.siblingPath(tree.leafCount, i)).toEqual(siblingPath(tree.leafCount, i))
        }
      }),
      { numRuns: 50 }
    )
  })
})

// ---------------------------------------------------------------------------
// Independent, deliberately straightforward reference implementation:
// arrays of hex strings, node:crypto createHash, no shared code with the module.

const sha256Hex = (data: Buffer | string): string => createHash("sha256").update(data).digest("hex")

const refNode = (left: string, right: string): string => sha256Hex(Buffer.from(`01${left}${right}`, "hex"))

const refLevels = (leaves: ReadonlyArray<string>): Array<Array<string>> => {
  const levels: Array<Array<string>> = [[...leaves].sort()]
  for (;;) {
    const level = levels[levels.length - 1]!
    if (level.length === 1) return levels
    const next: Array<string> = []
    for (let i = 0; i < level.length; i += 2) next.push(refNode(level[i]!, level[i + 1] ?? level[i]!))
    levels.push(next)
  }
}

const refRoot = (leaves: ReadonlyArray<string>): string => {
  const levels = refLevels(leaves)
  return levels[levels.length - 1]![0]!
}

const refProof = (levels: ReadonlyArray<ReadonlyArray<string>>, leafIndex: number): Array<ProofStep> => {
  const proof: Array<ProofStep> = []
  let i = leafIndex
  for (let l = 0; l + 1 < levels.length; l++) {
    const level = levels[l]!
    if (i % 2 === 1) proof.push({ hash: level[i - 1]!, position: "left" })
    else proof.push({ hash: level[i + 1] ?? level[i]!, position: "right" })
    i = Math.floor(i / 2)
  }
  return proof
}

/** n distinct pseudo-random leaves, reproducible from the seed. */
const leavesFor = (n: number, seed: number): Array<string> =>
  Array.from({ length: n }, (_, i) => sha256Hex(`leaf:${seed}:${i}`))

const flipBit = (hex: string, bit: number): string => {
  const bytes = Buffer.from(hex, "hex")
  bytes[bit >>> 3] = bytes[bit >>> 3]! ^ (1 << (bit & 7))
  return bytes.toString("hex")
}

/** Every leaf of a small tree; for bigger ones the ends, the odd tail and a spread of others. */
const sampleIndices = (n: number, count = 24): Array<number> => {
  if (n <= 64) return Array.from({ length: n }, (_, i) => i)
  const picks = new Set([0, 1, n - 2, n - 1, n >> 1])
  for (let k = 0; picks.size < count; k++) picks.add(Math.floor((k * 2654435761) % n))
  return [...picks]
}

const seedArb = fc.integer({ min: 0, max: 2 ** 31 - 1 })

// Leaves sha256("attestd-1") … sha256("attestd-5"); roots computed with Python's hashlib.
const L = [
  "b90e6ab88602e6c67267b62ae526c883a09bfad222ea818ac6e53b459e9bbacb",
  "56b53826090183adc40b93644d218e1f59217f38f26edef97c4584a985863527",
  "93875615e447b748b030e0905d87bd032a1efd9d1503911aa1828eb1dfb43839",
  "42baffa5d16a78689ed17ee3dba187fe83885ecd545c08e8f744ed3604a249b2",
  "9d81320fb5744eed5a4798f6e8c83c75143baa8eb84ad5bcf0747eb6e7a32d86"
] as const
const PYTHON_ROOTS = [
  "b90e6ab88602e6c67267b62ae526c883a09bfad222ea818ac6e53b459e9bbacb",
  "48b3b1cf6b580acdce647d5a15c7cb1d4c929c47f8ea6b421788ea008ea0c438",
  "36c4f0376f6a0f295bb88065c03b4738746012e5fef22cc032df60447efda9d4",
  "5789107a3005234160bd1b930d1701b191b6f23fe4c77ba2dd79eb5feb428365",
  "5a0e72a7578f8613888ee8c11b3160c4345d172e7cee3de5aa0fe9f7d5bb4a8c"
] as const

describe("Merkle v2: hand-computed trees", () => {
  it("is version 2", () => {
    expect(MERKLE_TREE_VERSION).toBe(2)
  })

  it("uses leaves sha256('attestd-k') as expected by the fixtures", () => {
    L.forEach((leaf, k) => expect(sha256Hex(`attestd-${k + 1}`)).toBe(leaf))
  })

  it("one leaf: the root is the leaf itself and the proof is empty", () => {
    const tree = buildTree([L[0]])
    expect(tree.leafCount).toBe(1)
    expect(tree.rootHex).toBe(L[0])
    expect(tree.root.equals(Buffer.from(L[0], "hex"))).toBe(true)
    expect(tree.levels.map((l) => l.length)).toEqual([32])
    expect(tree.proof(0)).toEqual([])
    expect(siblingPath(1, 0)).toEqual([])
    expect(verifyProof(L[0], [], L[0])).toBe(true)
    expect(merkleRoot([L[0]])).toBe(L[0])
  })

  it("two leaves: root = H(0x01 ‖ smaller ‖ larger), in either input order", () => {
    const [lo, hi] = [L[0], L[1]].sort() as [string, string]
    const expected = refNode(lo, hi)
    expect(expected).toBe(PYTHON_ROOTS[1])
    expect(buildTree([L[0], L[1]]).rootHex).toBe(expected)
    expect(buildTree([L[1], L[0]]).rootHex).toBe(expected)
    const tree = buildTree([L[0], L[1]])
    expect(tree.leafHex(0)).toBe(lo)
    expect(tree.proof(0)).toEqual([{ hash: hi, position: "right" }])
    expect(tree.proof(1)).toEqual([{ hash: lo, position: "left" }])
  })

  it("three leaves: the odd third leaf is paired with itself", () => {
    const [a, b, c] = [L[0], L[1], L[2]].sort() as [string, string, string]
    const ab = refNode(a, b)
    const cc = refNode(c, c)
    const root = refNode(ab, cc)
    const tree = buildTree([L[0], L[1], L[2]])
    expect(tree.rootHex).toBe(root)
    expect(root).toBe(PYTHON_ROOTS[2])
    expect(tree.levels.map((l) => l.toString("hex"))).toEqual([a + b + c, ab + cc, root])
    expect(tree.proof(2)).toEqual([
      { hash: c, position: "right" },
      { hash: ab, position: "left" }
    ])
    expect(siblingPath(3, 2)).toEqual([
      { level: 0, index: 2, position: "right" },
      { level: 1, index: 0, position: "left" }
    ])
  })

  it("four leaves: a complete tree", () => {
    const [a, b, c, d] = [...L.slice(0, 4)].sort() as [string, string, string, string]
    const root = refNode(refNode(a, b), refNode(c, d))
    expect(root).toBe(PYTHON_ROOTS[3])
    const tree = buildTree(L.slice(0, 4))
    expect(tree.rootHex).toBe(root)
    expect(tree.proof(2)).toEqual([
      { hash: d, position: "right" },
      { hash: refNode(a, b), position: "left" }
    ])
  })

  it("five leaves: duplication at two levels", () => {
    const [a, b, c, d, e] = [...L].sort() as [string, string, string, string, string]
    const ab = refNode(a, b)
    const cd = refNode(c, d)
    const ee = refNode(e, e)
    const abcd = refNode(ab, cd)
    const eeee = refNode(ee, ee)
    const root = refNode(abcd, eeee)
    expect(root).toBe(PYTHON_ROOTS[4])
    const tree = buildTree([...L])
    expect(tree.rootHex).toBe(root)
    expect(tree.levels.map((l) => l.toString("hex"))).toEqual([a + b + c + d + e, ab + cd + ee, abcd + eeee, root])
    expect(tree.proof(4)).toEqual([
      { hash: e, position: "right" },
      { hash: ee, position: "right" },
      { hash: abcd, position: "left" }
    ])
    expect(tree.proof(1)).toEqual([
      { hash: a, position: "left" },
      { hash: cd, position: "right" },
      { hash: eeee, position: "right" }
    ])
    for (let i = 0; i < 5; i++) expect(verifyProof(tree.leafHex(i), tree.proof(i), root)).toBe(true)
  })

  it("matches the Python-computed roots for 1…5 leaves", () => {
    for (let n = 1; n <= 5; n++) expect(merkleRoot(L.slice(0, n))).toBe(PYTHON_ROOTS[n - 1])
  })

  it("nodeHash is SHA-256(0x01 ‖ left ‖ right)", () => {
    const left = Buffer.from(L[0], "hex")
    const right = Buffer.from(L[1], "hex")
    expect(nodeHash(left, right).toString("hex")).toBe(refNode(L[0], L[1]))
    expect(() => nodeHash(left.subarray(1), right)).toThrow(RangeError)
  })

  it("bulk hashing agrees with node:crypto for every value of the last message byte", () => {
    // sorted, the right operand is the ff… leaf, whose last byte is the only
    // variable byte of the second SHA-256 block
    const lo = "00".repeat(32)
    for (let v = 0; v < 256; v++) {
      const hi = "ff".repeat(31) + v.toString(16).padStart(2, "0")
      expect(buildTree([hi, lo]).rootHex).toBe(refNode(lo, hi))
      // and a duplicated single node on the right: 3 leaves, third = hi
      const lo2 = "00".repeat(31) + "01"
      expect(buildTree([hi, lo, lo2]).rootHex).toBe(refRoot([hi, lo, lo2]))
    }
  })

  it("keeps duplicate leaves", () => {
    const tree = buildTree([L[0], L[1], L[0]])
    const [x, y, z] = [L[0], L[1], L[0]].sort() as [string, string, string]
    expect(tree.leafCount).toBe(3)
    expect(tree.levels[0]!.toString("hex")).toBe(x + y + z)
    expect(tree.rootHex).toBe(refNode(refNode(x, y), refNode(z, z)))
  })
})

describe("Merkle v2: properties", () => {
  it("random trees of 1…2,000 leaves match the reference; every (sampled) proof reaches the root", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2000 }), seedArb, (n, seed) => {
        const leaves = leavesFor(n, seed)
        const levels = refLevels(leaves)
        const tree = buildTree(leaves)
        expect(tree.leafCount).toBe(n)
        expect(tree.rootHex).toBe(levels[levels.length - 1]![0])
        expect(tree.levels.length).toBe(levels.length)
        for (const i of sampleIndices(n)) {
          const leaf = tree.leafHex(i)
          expect(leaf).toBe(levels[0]![i])
          const proof = tree.proof(i)
          expect(proof).toEqual(refProof(levels, i))
          expect(computeRoot(leaf, proof)).toBe(tree.rootHex)
          expect(verifyProof(leaf, proof, tree.rootHex)).toBe(true)
        }
      }),
      { numRuns: 60 }
    )
  })

  it("small trees: every leaf's proof verifies and every level matches the reference", () => {
    for (let n = 1; n <= 70; n++) {
      const leaves = leavesFor(n, 7)
      const levels = refLevels(leaves)
      const tree = buildTree(leaves)
      expect(tree.levels.map((l) => l.toString("hex"))).toEqual(levels.map((l) => l.join("")))
      for (let i = 0; i < n; i++) expect(verifyProof(tree.leafHex(i), tree.proof(i), tree.rootHex)).toBe(true)
    }
  })

  it("tampering: any flipped bit in the leaf, a step hash or the root, or a flipped position, fails", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 600 }),
        seedArb,
        fc.nat(),
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        fc.constantFrom("leaf", "hash", "position", "root"),
        (n, seed, leafPick, stepPick, bit, target) => {
          const tree = buildTree(leavesFor(n, seed))
          const index = leafPick % n
          const leaf = tree.leafHex(index)
          const proof = tree.proof(index)
          expect(verifyProof(leaf, proof, tree.rootHex)).toBe(true)
          if (target === "leaf" || proof.length === 0) {
            expect(verifyProof(flipBit(leaf, bit), proof, tree.rootHex)).toBe(false)
            return
          }
          if (target === "root") {
            expect(verifyProof(leaf, proof, flipBit(tree.rootHex, bit))).toBe(false)
            return
          }
          const k = stepPick % proof.length
          const step = proof[k]!
          const tampered: Array<ProofStep> = target === "hash"
            ? proof.map((s, j) => (j === k ? { ...s, hash: flipBit(s.hash, bit) } : s))
            : proof.map((s, j) => (j === k ? { ...s, position: s.position === "left" ? "right" : "left" } : s))
          // the node the step is applied to
          const current = computeRoot(leaf, proof.slice(0, k))
          if (target === "position" && step.hash === current) {
            // sibling is the node itself (odd node duplicated): H(x ‖ x) is symmetric,
            // so the flipped position legitimately still verifies
            expect(siblingPath(n, index)[k]!.index).toBe(index >> k)
            expect(verifyProof(leaf, tampered, tree.rootHex)).toBe(true)
          } else {
            expect(verifyProof(leaf, tampered, tree.rootHex)).toBe(false)
          }
        }
      ),
      { numRuns: 400 }
    )
  })

  it("flipping every single position and every bit of a fixed proof fails (exhaustive on one proof)", () => {
    const tree = buildTree(leavesFor(1000, 99))
    const index = 421
    const leaf = tree.leafHex(index)
    const proof = tree.proof(index)
    for (let k = 0; k < proof.length; k++) {
      const flipped = proof.map((s, j) =>
        j === k ? { ...s, position: s.position === "left" ? ("right" as const) : ("left" as const) } : s
      )
      expect(verifyProof(leaf, flipped, tree.rootHex)).toBe(false)
      for (let bit = 0; bit < 256; bit++) {
        const tampered = proof.map((s, j) => (j === k ? { ...s, hash: flipBit(s.hash, bit) } : s))
        expect(verifyProof(leaf, tampered, tree.rootHex)).toBe(false)
      }
    }
    for (let bit = 0; bit < 256; bit++) expect(verifyProof(flipBit(leaf, bit), proof, tree.rootHex)).toBe(false)
    // dropping or adding a step fails too
    expect(verifyProof(leaf, proof.slice(0, -1), tree.rootHex)).toBe(false)
    expect(verifyProof(leaf, [...proof, proof[0]!], tree.rootHex)).toBe(false)
  })

  it("the order the leaves arrive in does not change the tree", () => {
    fc.assert(
      fc.property(
        fc.tuple(fc.integer({ min: 1, max: 400 }), seedArb).chain(([n, seed]) => {
          const leaves = leavesFor(n, seed)
          return fc.shuffledSubarray(leaves, { minLength: n, maxLength: n }).map((shuffled) => [leaves, shuffled] as const)
        }),
        ([leaves, shuffled]) => {
          const a = buildTree(leaves)
          const b = buildTree(shuffled)
          expect(b.rootHex).toBe(a.rootHex)
          expect(Buffer.concat([...b.levels]).equals(Buffer.concat([...a.levels]))).toBe(true)
        }
      ),
      { numRuns: 100 }
    )
    const big = leavesFor(50_000, 3)
    expect(buildTree([...big].reverse()).rootHex).toBe(buildTree(big).rootHex)
  })

  it("sorts exactly when leaves share long prefixes (and with duplicates)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 600 }),
        fc.integer({ min: 1, max: 31 }),
        seedArb,
        fc.boolean(),
        (n, sharedBytes, seed, withDuplicates) => {
          const prefix = sha256Hex(`prefix:${seed}`).slice(0, sharedBytes * 2)
          const leaves = leavesFor(n, seed).map((h) => prefix + h.slice(prefix.length))
          if (withDuplicates) leaves.push(...leaves.slice(0, Math.ceil(n / 3)))
          const tree = buildTree(leaves)
          expect(tree.levels[0]!.toString("hex")).toBe([...leaves].sort().join(""))
          expect(tree.rootHex).toBe(refRoot(leaves))
        }
      ),
      { numRuns: 60 }
    )
  })

  it("siblingPath names exactly the stored nodes of proof()", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3000 }), seedArb, (n, seed) => {
        const tree = buildTree(leavesFor(n, seed))
        expect(levelSizes(n)).toEqual(tree.levels.map((l) => l.length / 32))
        for (const i of sampleIndices(n, 16)) {
          const path = siblingPath(n, i)
          const proof = tree.proof(i)
          expect(path.length).toBe(proof.length)
          path.forEach((ref, k) => {
            expect(ref.level).toBe(k)
            expect(ref.position).toBe(proof[k]!.position)
            expect(ref.index).toBeLessThan(levelSizes(n)[k]!)
            expect(tree.levels[ref.level]!.toString("hex", ref.index * 32, ref.index * 32 + 32)).toBe(proof[k]!.hash)
            const own = i >> k
            if (ref.index === own) {
              // only a duplicated odd last node is its own sibling
              expect(own).toBe(levelSizes(n)[k]! - 1)
              expect(own % 2).toBe(0)
            } else {
              expect(ref.index).toBe(own ^ 1)
            }
          })
        }
      }),
      { numRuns: 60 }
    )
  })

  it("leafIndex finds every leaf and rejects others", () => {
    const leaves = leavesFor(777, 5)
    const tree = buildTree(leaves)
    for (let i = 0; i < tree.leafCount; i++) expect(tree.leafIndex(tree.leafHex(i))).toBe(i)
    for (const leaf of leaves) expect(tree.leafHex(tree.leafIndex(leaf))).toBe(leaf)
    expect(tree.leafIndex(sha256Hex("absent"))).toBe(-1)
    expect(tree.leafIndex("00".repeat(32))).toBe(-1)
    expect(tree.leafIndex("ff".repeat(32))).toBe(-1)
    expect(tree.leafIndex(leaves[0]!.toUpperCase())).toBe(-1)
    expect(tree.leafIndex("nope")).toBe(-1)
  })
})

describe("Merkle v2: larger trees", () => {
  it("equals the reference root for odd sizes and power-of-two boundaries", () => {
    for (const n of [4_099, 32_767, 32_768, 32_769, 100_003]) {
      const leaves = leavesFor(n, n)
      expect(buildTree(leaves).rootHex).toBe(refRoot(leaves))
    }
  })

  it("sorts exactly when leaves share long prefixes, duplicates kept", () => {
    const prefix = "ab".repeat(12)
    const leaves = leavesFor(8_195, 11).map((h, i) => (i % 2 === 0 ? prefix + h.slice(24) : h))
    leaves.push(...leaves.slice(0, 1000))
    expect(buildTree(leaves).levels[0]!.toString("hex")).toBe([...leaves].sort().join(""))
  })
})

describe("Merkle v2: malformed input", () => {
  const good = L[0]

  it("buildTree throws on an empty list", () => {
    expect(() => buildTree([])).toThrow(RangeError)
    expect(() => merkleRoot([])).toThrow(RangeError)
  })

  it("buildTree throws on a leaf that is not 64 lowercase hex characters", () => {
    const bad: Array<unknown> = [
      good.toUpperCase(),
      good.slice(0, 63),
      `${good}0`,
      `${good.slice(0, 63)}g`,
      `${good.slice(0, 63)} `,
      `0x${good.slice(2)}`,
      `${good.slice(0, 62)}ā`, // non-ASCII
      `${good.slice(0, 63)}\u0130`, // U+0130: its low byte is "0" in latin1
      `${good.slice(0, 63)}\u0161`, // U+0161: its low byte is "a" in latin1
      `${good.slice(0, 63)}\ud800`, // lone surrogate
      "",
      42,
      undefined,
      null
    ]
    for (const leaf of bad) {
      expect(() => buildTree([good, leaf as string])).toThrow(TypeError)
      expect(() => buildTree([good, leaf as string])).toThrow("leaf 1 ")
    }
    // the first bad leaf is reported, also past the first decoding chunk
    const many = leavesFor(5000, 1)
    many[3000] = "zz".repeat(32)
    many[4000] = "xx"
    expect(() => buildTree(many)).toThrow("leaf 3000 ")
  })

  it("proof, leafHex and siblingPath reject out-of-range indices", () => {
    const tree = buildTree([...L])
    for (const i of [-1, 5, 1.5, Number.NaN]) {
      expect(() => tree.proof(i)).toThrow(RangeError)
      expect(() => tree.leafHex(i)).toThrow(RangeError)
      expect(() => siblingPath(5, i)).toThrow(RangeError)
    }
    expect(() => siblingPath(0, 0)).toThrow(RangeError)
    expect(() => levelSizes(0)).toThrow(RangeError)
    expect(levelSizes(1)).toEqual([1])
    expect(levelSizes(5)).toEqual([5, 3, 2, 1])
  })

  it("verifyProof returns false (never throws) on malformed input; computeRoot throws", () => {
    const tree = buildTree([...L])
    const leaf = tree.leafHex(2)
    const proof = tree.proof(2)
    const root = tree.rootHex
    const step = proof[0]!
    const cases: Array<[unknown, unknown, unknown]> = [
      [leaf.toUpperCase(), proof, root],
      [leaf.slice(1), proof, root],
      [42, proof, root],
      [leaf, proof, root.toUpperCase()],
      [leaf, proof, root.slice(2)],
      [leaf, proof, undefined],
      [leaf, null, root],
      [leaf, "proof", root],
      [leaf, [null, ...proof.slice(1)], root],
      [leaf, [{ ...step, hash: step.hash.slice(2) }, ...proof.slice(1)], root],
      [leaf, [{ ...step, hash: step.hash.toUpperCase() }, ...proof.slice(1)], root],
      [leaf, [{ ...step, position: "up" }, ...proof.slice(1)], root],
      [leaf, [{ hash: step.hash }, ...proof.slice(1)], root]
    ]
    for (const [l, p, r] of cases) {
      expect(verifyProof(l as string, p as Array<ProofStep>, r as string)).toBe(false)
    }
    expect(() => computeRoot("xyz", proof)).toThrow(TypeError)
    expect(() => computeRoot(leaf, [{ ...step, position: "up" as "left" }])).toThrow(TypeError)
  })
})
