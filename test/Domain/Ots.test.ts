import { createHash } from "node:crypto"
import { createRequire } from "node:module"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  applyOp,
  type Attestation,
  Attestations,
  bitcoinAttestations,
  BITCOIN_TAG,
  bytesToHex,
  chain,
  type DetachedFile,
  graft,
  HEADER_MAGIC,
  isComplete,
  leaf,
  MAX_ARG_LENGTH,
  MAX_DEPTH,
  MAX_PAYLOAD_SIZE,
  merge,
  merkleStepsToOps,
  normalize,
  type Op,
  Ops,
  OtsFormatError,
  OtsUnsupportedOpError,
  parseDetachedFile,
  parseTimestamp,
  PENDING_TAG,
  pendingAttestations,
  replay,
  serializeDetachedFile,
  serializeTimestamp,
  type Timestamp
} from "../../src/Domain/Ots.js"

// The independent JS implementation (CommonJS, untyped).
const require = createRequire(import.meta.url)
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const OpenTimestamps: any = require("opentimestamps")

const sha256 = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest())
const hex = bytesToHex
const cat = (...parts: Uint8Array[]): Uint8Array => new Uint8Array(Buffer.concat(parts))

const varuint = (n: number): number[] => {
  const out: number[] = []
  let v = n
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80)
    v = Math.floor(v / 0x80)
  }
  out.push(v)
  return out
}
const pendingBytes = (uri: string): number[] => {
  const payload = [...varuint(uri.length), ...Buffer.from(uri, "ascii")]
  return [0x00, ...PENDING_TAG, ...varuint(payload.length), ...payload]
}

// ---------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------

const URI_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._/:".split("")
const uriArb = fc.array(fc.constantFrom(...URI_CHARS), { maxLength: 40 }).map((cs) => cs.join(""))
const unknownTagArb = fc
  .uint8Array({ minLength: 8, maxLength: 8 })
  .filter((t) => hex(t) !== hex(PENDING_TAG) && hex(t) !== hex(BITCOIN_TAG))

const attArb = (opts: { unknownTag?: Uint8Array; maxHeight?: number } = {}): fc.Arbitrary<Attestation> =>
  fc.oneof(
    uriArb.map((uri) => Attestations.pending(uri)),
    fc
      .oneof(fc.nat({ max: 1_000_000 }), fc.nat({ max: opts.maxHeight ?? Number.MAX_SAFE_INTEGER }))
      .map((h) => Attestations.bitcoin(h)),
    fc
      .tuple(
        opts.unknownTag !== undefined ? fc.constant(opts.unknownTag) : unknownTagArb,
        fc.uint8Array({ maxLength: 24 })
      )
      .map(([tag, payload]) => Attestations.unknown(tag, payload))
  )

type OpName = Op["_tag"]
const opArb = (unary: ReadonlyArray<OpName>): fc.Arbitrary<Op> =>
  fc.oneof(
    fc.tuple(fc.constantFrom("append" as const, "prepend" as const), fc.uint8Array({ minLength: 1, maxLength: 40 })).map(
      ([t, arg]) => (t === "append" ? Ops.append(arg) : Ops.prepend(arg))
    ),
    fc.constantFrom(...unary).map((t): Op => ({ _tag: t }) as Op)
  )

const ALL_UNARY: ReadonlyArray<OpName> = ["sha256", "sha1", "ripemd160", "keccak256", "reverse", "hexlify"]
const COMPUTABLE_UNARY: ReadonlyArray<OpName> = ["sha256", "sha1", "ripemd160", "reverse", "hexlify"]
/** What the JS package can compute (its hexlify is broken, it has no keccak256). */
const JS_UNARY: ReadonlyArray<OpName> = ["sha256", "sha1", "ripemd160", "reverse"]

