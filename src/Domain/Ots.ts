/**
 * OpenTimestamps proof format: a pure, dependency-light codec for detached
 * `.ots` files and bare timestamps (what calendars return), plus the small
 * amount of tree algebra attestd needs (chain, merge, graft, replay).
 *
 * Faithful to python-opentimestamps (the reference):
 *   - same limits on parse: message / result / argument ≤ 4096 bytes (hexlify
 *     input ≤ 2048), attestation payload ≤ 8192, pending URI ≤ 1000 bytes of
 *     `[A-Za-z0-9-._/:]`, at most 256 nested timestamp nodes, no trailing
 *     garbage after a detached file or inside a known attestation payload;
 *   - same canonical serialization: at each node the attestations first (sorted
 *     by 8-byte tag, then by URI / height / raw payload), then the op edges
 *     sorted by op tag byte then argument bytes; every item but the last is
 *     prefixed with 0xFF.
 *
 * Trees returned by `parse*`, `merge`, `graft` and `normalize` are in that
 * canonical form (sorted, duplicate attestations removed, equal op edges
 * merged), so two trees are semantically equal iff they deep-equal.
 *
 * No Effect runtime and no I/O here: `node:crypto` for hashing, with a pure
 * fallback for RIPEMD-160 when the local OpenSSL 3 build lacks it.
 */
import { ripemd160 as nobleRipemd160, sha1 as nobleSha1 } from "@noble/hashes/legacy.js"
import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, hexToBytes as strictHexToBytes } from "./Bytes.js"

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

export type BinaryOpTag = "append" | "prepend"
export type HashOpTag = "sha256" | "sha1" | "ripemd160" | "keccak256"
export type UnaryOpTag = HashOpTag | "reverse" | "hexlify"

export type Op =
  | { readonly _tag: BinaryOpTag; readonly arg: Uint8Array }
  | { readonly _tag: UnaryOpTag }

export type Attestation =
  | { readonly _tag: "pending"; readonly uri: string }
  | { readonly _tag: "bitcoin"; readonly height: number }
  | { readonly _tag: "unknown"; readonly tag: Uint8Array; readonly payload: Uint8Array }

export interface Timestamp {
  readonly attestations: ReadonlyArray<Attestation>
  readonly ops: ReadonlyArray<readonly [Op, Timestamp]>
}

export interface DetachedFile {
  /** The hash op applied to the file; attestd always writes "sha256". */
  readonly fileHashOp: HashOpTag
  readonly digest: Uint8Array
  readonly timestamp: Timestamp
}

/** Any malformed, over-limit or unrepresentable OTS data (parse or serialize). */
export class OtsFormatError extends Error {
  override readonly name: string = "OtsFormatError"
}

/** An op the local runtime cannot compute (keccak256). Still parseable. */
export class OtsUnsupportedOpError extends OtsFormatError {
  override readonly name: string = "OtsUnsupportedOpError"
}

// ---------------------------------------------------------------------------
// Constants (reference limits)
// ---------------------------------------------------------------------------

export const HEADER_MAGIC: Uint8Array = Uint8Array.of(
  0x00, 0x4f, 0x70, 0x65, 0x6e, 0x54, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x73, 0x00,
  0x00, 0x50, 0x72, 0x6f, 0x6f, 0x66, 0x00, 0xbf, 0x89, 0xe2, 0xe8, 0x84, 0xe8, 0x92, 0x94
)
export const MAJOR_VERSION = 1
export const MAX_MSG_LENGTH = 4096
export const MAX_RESULT_LENGTH = 4096
export const MAX_ARG_LENGTH = 4096
export const MAX_PAYLOAD_SIZE = 8192
export const MAX_URI_LENGTH = 1000
/** Maximum number of nested timestamp nodes (python's `_recursion_limit=256`). */
export const MAX_DEPTH = 256