/** Random non-empty trees of bounded depth (≤ 4 op edges deep keeps hexlify within the 4096-byte limit). */
const tsArb = (depth: number, att: fc.Arbitrary<Attestation>, op: fc.Arbitrary<Op>): fc.Arbitrary<Timestamp> => {
  if (depth === 0) {
    return fc.array(att, { minLength: 1, maxLength: 3 }).map((attestations) => ({ attestations, ops: [] }))
  }
  const child = tsArb(depth - 1, att, op)
  return fc
    .record({
      attestations: fc.array(att, { maxLength: 2 }),
      ops: fc.array(fc.tuple(op, child), { maxLength: 3 })
    })
    .chain((n) =>
      n.attestations.length + n.ops.length > 0 ? fc.constant(n as Timestamp) : att.map((a) => leaf(a))
    )
}

const anyTree = tsArb(4, attArb(), opArb(ALL_UNARY))
const computableTree = tsArb(4, attArb(), opArb(COMPUTABLE_UNARY))
const msgArb = fc.uint8Array({ minLength: 1, maxLength: 64 })
const fileArb = (tree: fc.Arbitrary<Timestamp>): fc.Arbitrary<DetachedFile> =>
  fc.tuple(fc.uint8Array({ minLength: 32, maxLength: 32 }), tree).map(([digest, timestamp]) => ({
    fileHashOp: "sha256" as const,
    digest,
    timestamp
  }))

const expectOnlyFormatErrors = (f: () => unknown): void => {
  try {
    f()
  } catch (e) {
    if (!(e instanceof OtsFormatError)) throw e
  }
}

// ---------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------

describe("Ots codec", () => {
  it("writes the exact header and a minimal pending file", () => {
    const digest = new Uint8Array(32).fill(0xab)
    const bytes = serializeDetachedFile({
      fileHashOp: "sha256",
      digest,
      timestamp: leaf(Attestations.pending("https://a.example"))
    })
    expect(hex(bytes.subarray(0, 31))).toBe("004f70656e54696d657374616d7073000050726f6f6600bf89e2e884e89294")
    expect(hex(HEADER_MAGIC)).toBe(hex(bytes.subarray(0, 31)))
    expect(hex(bytes.subarray(31))).toBe(
      "01" + "08" + "ab".repeat(32) + "00" + "83dfe30d2ef90c8e" + "12" + "11" + hex(Buffer.from("https://a.example"))
    )
  })

  it("parse(serialize(x)) = normalize(x) and serialize(parse(bytes)) = bytes, for random trees", () => {
    fc.assert(
      fc.property(fileArb(anyTree), (file) => {
        const bytes = serializeDetachedFile(file)
        const parsed = parseDetachedFile(bytes)
        const canonical = { ...file, timestamp: normalize(file.timestamp) }
        expect(parsed).toStrictEqual(canonical)
        expect(normalize(canonical.timestamp)).toStrictEqual(canonical.timestamp)
        expect(hex(serializeDetachedFile(parsed))).toBe(hex(bytes))
        // bare timestamps too (what calendars return)
        const bare = serializeTimestamp(file.timestamp)
        expect(parseTimestamp(bare, file.digest)).toStrictEqual(canonical.timestamp)
        expect(hex(serializeTimestamp(parseTimestamp(bare, file.digest)))).toBe(hex(bare))
      }),
      { numRuns: 300 }
    )
  })

  it("canonical order: attestations by tag then value, ops by tag byte then argument; equal ops merged", () => {
    const child = leaf(Attestations.bitcoin(7))
    const ts: Timestamp = {
      attestations: [
        Attestations.pending("b"),
        Attestations.unknown(Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8), Uint8Array.of(9)),
        Attestations.bitcoin(5),
        Attestations.pending("a"),
        Attestations.bitcoin(3),
        Attestations.pending("a")
      ],
      ops: [
        [Ops.prepend(Uint8Array.of(1)), child],
        [Ops.append(Uint8Array.of(2, 0)), child],
        [Ops.sha256, child],
        [Ops.append(Uint8Array.of(2)), child],
        [Ops.sha256, leaf(Attestations.pending("x"))]
      ]
    }
    const n = normalize(ts)
    expect(n.attestations).toStrictEqual([
      Attestations.unknown(Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8), Uint8Array.of(9)),
      Attestations.bitcoin(3),
      Attestations.bitcoin(5),
      Attestations.pending("a"),
      Attestations.pending("b")
    ])
    expect(n.ops.map(([op]) => op)).toStrictEqual([
      Ops.sha256,
      Ops.append(Uint8Array.of(2)),
      Ops.append(Uint8Array.of(2, 0)),
      Ops.prepend(Uint8Array.of(1))
    ])
    expect(n.ops[0]![1]).toStrictEqual({
      attestations: [Attestations.bitcoin(7), Attestations.pending("x")],
      ops: []
    })
    // Shuffling the input never changes the bytes.
    const shuffled: Timestamp = { attestations: [...ts.attestations].reverse(), ops: [...ts.ops].reverse() }
    expect(hex(serializeTimestamp(shuffled))).toBe(hex(serializeTimestamp(ts)))
  })

  it("never throws anything but OtsFormatError on random bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), msgArb, (bytes, msg) => {
        expectOnlyFormatErrors(() => parseTimestamp(bytes, msg))
        expectOnlyFormatErrors(() => parseDetachedFile(bytes))
        expectOnlyFormatErrors(() => parseDetachedFile(cat(HEADER_MAGIC, Uint8Array.of(1, 8), new Uint8Array(32), bytes)))
      }),
      { numRuns: 2000 }
    )
  })

  it("truncations, bit flips, insertions of valid files: OtsFormatError or a re-serializable tree", () => {
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
      fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), bit: fc.nat({ max: 7 }) }),
      fc.record({ kind: fc.constant("insert" as const), at: fc.nat(), byte: fc.nat({ max: 255 }) }),
      fc.record({ kind: fc.constant("delete" as const), at: fc.nat() })
    )
    fc.assert(
      fc.property(fileArb(computableTree), fc.array(mutation, { minLength: 1, maxLength: 4 }), (file, muts) => {
        let bytes = serializeDetachedFile(file)
        for (const m of muts) {
          const at = m.at % (bytes.length + 1)
          if (m.kind === "truncate") bytes = bytes.slice(0, at)
          else if (m.kind === "flip" && at < bytes.length) {
            bytes = bytes.slice()
            bytes[at] = bytes[at]! ^ (1 << m.bit)
          } else if (m.kind === "insert") bytes = cat(bytes.subarray(0, at), Uint8Array.of(m.byte), bytes.subarray(at))
          else if (m.kind === "delete") bytes = cat(bytes.subarray(0, at), bytes.subarray(at + 1))
        }
        let parsed: DetachedFile | undefined
        try {
          parsed = parseDetachedFile(bytes)
        } catch (e) {
          if (!(e instanceof OtsFormatError)) throw e
        }
        if (parsed !== undefined) {
          // Whatever we accept we can write back, and it reads the same.
          expect(parseDetachedFile(serializeDetachedFile(parsed))).toStrictEqual(parsed)
          expectOnlyFormatErrors(() => replay(parsed!.timestamp, parsed!.digest))
        }
        // truncation of a valid file is always an error
        const full = serializeDetachedFile(file)
        const cut = muts[0]!.at % full.length
        expect(() => parseDetachedFile(full.slice(0, cut))).toThrow(OtsFormatError)
      }),
      { numRuns: 500 }
    )
  })
})

// ---------------------------------------------------------------------------
// Limits (python-opentimestamps values)
// ---------------------------------------------------------------------------