export const PENDING_TAG: Uint8Array = Uint8Array.of(0x83, 0xdf, 0xe3, 0x0d, 0x2e, 0xf9, 0x0c, 0x8e)
export const BITCOIN_TAG: Uint8Array = Uint8Array.of(0x05, 0x88, 0x96, 0x0d, 0x73, 0xd7, 0x19, 0x01)

const ALLOWED_URI_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._/:"

const OP_TAG_BYTE: Readonly<Record<Op["_tag"], number>> = {
  sha1: 0x02,
  ripemd160: 0x03,
  sha256: 0x08,
  keccak256: 0x67,
  append: 0xf0,
  prepend: 0xf1,
  reverse: 0xf2,
  hexlify: 0xf3
}

const OP_BY_TAG_BYTE: ReadonlyMap<number, Op["_tag"]> = new Map(
  (Object.entries(OP_TAG_BYTE) as Array<[Op["_tag"], number]>).map(([name, byte]) => [byte, name])
)

const DIGEST_LENGTH: Readonly<Record<HashOpTag, number>> = {
  sha1: 20,
  ripemd160: 20,
  sha256: 32,
  keccak256: 32
}

const isBinaryTag = (tag: Op["_tag"]): tag is BinaryOpTag => tag === "append" || tag === "prepend"
const isHashTag = (tag: Op["_tag"]): tag is HashOpTag =>
  tag === "sha256" || tag === "sha1" || tag === "ripemd160" || tag === "keccak256"

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const Ops = {
  append: (arg: Uint8Array): Op => ({ _tag: "append", arg }),
  prepend: (arg: Uint8Array): Op => ({ _tag: "prepend", arg }),
  sha256: { _tag: "sha256" } as Op,
  sha1: { _tag: "sha1" } as Op,
  ripemd160: { _tag: "ripemd160" } as Op,
  keccak256: { _tag: "keccak256" } as Op,
  reverse: { _tag: "reverse" } as Op,
  hexlify: { _tag: "hexlify" } as Op
} as const

export const Attestations = {
  pending: (uri: string): Attestation => ({ _tag: "pending", uri }),
  bitcoin: (height: number): Attestation => ({ _tag: "bitcoin", height }),
  unknown: (tag: Uint8Array, payload: Uint8Array): Attestation => ({ _tag: "unknown", tag, payload })
} as const

/** A leaf node carrying the given attestations. */
export const leaf = (...attestations: ReadonlyArray<Attestation>): Timestamp => ({ attestations, ops: [] })

// ---------------------------------------------------------------------------
// Byte helpers
// ---------------------------------------------------------------------------

export const compareBytes = (a: Uint8Array, b: Uint8Array): number => {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const d = a[i]! - b[i]!
    if (d !== 0) return d
  }
  return a.length - b.length
}

export const bytesEqual = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && compareBytes(a, b) === 0

export { bytesToHex }

export const hexToBytes = (hex: string): Uint8Array => {
  try {
    return strictHexToBytes(hex)
  } catch {
    throw new OtsFormatError(`invalid hex string (${hex.length} chars)`)
  }
}

const concat = (...parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  let len = 0
  for (const p of parts) len += p.length
  const out = new Uint8Array(len)
  let off = 0
  for (const p of parts) {
    out.set(p, off)
    off += p.length
  }
  return out
}

const asciiBytes = (s: string): Uint8Array => {
  const out = new Uint8Array(s.length)
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i)
  return out
}

const checkUri = (uri: Uint8Array): void => {
  if (uri.length > MAX_URI_LENGTH) {
    throw new OtsFormatError(`pending attestation URI exceeds ${MAX_URI_LENGTH} bytes`)
  }
  for (const c of uri) {
    if (!ALLOWED_URI_CHARS.includes(String.fromCharCode(c))) {
      throw new OtsFormatError(`pending attestation URI contains invalid character 0x${c.toString(16).padStart(2, "0")}`)
    }
  }
}

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