describe("Ots limits", () => {
  const msg32 = new Uint8Array(32)
  const tail = pendingBytes("x")

  it("append argument: 4096 accepted (on an empty message), 4097 rejected", () => {
    const ok = Uint8Array.from([0xf0, ...varuint(4096), ...new Uint8Array(4096).fill(7), ...tail])
    expect(parseTimestamp(ok, new Uint8Array(0)).ops[0]![0]).toStrictEqual(Ops.append(new Uint8Array(4096).fill(7)))
    // same op on a 32-byte message: the 4128-byte result exceeds the result limit
    expect(() => parseTimestamp(ok, msg32)).toThrow(/result of append too long/)
    const bad = Uint8Array.from([0xf0, ...varuint(4097), ...new Uint8Array(4097), ...tail])
    expect(() => parseTimestamp(bad, new Uint8Array(0))).toThrow(/max length exceeded: 4097 > 4096/)
    expect(() => serializeTimestamp(chain([Ops.append(new Uint8Array(MAX_ARG_LENGTH + 1))], leaf(Attestations.bitcoin(1))))).toThrow(
      OtsFormatError
    )
    // and an empty argument
    expect(() => parseTimestamp(Uint8Array.from([0xf1, 0x00, ...tail]), msg32)).toThrow(/min length/)
  })

  it("attestation payload: 8192 accepted, 8193 rejected", () => {
    const tag = [1, 2, 3, 4, 5, 6, 7, 8]
    const mk = (n: number) => Uint8Array.from([0x00, ...tag, ...varuint(n), ...new Uint8Array(n).fill(1)])
    const ok = parseTimestamp(mk(8192), msg32)
    expect(ok.attestations[0]).toStrictEqual(Attestations.unknown(Uint8Array.from(tag), new Uint8Array(8192).fill(1)))
    expect(hex(serializeTimestamp(ok))).toBe(hex(mk(8192)))
    expect(() => parseTimestamp(mk(8193), msg32)).toThrow(/8193 > 8192/)
    expect(() => serializeTimestamp(leaf(Attestations.unknown(Uint8Array.from(tag), new Uint8Array(MAX_PAYLOAD_SIZE + 1))))).toThrow(
      OtsFormatError
    )
  })

  it("nesting: 256 timestamp nodes accepted, 257 rejected (parse and serialize)", () => {
    const ops = (n: number) => Array.from({ length: n }, () => Ops.sha256)
    const deepest = chain(ops(MAX_DEPTH - 1), leaf(Attestations.bitcoin(1)))
    const bytes = serializeTimestamp(deepest)
    expect(parseTimestamp(bytes, msg32)).toStrictEqual(deepest)
    const tooDeep = Uint8Array.from([0x08, ...bytes])
    expect(() => parseTimestamp(tooDeep, msg32)).toThrow(/nesting exceeds 256/)
    expect(() => serializeTimestamp(chain(ops(MAX_DEPTH), leaf(Attestations.bitcoin(1))))).toThrow(/nesting exceeds 256/)
  })

  it("message limits, empty-message ops, unknown ops, bad URIs, trailing garbage", () => {
    expect(() => parseTimestamp(Uint8Array.from(tail), new Uint8Array(4097))).toThrow(OtsFormatError)
    expect(() => parseTimestamp(Uint8Array.from([0xf3, ...tail]), new Uint8Array(2049))).toThrow(/too long for hexlify/)
    expect(parseTimestamp(Uint8Array.from([0xf3, ...tail]), new Uint8Array(2048)).ops).toHaveLength(1)
    expect(() => parseTimestamp(Uint8Array.from([0xf2, ...tail]), new Uint8Array(0))).toThrow(/empty/)
    expect(() => parseTimestamp(Uint8Array.from([0x09, ...tail]), msg32)).toThrow(/unknown operation tag 0x09/)
    expect(() => parseTimestamp(Uint8Array.from(pendingBytes("http://a?b")), msg32)).toThrow(/invalid character/)
    expect(() => parseTimestamp(Uint8Array.from(pendingBytes("a".repeat(1001))), msg32)).toThrow(OtsFormatError)
    expect(() => serializeTimestamp(leaf(Attestations.pending("https://é")))).toThrow(OtsFormatError)
    expect(() => serializeTimestamp({ attestations: [], ops: [] })).toThrow(/empty timestamp/)
    // bitcoin payload with trailing bytes
    expect(() => parseTimestamp(Uint8Array.from([0x00, ...BITCOIN_TAG, 2, 5, 0]), msg32)).toThrow(/trailing/)
    const file = serializeDetachedFile({ fileHashOp: "sha256", digest: msg32, timestamp: leaf(Attestations.bitcoin(1)) })
    expect(() => parseDetachedFile(cat(file, Uint8Array.of(0)))).toThrow(/trailing garbage/)
    expect(() => parseTimestamp(cat(Uint8Array.from(tail), Uint8Array.of(0)), msg32)).toThrow(/trailing garbage/)
    const v2 = file.slice()
    v2[31] = 2
    expect(() => parseDetachedFile(v2)).toThrow(/major version 2/)
    const badMagic = file.slice()
    badMagic[1] = 0
    expect(() => parseDetachedFile(badMagic)).toThrow(/bad magic/)
  })
})