const maxMsgLength = (op: Op): number => (op._tag === "hexlify" ? MAX_RESULT_LENGTH / 2 : MAX_MSG_LENGTH)

/** Length of `op(msg)` for a message of length `msgLen`, enforcing the reference's MsgValueError rules. */
const opResultLength = (op: Op, msgLen: number): number => {
  if (msgLen > maxMsgLength(op)) {
    throw new OtsFormatError(`message too long for ${op._tag}: ${msgLen} > ${maxMsgLength(op)}`)
  }
  let r: number
  switch (op._tag) {
    case "append":
    case "prepend":
      r = msgLen + op.arg.length
      break
    case "reverse":
      if (msgLen === 0) throw new OtsFormatError("can't reverse an empty message")
      r = msgLen
      break
    case "hexlify":
      if (msgLen === 0) throw new OtsFormatError("can't hexlify an empty message")
      r = msgLen * 2
      break
    default:
      r = DIGEST_LENGTH[op._tag]
  }
  if (r > MAX_RESULT_LENGTH) {
    throw new OtsFormatError(`result of ${op._tag} too long: ${r} > ${MAX_RESULT_LENGTH}`)
  }
  return r
}

/** Apply an op to a message (same limits as the reference; keccak256 is unsupported here). */
export const applyOp = (op: Op, msg: Uint8Array): Uint8Array => {
  opResultLength(op, msg.length)
  switch (op._tag) {
    case "append":
      return concat(msg, op.arg)
    case "prepend":
      return concat(op.arg, msg)
    case "sha256":
      return nobleSha256(msg)
    case "sha1":
      return nobleSha1(msg)
    case "ripemd160":
      return nobleRipemd160(msg)
    case "keccak256":
      throw new OtsUnsupportedOpError("keccak256 op is not supported by this implementation (parseable, not computable)")
    case "reverse":
      return Uint8Array.from(msg).reverse()
    case "hexlify":
      return asciiBytes(bytesToHex(msg))
  }
}

const compareOps = (a: Op, b: Op): number => {
  const d = OP_TAG_BYTE[a._tag] - OP_TAG_BYTE[b._tag]
  if (d !== 0) return d
  return "arg" in a && "arg" in b ? compareBytes(a.arg, b.arg) : 0
}

const opKey = (op: Op): string => ("arg" in op ? `${op._tag}:${bytesToHex(op.arg)}` : op._tag)

const canonicalOp = (op: Op): Op => ("arg" in op ? { _tag: op._tag, arg: op.arg } : { _tag: op._tag })

// ---------------------------------------------------------------------------
// Attestations
// ---------------------------------------------------------------------------

const attestationTag = (a: Attestation): Uint8Array =>
  a._tag === "pending" ? PENDING_TAG : a._tag === "bitcoin" ? BITCOIN_TAG : a.tag

const KIND_RANK = { bitcoin: 0, pending: 1, unknown: 2 } as const

const compareAttestations = (a: Attestation, b: Attestation): number => {
  const d = compareBytes(attestationTag(a), attestationTag(b))
  if (d !== 0) return d
  if (a._tag === "pending" && b._tag === "pending") return compareBytes(asciiBytes(a.uri), asciiBytes(b.uri))
  if (a._tag === "bitcoin" && b._tag === "bitcoin") return a.height - b.height
  if (a._tag === "unknown" && b._tag === "unknown") return compareBytes(a.payload, b.payload)
  return KIND_RANK[a._tag] - KIND_RANK[b._tag]
}

const canonicalAttestation = (a: Attestation): Attestation =>
  a._tag === "pending"
    ? { _tag: "pending", uri: a.uri }
    : a._tag === "bitcoin"
    ? { _tag: "bitcoin", height: a.height }
    : { _tag: "unknown", tag: a.tag, payload: a.payload }