// ---------------------------------------------------------------------------
// Ops, replay, tree algebra
// ---------------------------------------------------------------------------

describe("Ots ops and replay", () => {
  it("applyOp matches node:crypto and the reference semantics", () => {
    const m = Buffer.from("hello")
    expect(hex(applyOp(Ops.sha256, m))).toBe(createHash("sha256").update(m).digest("hex"))
    expect(hex(applyOp(Ops.sha1, m))).toBe(createHash("sha1").update(m).digest("hex"))
    expect(hex(applyOp(Ops.ripemd160, Buffer.from("")))).toBe("9c1185a5c5e9fc54612808977ee8f548b2258d31")
    expect(Buffer.from(applyOp(Ops.hexlify, Uint8Array.of(0xab, 0x01))).toString("ascii")).toBe("ab01")
    expect([...applyOp(Ops.reverse, Uint8Array.of(1, 2, 3))]).toStrictEqual([3, 2, 1])
    expect([...applyOp(Ops.append(Uint8Array.of(9)), Uint8Array.of(1))]).toStrictEqual([1, 9])
    expect([...applyOp(Ops.prepend(Uint8Array.of(9)), Uint8Array.of(1))]).toStrictEqual([9, 1])
    expect(() => applyOp(Ops.keccak256, m)).toThrow(OtsUnsupportedOpError)
    expect(() => applyOp(Ops.keccak256, m)).toThrow(/keccak256/)
    // keccak256 is still parseable and round-trips
    const bytes = serializeTimestamp(chain([Ops.keccak256], leaf(Attestations.bitcoin(1))))
    expect(hex(bytes)).toBe("67" + "00" + hex(BITCOIN_TAG) + "01" + "01")
    expect(parseTimestamp(bytes, m).ops[0]![0]).toStrictEqual(Ops.keccak256)
  })

  it("merkleStepsToOps replays a random Merkle v2 path from leaf to root", () => {
    const node = (l: Uint8Array, r: Uint8Array) => sha256(cat(Uint8Array.of(1), l, r))
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { minLength: 1, maxLength: 70 }),
        fc.nat(),
        (leaves, pick) => {
          const index = pick % leaves.length
          // independent tree: pair left to right, an odd last node is promoted
          let level = leaves.map((h, i) => ({ h, mine: i === index }))
          const steps: Array<{ hash: string; position: "left" | "right" }> = []
          while (level.length > 1) {
            const next: typeof level = []
            for (let i = 0; i < level.length; i += 2) {
              const l = level[i]!
              const r = level[i + 1]
              if (r === undefined) {
                next.push(l)
                continue
              }
              if (l.mine) steps.push({ hash: hex(r.h), position: "right" })
              if (r.mine) steps.push({ hash: hex(l.h), position: "left" })
              next.push({ h: node(l.h, r.h), mine: l.mine || r.mine })
            }
            level = next
          }
          const root = level[0]!.h
          const ts = chain(merkleStepsToOps(steps), leaf(Attestations.pending("https://cal")))
          const [reached] = replay(ts, leaves[index]!)
          expect(hex(reached!.commitment)).toBe(hex(root))
        }
      ),
      { numRuns: 200 }
    )
    expect(() => merkleStepsToOps([{ hash: "AB".repeat(32), position: "left" }])).toThrow(OtsFormatError)
  })

  it("merge is the union; graft attaches an upgrade at its commitment; isComplete/pending/bitcoin helpers", () => {
    const digest = sha256(Buffer.from("doc"))
    const nonce = new Uint8Array(16).fill(3)
    const pending = chain([Ops.append(nonce), Ops.sha256], leaf(Attestations.pending("https://cal.example")))
    const [p] = pendingAttestations(pending, digest)
    expect(p!.uri).toBe("https://cal.example")
    expect(hex(p!.commitment)).toBe(hex(sha256(cat(digest, nonce))))
    expect(isComplete(pending)).toBe(false)

    const upgrade = chain([Ops.prepend(new Uint8Array(32).fill(1)), Ops.sha256], leaf(Attestations.bitcoin(900_001)))
    const full = graft(pending, digest, p!.commitment, upgrade)
    expect(isComplete(full)).toBe(true)
    const [b] = bitcoinAttestations(full, digest)
    expect(b!.height).toBe(900_001)
    expect(hex(b!.commitment)).toBe(hex(sha256(cat(new Uint8Array(32).fill(1), p!.commitment))))
    // the pending attestation is kept next to the upgrade
    expect(replay(full, digest).map((r) => r.attestation._tag).sort()).toStrictEqual(["bitcoin", "pending"])
    // same as merging the chained path by hand
    expect(full).toStrictEqual(merge(pending, chain([Ops.append(nonce), Ops.sha256], upgrade)))
    expect(() => graft(pending, digest, new Uint8Array(32), upgrade)).toThrow(/not reached/)

    fc.assert(
      fc.property(computableTree, computableTree, msgArb, (a, b, msg) => {
        const m = merge(a, b)
        expect(merge(b, a)).toStrictEqual(m)
        expect(merge(m, a)).toStrictEqual(m)
        const key = (r: { attestation: Attestation; commitment: Uint8Array }) =>
          `${hex(r.commitment)}|${JSON.stringify(r.attestation, (_k, v) => (v instanceof Uint8Array ? hex(v) : v))}`
        const union = new Set([...replay(a, msg), ...replay(b, msg)].map(key))
        expect(new Set(replay(m, msg).map(key))).toStrictEqual(union)
      }),
      { numRuns: 150 }
    )
  })
})