const attestationPayload = (a: Attestation): Uint8Array => {
  switch (a._tag) {
    case "pending": {
      for (let i = 0; i < a.uri.length; i++) {
        if (a.uri.charCodeAt(i) > 0x7f) throw new OtsFormatError("pending attestation URI must be ASCII")
      }
      const uri = asciiBytes(a.uri)
      checkUri(uri)
      const w = new Writer()
      w.varbytes(uri)
      return w.finish()
    }
    case "bitcoin": {
      const w = new Writer()
      w.varuint(a.height)
      return w.finish()
    }
    case "unknown":
      if (a.tag.length !== 8) throw new OtsFormatError(`attestation tag must be 8 bytes, got ${a.tag.length}`)
      return a.payload
  }
}

// ---------------------------------------------------------------------------
// Tree algebra
// ---------------------------------------------------------------------------

/**
 * Canonical form: attestations sorted and de-duplicated, op edges sorted with
 * equal ops merged (their subtrees merged recursively), fresh plain objects.
 */
export const normalize = (ts: Timestamp): Timestamp => {
  const sorted = ts.attestations.map(canonicalAttestation).sort(compareAttestations)
  const attestations: Attestation[] = []
  for (const a of sorted) {
    const prev = attestations[attestations.length - 1]
    if (prev === undefined || compareAttestations(prev, a) !== 0) attestations.push(a)
  }
  const groups = new Map<string, { op: Op; attestations: Attestation[]; ops: Array<readonly [Op, Timestamp]> }>()
  for (const [op, child] of ts.ops) {
    const key = opKey(op)
    let g = groups.get(key)
    if (g === undefined) {
      g = { op: canonicalOp(op), attestations: [], ops: [] }
      groups.set(key, g)
    }
    g.attestations.push(...child.attestations)
    g.ops.push(...child.ops)
  }
  const ops = [...groups.values()]
    .sort((a, b) => compareOps(a.op, b.op))
    .map((g) => [g.op, normalize({ attestations: g.attestations, ops: g.ops })] as const)
  return { attestations, ops }
}

/** Linear path: `ops[0]` then `ops[1]` … ending at `tail`. */
export const chain = (ops: ReadonlyArray<Op>, tail: Timestamp): Timestamp =>
  ops.reduceRight<Timestamp>((acc, op) => ({ attestations: [], ops: [[op, acc]] }), tail)

/** Union of two timestamps for the same message (same op → children merged). */
export const merge = (a: Timestamp, b: Timestamp): Timestamp =>
  normalize({ attestations: [...a.attestations, ...b.attestations], ops: [...a.ops, ...b.ops] })

/**
 * Merge `sub` (a timestamp for `commitment`) into every node of `ts` whose
 * message — replaying from `msg` — equals `commitment`. This is how a
 * calendar's upgrade answer is attached at its pending attestation.
 * Throws OtsFormatError if no node has that message.
 */
export const graft = (ts: Timestamp, msg: Uint8Array, commitment: Uint8Array, sub: Timestamp): Timestamp => {
  let found = false
  const go = (node: Timestamp, m: Uint8Array): Timestamp => {
    const ops = node.ops.map(([op, child]) => [op, go(child, applyOp(op, m))] as const)
    const rebuilt: Timestamp = { attestations: node.attestations, ops }
    if (bytesEqual(m, commitment)) {
      found = true
      return merge(rebuilt, sub)
    }
    return rebuilt
  }
  const out = go(ts, msg)
  if (!found) throw new OtsFormatError(`commitment ${bytesToHex(commitment)} not reached by the timestamp`)
  return normalize(out)
}

export interface Replayed {
  readonly attestation: Attestation
  /** The message the attestation commits to (for Bitcoin: the header merkle root, internal byte order). */
  readonly commitment: Uint8Array
}

/** Walk every path from `msg`, returning the message reached at each attestation (depth-first, tree order). */
export const replay = (ts: Timestamp, msg: Uint8Array): Array<Replayed> => {
  const out: Array<Replayed> = []
  const visit = (node: Timestamp, m: Uint8Array): void => {
    for (const attestation of node.attestations) out.push({ attestation, commitment: m })
    for (const [op, child] of node.ops) visit(child, applyOp(op, m))
  }
  visit(ts, msg)
  return out
}

/**
 * Bitcoin attestations with the merkle root each commits to. The root is in
 * the header's internal (little-endian) byte order — the reverse of the hex
 * block explorers display.
 */
export const bitcoinAttestations = (
  ts: Timestamp,
  msg: Uint8Array
): Array<{ readonly height: number; readonly commitment: Uint8Array }> =>
  replay(ts, msg).flatMap(({ attestation, commitment }) =>
    attestation._tag === "bitcoin" ? [{ height: attestation.height, commitment }] : []
  )

/** Pending attestations with the commitment to ask the calendar about (`GET {uri}/timestamp/{hex}`). */
export const pendingAttestations = (
  ts: Timestamp,
  msg: Uint8Array
): Array<{ readonly uri: string; readonly commitment: Uint8Array }> =>
  replay(ts, msg).flatMap(({ attestation, commitment }) =>
    attestation._tag === "pending" ? [{ uri: attestation.uri, commitment }] : []
  )

/** True iff the tree carries at least one Bitcoin attestation (the reference's `is_timestamp_complete`). */
export const isComplete = (ts: Timestamp): boolean =>
  ts.attestations.some((a) => a._tag === "bitcoin") || ts.ops.some(([, child]) => isComplete(child))

/**
 * Merkle v2 proof (node = SHA-256(0x01 ‖ left ‖ right)) as OTS ops from the
 * leaf to the root. `position: "left"` means the sibling is the left operand.
 */
export const merkleStepsToOps = (
  steps: ReadonlyArray<{ readonly hash: string; readonly position: "left" | "right" }>
): Array<Op> => {
  const ops: Array<Op> = []
  for (const step of steps) {
    if (!/^[0-9a-f]{64}$/.test(step.hash)) throw new OtsFormatError("merkle step hash must be 64 lowercase hex")
    const sibling = hexToBytes(step.hash)
    if (step.position === "left") {
      ops.push(Ops.prepend(concat(Uint8Array.of(0x01), sibling)), Ops.sha256)
    } else if (step.position === "right") {
      ops.push(Ops.append(sibling), Ops.prepend(Uint8Array.of(0x01)), Ops.sha256)
    } else {
      throw new OtsFormatError(`invalid merkle step position ${String(step.position)}`)
    }
  }
  return ops
}

// ---------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------

class Writer {
  private buf = new Uint8Array(256)
  private len = 0

  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return
    let cap = this.buf.length * 2
    while (cap < this.len + n) cap *= 2
    const next = new Uint8Array(cap)
    next.set(this.buf.subarray(0, this.len))
    this.buf = next
  }

  byte(b: number): void {
    this.ensure(1)
    this.buf[this.len++] = b
  }

  bytes(b: Uint8Array): void {
    this.ensure(b.length)
    this.buf.set(b, this.len)
    this.len += b.length
  }

  varuint(n: number): void {
    if (!Number.isSafeInteger(n) || n < 0) throw new OtsFormatError(`varuint out of range: ${n}`)
    let v = n
    while (v > 0x7f) {
      this.byte((v % 0x80) | 0x80)
      v = Math.floor(v / 0x80)
    }
    this.byte(v)
  }

  varbytes(b: Uint8Array): void {
    this.varuint(b.length)
    this.bytes(b)
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.len)
  }
}

class Reader {
  pos = 0
  constructor(readonly buf: Uint8Array) {}

  byte(): number {
    if (this.pos >= this.buf.length) throw new OtsFormatError(`truncated: expected 1 byte at offset ${this.pos}`)
    return this.buf[this.pos++]!
  }

  bytes(n: number): Uint8Array {
    if (this.pos + n > this.buf.length) {
      throw new OtsFormatError(`truncated: expected ${n} bytes at offset ${this.pos}, ${this.buf.length - this.pos} left`)
    }
    const out = this.buf.slice(this.pos, this.pos + n)
    this.pos += n
    return out
  }