// ---------------------------------------------------------------------------
// Cross-check with the independent `opentimestamps` npm package
// ---------------------------------------------------------------------------

/** Every (message, attestation) of a JS-package timestamp, walking its op map (messages computed by the package). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const jsWalk = (ts: any): string[] => {
  const out: string[] = []
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const visit = (node: any): void => {
    for (const a of node.attestations) out.push(`${hex(Uint8Array.from(node.msg))}|${jsAttKey(a)}`)
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    node.ops.forEach((child: any) => visit(child))
  }
  visit(ts)
  return out.sort()
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const jsAttKey = (a: any): string => {
  if (a instanceof OpenTimestamps.Notary.PendingAttestation) return `pending:${a.uri}`
  if (a instanceof OpenTimestamps.Notary.BitcoinBlockHeaderAttestation) return `bitcoin:${a.height}`
  if (a instanceof OpenTimestamps.Notary.UnknownAttestation) return `unknown:${hex(Uint8Array.from(a._TAG()))}:${hex(Uint8Array.from(a.payload))}`
  return `other:${String(a)}`
}
const ourAttKey = (a: Attestation): string =>
  a._tag === "pending" ? `pending:${a.uri}` : a._tag === "bitcoin" ? `bitcoin:${a.height}` : `unknown:${hex(a.tag)}:${hex(a.payload)}`
const ourWalk = (ts: Timestamp, msg: Uint8Array): string[] =>
  replay(ts, msg)
    .map((r) => `${hex(r.commitment)}|${ourAttKey(r.attestation)}`)
    .sort()

const jsDeserialize = (bytes: Uint8Array) => OpenTimestamps.DetachedTimestampFile.deserialize(Array.from(bytes))
const jsSerialize = (file: { serializeToBytes(): Uint8Array }): Uint8Array => Uint8Array.from(file.serializeToBytes())

describe("Ots agrees with the opentimestamps npm package", () => {
  // The JS package: no keccak256, broken hexlify, 32-bit varuints, and it orders
  // two unknown attestations by payload only — keep to what it implements.
  const sharedUnknownTag = Uint8Array.of(0x42, 0x42, 0x42, 0x42, 0x00, 0x01, 0x02, 0x03)
  const jsTree = tsArb(4, attArb({ unknownTag: sharedUnknownTag, maxHeight: 2 ** 31 - 1 }), opArb(JS_UNARY))

  it("files we write: same digest, byte-identical re-serialization, same commitments and attestations", () => {
    fc.assert(
      fc.property(fileArb(jsTree), (file) => {
        const bytes = serializeDetachedFile(file)
        const theirs = jsDeserialize(bytes)
        expect(hex(Uint8Array.from(theirs.fileDigest()))).toBe(hex(file.digest))
        expect(hex(Uint8Array.from(theirs.timestamp.getDigest()))).toBe(hex(file.digest))
        expect(hex(jsSerialize(theirs))).toBe(hex(bytes))
        expect(jsWalk(theirs.timestamp)).toStrictEqual(ourWalk(parseDetachedFile(bytes).timestamp, file.digest))
      }),
      { numRuns: 200 }
    )
  })

  it("a full attestd proof (digest → merkle v2 path → calendar ops → bitcoin) including an unknown attestation and a fork", () => {
    const digest = sha256(Buffer.from("attestd"))
    const sibling = sha256(Buffer.from("sibling"))
    const merkleOps = merkleStepsToOps([
      { hash: hex(sibling), position: "right" },
      { hash: hex(sha256(Buffer.from("uncle"))), position: "left" }
    ])
    const nonceA = new Uint8Array(16).fill(0xaa)
    const nonceB = new Uint8Array(16).fill(0xbb)
    const calendarA = chain([Ops.append(nonceA), Ops.sha256], {
      attestations: [Attestations.pending("https://alice.btc.calendar.opentimestamps.org")],
      ops: [
        [Ops.prepend(new Uint8Array(32).fill(5)), chain([Ops.sha256, Ops.sha256, Ops.reverse, Ops.reverse], leaf(Attestations.bitcoin(850_123)))]
      ]
    })
    const calendarB = chain(
      [Ops.append(nonceB), Ops.sha256],
      leaf(
        Attestations.pending("https://bob.btc.calendar.opentimestamps.org"),
        Attestations.unknown(Uint8Array.of(0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4), Uint8Array.of(1, 2, 3))
      )
    )
    const timestamp = chain(merkleOps, merge(calendarA, calendarB)) // fork (FF) after the merkle root
    const file: DetachedFile = { fileHashOp: "sha256", digest, timestamp }
    const bytes = serializeDetachedFile(file)
    expect(bytes.includes(0xff)).toBe(true)

    const theirs = jsDeserialize(bytes)
    expect(hex(jsSerialize(theirs))).toBe(hex(bytes))
    expect(jsWalk(theirs.timestamp)).toStrictEqual(ourWalk(timestamp, digest))
    // their allAttestations() keys by message: the bitcoin commitment and height agree with ours
    const [btc] = bitcoinAttestations(timestamp, digest)
    const theirBtc = [...theirs.timestamp.allAttestations().entries()].filter(
      ([, a]) => a instanceof OpenTimestamps.Notary.BitcoinBlockHeaderAttestation
    )
    expect(theirBtc).toHaveLength(1)
    expect(hex(Uint8Array.from(theirBtc[0]![0]))).toBe(hex(btc!.commitment))
    expect(theirBtc[0]![1].height).toBe(850_123)
    expect(theirs.timestamp.isTimestampComplete()).toBe(isComplete(timestamp))
  })

  it("files built with the package's API parse identically with ours", () => {
    const { DetachedTimestampFile, Ops: JsOps, Notary } = OpenTimestamps
    const digest = sha256(Buffer.from("built by the reference JS"))
    const jsFile = DetachedTimestampFile.fromHash(new JsOps.OpSHA256(), Array.from(digest))
    const root = jsFile.timestamp
    // fork at the root: a sha256 branch and an append branch (added in canonical order)
    const viaHash = root.add(new JsOps.OpSHA256())
    viaHash.attestations.push(new Notary.BitcoinBlockHeaderAttestation(123_456))
    viaHash.attestations.push(new Notary.UnknownAttestation([1, 1, 1, 1, 1, 1, 1, 1], [0xca, 0xfe]))
    const appended = root.add(new JsOps.OpAppend(Array.from(new Uint8Array(16).fill(7))))
    const hashed = appended.add(new JsOps.OpSHA256())
    hashed.attestations.push(new Notary.PendingAttestation("https://finney.calendar.eternitywall.com"))
    const ripe = hashed.add(new JsOps.OpRIPEMD160())
    const rev = ripe.add(new JsOps.OpReverse())
    rev.attestations.push(new Notary.BitcoinBlockHeaderAttestation(1))
    root.attestations.push(new Notary.PendingAttestation("https://x.example"))

    const bytes = jsSerialize(jsFile)
    const ours = parseDetachedFile(bytes)
    const expected: DetachedFile = {
      fileHashOp: "sha256",
      digest,
      timestamp: {
        attestations: [Attestations.pending("https://x.example")],
        ops: [
          [Ops.sha256, leaf(Attestations.unknown(Uint8Array.of(1, 1, 1, 1, 1, 1, 1, 1), Uint8Array.of(0xca, 0xfe)), Attestations.bitcoin(123_456))],
          [
            Ops.append(new Uint8Array(16).fill(7)),
            chain(
              [Ops.sha256],
              {
                attestations: [Attestations.pending("https://finney.calendar.eternitywall.com")],
                ops: [[Ops.ripemd160, chain([Ops.reverse], leaf(Attestations.bitcoin(1)))]]
              }
            )
          ]
        ]
      }
    }
    expect(ours).toStrictEqual(expected)
    expect(hex(serializeDetachedFile(ours))).toBe(hex(bytes))
    expect(ourWalk(ours.timestamp, digest)).toStrictEqual(jsWalk(root))

    // Built in non-canonical op order: same tree for us; we write the canonical order, which the package reads back.
    const jsFile2 = DetachedTimestampFile.fromHash(new JsOps.OpSHA256(), Array.from(digest))
    jsFile2.timestamp.add(new JsOps.OpAppend([9])).attestations.push(new Notary.BitcoinBlockHeaderAttestation(2))
    jsFile2.timestamp.add(new JsOps.OpSHA256()).attestations.push(new Notary.BitcoinBlockHeaderAttestation(3))
    const bytes2 = jsSerialize(jsFile2)
    const ours2 = parseDetachedFile(bytes2)
    expect(ours2.timestamp.ops.map(([op]) => op._tag)).toStrictEqual(["sha256", "append"])
    const canonical2 = serializeDetachedFile(ours2)
    expect(hex(canonical2)).not.toBe(hex(bytes2))
    expect(jsWalk(jsDeserialize(canonical2).timestamp)).toStrictEqual(jsWalk(jsFile2.timestamp))
  })
})