  varuint(): number {
    let value = 0
    let scale = 1
    for (let i = 0; ; i++) {
      if (i >= 10) throw new OtsFormatError("varuint too long")
      const b = this.byte()
      value += (b & 0x7f) * scale
      if (!Number.isSafeInteger(value)) throw new OtsFormatError("varuint exceeds 2^53-1")
      if ((b & 0x80) === 0) return value
      scale *= 0x80
    }
  }

  varbytes(max: number, min = 0): Uint8Array {
    const n = this.varuint()
    if (n > max) throw new OtsFormatError(`varbytes max length exceeded: ${n} > ${max}`)
    if (n < min) throw new OtsFormatError(`varbytes min length not met: ${n} < ${min}`)
    return this.bytes(n)
  }

  atEof(): boolean {
    return this.pos >= this.buf.length
  }

  assertEof(what: string): void {
    if (!this.atEof()) throw new OtsFormatError(`trailing garbage after ${what} at offset ${this.pos}`)
  }
}

const writeAttestation = (w: Writer, a: Attestation): void => {
  const payload = attestationPayload(a)
  if (payload.length > MAX_PAYLOAD_SIZE) {
    throw new OtsFormatError(`attestation payload too long: ${payload.length} > ${MAX_PAYLOAD_SIZE}`)
  }
  w.bytes(attestationTag(a))
  w.varbytes(payload)
}

const writeOp = (w: Writer, op: Op): void => {
  w.byte(OP_TAG_BYTE[op._tag])
  if ("arg" in op) {
    if (op.arg.length < 1 || op.arg.length > MAX_ARG_LENGTH) {
      throw new OtsFormatError(`${op._tag} argument length must be 1..${MAX_ARG_LENGTH}, got ${op.arg.length}`)
    }
    w.varbytes(op.arg)
  }
}

/** Writes an already-normalized tree. */
const writeTimestamp = (w: Writer, ts: Timestamp, depth: number): void => {
  if (depth >= MAX_DEPTH) throw new OtsFormatError(`timestamp nesting exceeds ${MAX_DEPTH} nodes`)
  const atts = ts.attestations
  const ops = ts.ops
  if (atts.length === 0 && ops.length === 0) throw new OtsFormatError("an empty timestamp can't be serialized")
  for (let i = 0; i < atts.length - 1; i++) {
    w.byte(0xff)
    w.byte(0x00)
    writeAttestation(w, atts[i]!)
  }
  const lastAtt = atts[atts.length - 1]
  if (ops.length === 0) {
    w.byte(0x00)
    writeAttestation(w, lastAtt!)
    return
  }
  if (lastAtt !== undefined) {
    w.byte(0xff)
    w.byte(0x00)
    writeAttestation(w, lastAtt)
  }
  ops.forEach(([op, child], i) => {
    if (i < ops.length - 1) w.byte(0xff)
    writeOp(w, op)
    writeTimestamp(w, child, depth + 1)
  })
}

const readAttestation = (r: Reader): Attestation => {
  const tag = r.bytes(8)
  const payload = r.varbytes(MAX_PAYLOAD_SIZE)
  if (bytesEqual(tag, PENDING_TAG)) {
    const p = new Reader(payload)
    const uri = p.varbytes(MAX_URI_LENGTH)
    checkUri(uri)
    p.assertEof("pending attestation URI")
    return { _tag: "pending", uri: String.fromCharCode(...uri) }
  }
  if (bytesEqual(tag, BITCOIN_TAG)) {
    const p = new Reader(payload)
    const height = p.varuint()
    p.assertEof("bitcoin attestation height")
    return { _tag: "bitcoin", height }
  }
  return { _tag: "unknown", tag, payload }
}

const readOp = (r: Reader, tagByte: number): Op => {
  const name = OP_BY_TAG_BYTE.get(tagByte)
  if (name === undefined) throw new OtsFormatError(`unknown operation tag 0x${tagByte.toString(16).padStart(2, "0")}`)
  if (isBinaryTag(name)) return { _tag: name, arg: r.varbytes(MAX_ARG_LENGTH, 1) }
  return { _tag: name }
}

const readTimestamp = (r: Reader, msgLen: number, depth: number): Timestamp => {
  if (depth >= MAX_DEPTH) throw new OtsFormatError(`timestamp nesting exceeds ${MAX_DEPTH} nodes`)
  const attestations: Attestation[] = []
  const ops: Array<readonly [Op, Timestamp]> = []
  const item = (tag: number): void => {
    if (tag === 0x00) {
      attestations.push(readAttestation(r))
    } else {
      const op = readOp(r, tag)
      const resultLen = opResultLength(op, msgLen)
      ops.push([op, readTimestamp(r, resultLen, depth + 1)])
    }
  }
  let tag = r.byte()
  while (tag === 0xff) {
    item(r.byte())
    tag = r.byte()
  }
  item(tag)
  return { attestations, ops }
}

const checkInitialMsg = (msg: Uint8Array): void => {
  if (msg.length > MAX_MSG_LENGTH) throw new OtsFormatError(`message exceeds ${MAX_MSG_LENGTH} bytes`)
}

/** Canonical bytes of a bare timestamp (the body calendars send). */
export const serializeTimestamp = (ts: Timestamp): Uint8Array => {
  const w = new Writer()
  writeTimestamp(w, normalize(ts), 0)
  return w.finish()
}

/**
 * Parse a bare timestamp whose starting message is `msg` (needed to enforce
 * the message/result length limits). The whole input must be consumed.
 */
export const parseTimestamp = (bytes: Uint8Array, msg: Uint8Array): Timestamp => {
  checkInitialMsg(msg)
  const r = new Reader(bytes)
  const ts = readTimestamp(r, msg.length, 0)
  r.assertEof("timestamp")
  return normalize(ts)
}

export const serializeDetachedFile = (file: DetachedFile): Uint8Array => {
  if (!isHashTag(file.fileHashOp)) throw new OtsFormatError(`invalid file hash op ${String(file.fileHashOp)}`)
  const expected = DIGEST_LENGTH[file.fileHashOp]
  if (file.digest.length !== expected) {
    throw new OtsFormatError(`${file.fileHashOp} digest must be ${expected} bytes, got ${file.digest.length}`)
  }
  const w = new Writer()
  w.bytes(HEADER_MAGIC)
  w.varuint(MAJOR_VERSION)
  w.byte(OP_TAG_BYTE[file.fileHashOp])
  w.bytes(file.digest)
  writeTimestamp(w, normalize(file.timestamp), 0)
  return w.finish()
}

export const parseDetachedFile = (bytes: Uint8Array): DetachedFile => {
  const r = new Reader(bytes)
  if (bytes.length < HEADER_MAGIC.length || !bytesEqual(bytes.subarray(0, HEADER_MAGIC.length), HEADER_MAGIC)) {
    throw new OtsFormatError("bad magic: not an OpenTimestamps proof file")
  }
  r.pos = HEADER_MAGIC.length
  const major = r.varuint()
  if (major !== MAJOR_VERSION) throw new OtsFormatError(`unsupported major version ${major}`)
  const opByte = r.byte()
  const name = OP_BY_TAG_BYTE.get(opByte)
  if (name === undefined || !isHashTag(name)) {
    throw new OtsFormatError(`invalid file hash op tag 0x${opByte.toString(16).padStart(2, "0")}`)
  }
  const digest = r.bytes(DIGEST_LENGTH[name])
  const ts = readTimestamp(r, digest.length, 0)
  r.assertEof("detached timestamp file")
  return { fileHashOp: name, digest, timestamp: normalize(ts) }
}
