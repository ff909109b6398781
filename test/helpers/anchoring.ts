/**
 * Helpers of the T2 (anchoring) suites, independent of src/:
 * - Merkle v2 (spec 9.6) over node:crypto only: leaves sorted,
 *   node = SHA-256(0x01 ‖ left ‖ right), odd node paired with itself;
 * - the `opentimestamps` npm package (the reference JS implementation) to
 *   parse `.ots` files and a replay of their ops from the file digest;
 * - a direct-database check of the T2 invariants (better-sqlite3 / pg).
 */
import { createHash } from "node:crypto"
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)
// The package is CommonJS and untyped.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const OpenTimestamps: any = require("opentimestamps")

export const HEX64 = /^[0-9a-f]{64}$/
export const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/
export const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export const randomHash = (): string => {
  const bytes = new Uint8Array(32)
  crypto.getRandomValues(bytes)
  return Buffer.from(bytes).toString("hex")
}

/** Polls `check` (in real time) until it returns something other than undefined/false. */
export const poll = async <A>(
  label: string,
  check: () => Promise<A | undefined | false> | A | undefined | false,
  timeoutMs = 15_000,
  everyMs = 50
): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  while (true) {
    try {
      const v = await check()
      if (v !== undefined && v !== false) return v
    } catch (e) {
      lastError = e
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${label}${lastError ? `: ${String(lastError)}` : ""}`)
    }
    await sleep(everyMs)
  }
}

// ---------------------------------------------------------------------------
// Independent Merkle v2

const sha256 = (b: Uint8Array): Buffer => createHash("sha256").update(b).digest()
const node = (l: Uint8Array, r: Uint8Array): Buffer => sha256(Buffer.concat([Buffer.from([0x01]), l, r]))

export const merkleRoot = (leavesHex: ReadonlyArray<string>): string => {
  if (leavesHex.length === 0) throw new Error("no leaves")
  let level: Array<Buffer> = [...leavesHex].sort().map((h) => Buffer.from(h, "hex"))
  while (level.length > 1) {
    const next: Array<Buffer> = []
    for (let i = 0; i < level.length; i += 2) next.push(node(level[i]!, level[i + 1] ?? level[i]!))
    level = next
  }
  return level[0]!.toString("hex")
}

/** The root reached from `leafHex` ("left": the sibling is the LEFT operand). */
export const rootFromProof = (leafHex: string, proof: ReadonlyArray<{ readonly hash: string; readonly position: string }>): string => {
  let cur: Buffer = Buffer.from(leafHex, "hex")
  for (const step of proof) {
    if (!HEX64.test(step.hash)) throw new Error(`bad proof hash ${step.hash}`)
    const sib = Buffer.from(step.hash, "hex")
    if (step.position === "left") cur = node(sib, cur)
    else if (step.position === "right") cur = node(cur, sib)
    else throw new Error(`bad proof position ${String(step.position)}`)
  }
  return cur.toString("hex")
}

export const proofLength = (n: number): number => (n <= 1 ? 0 : Math.ceil(Math.log2(n)))

// ---------------------------------------------------------------------------
// .ots files through the opentimestamps package

export interface ReplayedAttestation {
  readonly kind: "pending" | "bitcoin" | "other"
  readonly uri?: string
  readonly height?: number
  /** The message reached at the attestation, replayed from the file digest with the package's op.call. */
  readonly msg: string
}

export interface ParsedOts {
  readonly hashOp: string
  readonly fileDigest: string
  readonly complete: boolean
  readonly attestations: ReadonlyArray<ReplayedAttestation>
  /** Every message on the way (hex), in walk order, starting with the file digest. */
  readonly messages: ReadonlyArray<string>
  /** Byte-identical re-serialization by the package. */
  readonly reserialized: string
}

const hexOf = (a: ArrayLike<number>): string => Buffer.from(Uint8Array.from(a)).toString("hex")

/**
 * Parses a `.ots` file with the package and walks its Timestamp (`ops` is a Map
 * of op → child timestamp), applying each op to the message with `op.call`,
 * starting from the file digest. Throws if the package's own messages disagree.
 */
export const parseOts = (bytes: Uint8Array): ParsedOts => {
  const file = OpenTimestamps.DetachedTimestampFile.deserialize(Array.from(bytes))
  const out: Array<ReplayedAttestation> = []
  const messages: Array<string> = []
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const visit = (ts: any, msg: Array<number>): void => {
    if (hexOf(ts.msg) !== hexOf(msg)) throw new Error(`package message ${hexOf(ts.msg)} != replayed ${hexOf(msg)}`)
    messages.push(hexOf(msg))
    for (const a of ts.attestations) {
      if (a instanceof OpenTimestamps.Notary.BitcoinBlockHeaderAttestation) out.push({ kind: "bitcoin", height: a.height, msg: hexOf(msg) })
      else if (a instanceof OpenTimestamps.Notary.PendingAttestation) out.push({ kind: "pending", uri: a.uri, msg: hexOf(msg) })
      else out.push({ kind: "other", msg: hexOf(msg) })
    }
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    for (const [op, child] of ts.ops as Map<any, any>) visit(child, Array.from(op.call(msg) as ArrayLike<number>))
  }
  const digest = Array.from(file.fileDigest() as ArrayLike<number>)
  visit(file.timestamp, digest)
  return {
    hashOp: file.fileHashOp._TAG_NAME(),
    fileDigest: hexOf(digest),
    complete: file.timestamp.isTimestampComplete(),
    attestations: out,
    messages,
    reserialized: hexOf(file.serializeToBytes())
  }
}

/** Parses a bare serialized timestamp for `msgHex` (a calendar submission) with the package. */
export const parseBareTimestamp = (bytes: Uint8Array, msgHex: string): ReadonlyArray<ReplayedAttestation> => {
  const ctx = new OpenTimestamps.Context.StreamDeserialization(Array.from(bytes))
  const ts = OpenTimestamps.Timestamp.deserialize(ctx, Array.from(Buffer.from(msgHex, "hex")))
  const out: Array<ReplayedAttestation> = []
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  ts.allAttestations().forEach((a: any, msg: ArrayLike<number>) => {
    if (a instanceof OpenTimestamps.Notary.BitcoinBlockHeaderAttestation) out.push({ kind: "bitcoin", height: a.height, msg: hexOf(msg) })
    else if (a instanceof OpenTimestamps.Notary.PendingAttestation) out.push({ kind: "pending", uri: a.uri, msg: hexOf(msg) })
    else out.push({ kind: "other", msg: hexOf(msg) })
  })
  return out
}

// ---------------------------------------------------------------------------
// Direct database access and the T2 invariants

import { type Row, withDb } from "./process.js"

export { type Row, withDb }

export interface AnchoringSnapshot {
  readonly attestations: number
  readonly byLevel: Record<string, number>
  readonly batches: number
  readonly anchoredBatches: number
  readonly dailyRoots: number
  readonly confirmedRoots: number
  readonly submissions: number
  /** Sum of calendar_submissions.attempts. */
  readonly attempts: number
  /** Submissions no calendar has answered yet. */
  readonly unsubmitted: number
  readonly violations: ReadonlyArray<string>
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v))

/**
 * Every T2 invariant, straight from the tables:
 * - a daily root's `leaves` blob is the sorted, distinct batch roots, its `root`
 *   is their independently recomputed Merkle v2 root, batch_count = #leaves;
 * - the batches pointing at a daily root are exactly its leaves, each at its
 *   daily_leaf_index; no batch points at a missing root or has half the link;
 * - an attestation is T2 iff its batch's daily root is confirmed, with t2_block =
 *   the root's bitcoin_height and t2_at = its confirmed_at; no T0/T1 has T2 data;
 * - exactly one t2_complete outbox row per T2 attestation, none for others;
 * - one calendar_submissions row per daily root and configured calendar; a
 *   pending/confirmed submission has a timestamp; a confirmed root has a
 *   submission timestamp that (parsed by the opentimestamps package) reaches a
 *   Bitcoin attestation at its height on its bitcoin_merkle_root, and that
 *   block header (when `blockHeaders` is given) has that merkle root.
 */
export const checkAnchoringInvariants = async (
  databaseUrl: string,
  options: {
    readonly calendars: ReadonlyArray<string>
    readonly blockHeaders?: ReadonlyMap<number, { readonly merkleRoot: string }>
  }
): Promise<AnchoringSnapshot> =>
  withDb(databaseUrl, async (query) => {
    const violations: Array<string> = []
    const days = await query(
      "SELECT id, window_end, root, leaves, batch_count, status, bitcoin_height, bitcoin_merkle_root, confirmed_at FROM daily_roots ORDER BY id"
    )
    const batches = await query("SELECT id, merkle_root, daily_root_id, daily_leaf_index FROM batches ORDER BY id")
    const atts = await query("SELECT seq, id, level, batch_id, t2_at, t2_block FROM attestations ORDER BY seq")
    const subs = await query(
      "SELECT daily_root_id, calendar_url, status, timestamp, attempts, submitted_at FROM calendar_submissions ORDER BY daily_root_id, calendar_url"
    )
    const events = await query(
      "SELECT attestation_seq, COUNT(*) AS n FROM outbox WHERE event_type = 't2_complete' GROUP BY attestation_seq"
    )

    const dayById = new Map<number, Row>()
    const leavesOf = new Map<number, Array<string>>()
    const windows = new Set<string>()
    for (const d of days) {
      const id = Number(d.id)
      dayById.set(id, d)
      if (windows.has(String(d.window_end))) violations.push(`window_end ${d.window_end} has two daily roots`)
      windows.add(String(d.window_end))
      const blob = Buffer.from(d.leaves as Uint8Array)
      if (blob.length === 0 || blob.length % 32 !== 0) {
        violations.push(`daily root ${id}: leaves blob of ${blob.length} bytes`)
        continue
      }
      const leaves: Array<string> = []
      for (let off = 0; off < blob.length; off += 32) leaves.push(blob.subarray(off, off + 32).toString("hex"))
      leavesOf.set(id, leaves)
      const sorted = [...new Set(leaves)].sort()
      if (JSON.stringify(sorted) !== JSON.stringify(leaves)) violations.push(`daily root ${id}: leaves not sorted and distinct`)
      if (Number(d.batch_count) !== leaves.length) violations.push(`daily root ${id}: batch_count ${d.batch_count} but ${leaves.length} leaves`)
      const recomputed = merkleRoot(leaves)
      if (recomputed !== d.root) violations.push(`daily root ${id}: root ${d.root} != recomputed ${recomputed}`)
      if (d.status !== "pending" && d.status !== "confirmed") violations.push(`daily root ${id}: status ${d.status}`)
      if (d.status === "confirmed") {
        if (num(d.bitcoin_height) === null || d.bitcoin_merkle_root === null || d.confirmed_at === null) {
          violations.push(`daily root ${id} confirmed without height/merkle root/confirmed_at`)
        }
      } else if (d.bitcoin_height !== null || d.bitcoin_merkle_root !== null || d.confirmed_at !== null) {
        violations.push(`daily root ${id} pending but has confirmation data`)
      }
    }

    const batchById = new Map<number, Row>()
    const membersOf = new Map<number, Array<Row>>()
    let anchoredBatches = 0
    for (const b of batches) {
      batchById.set(Number(b.id), b)
      const dayId = num(b.daily_root_id)
      const idx = num(b.daily_leaf_index)
      if ((dayId === null) !== (idx === null)) violations.push(`batch ${b.id}: daily_root_id ${dayId} with daily_leaf_index ${idx}`)
      if (dayId === null) continue
      anchoredBatches++
      const leaves = leavesOf.get(dayId)
      if (!dayById.has(dayId)) {
        violations.push(`batch ${b.id} points at missing daily root ${dayId}`)
        continue
      }
      if (!leaves) continue
      if (idx === null || leaves[idx] !== b.merkle_root) {
        violations.push(`batch ${b.id}: root ${b.merkle_root} is not leaf ${idx} of daily root ${dayId}`)
      }
      let list = membersOf.get(dayId)
      if (!list) membersOf.set(dayId, list = [])
      list.push(b)
    }
    for (const [dayId, leaves] of leavesOf) {
      const members = (membersOf.get(dayId) ?? []).map((b) => String(b.merkle_root)).sort()
      if (JSON.stringify(members) !== JSON.stringify(leaves)) {
        violations.push(`daily root ${dayId}: its batches' roots [${members.length}] are not exactly its ${leaves.length} leaves`)
      }
    }

    const eventCount = new Map(events.map((e) => [Number(e.attestation_seq), Number(e.n)]))
    const byLevel: Record<string, number> = { T0: 0, T1: 0, T2: 0 }
    const seqs = new Set<number>()
    for (const a of atts) {
      const level = String(a.level)
      seqs.add(Number(a.seq))
      byLevel[level] = (byLevel[level] ?? 0) + 1
      const batch = a.batch_id === null ? undefined : batchById.get(Number(a.batch_id))
      const day = batch && num(batch.daily_root_id) !== null ? dayById.get(Number(batch.daily_root_id)) : undefined
      const shouldBeT2 = day !== undefined && day.status === "confirmed"
      if ((level === "T2") !== shouldBeT2) {
        violations.push(`attestation ${a.id} is ${level} but its daily root is ${day ? `${day.id} (${day.status})` : "absent"}`)
      }
      if (level === "T2" && day) {
        if (num(a.t2_block) !== num(day.bitcoin_height)) violations.push(`attestation ${a.id}: t2_block ${a.t2_block} != ${day.bitcoin_height}`)
        if (a.t2_at !== day.confirmed_at) violations.push(`attestation ${a.id}: t2_at ${a.t2_at} != confirmed_at ${day.confirmed_at}`)
        if (typeof a.t2_at !== "string" || !WIRE_TIME.test(a.t2_at)) violations.push(`attestation ${a.id}: t2_at ${a.t2_at} not in wire format`)
      }
      if (level !== "T2" && (a.t2_at !== null || a.t2_block !== null)) violations.push(`${level} attestation ${a.id} has T2 data`)
      const n = eventCount.get(Number(a.seq)) ?? 0
      const expected = level === "T2" ? 1 : 0
      if (n !== expected) violations.push(`attestation ${a.id} (${level}) has ${n} t2_complete events, expected ${expected}`)
    }
    for (const seq of eventCount.keys()) if (!seqs.has(seq)) violations.push(`t2_complete event for unknown attestation seq ${seq}`)

    const subsOf = new Map<number, Array<Row>>()
    let attempts = 0
    for (const s of subs) {
      const dayId = Number(s.daily_root_id)
      attempts += Number(s.attempts)
      if (!dayById.has(dayId)) violations.push(`calendar submission for missing daily root ${dayId}`)
      let list = subsOf.get(dayId)
      if (!list) subsOf.set(dayId, list = [])
      list.push(s)
      if (!["unsubmitted", "pending", "confirmed"].includes(String(s.status))) violations.push(`submission ${dayId}/${s.calendar_url}: status ${s.status}`)
      if (s.status !== "unsubmitted" && (s.timestamp === null || s.submitted_at === null)) {
        violations.push(`submission ${dayId}/${s.calendar_url} is ${s.status} without a timestamp`)
      }
    }
    for (const [dayId, day] of dayById) {
      const list = subsOf.get(dayId) ?? []
      const urls = list.map((s) => String(s.calendar_url)).sort()
      if (JSON.stringify(urls) !== JSON.stringify([...options.calendars].sort())) {
        violations.push(`daily root ${dayId}: submissions for [${urls.join(", ")}], expected [${options.calendars.join(", ")}]`)
      }
      if (day.status !== "confirmed") continue
      const height = Number(day.bitcoin_height)
      const proven = list.some((s) => {
        if (s.timestamp === null) return false
        try {
          return parseBareTimestamp(Buffer.from(s.timestamp as Uint8Array), String(day.root)).some((a) =>
            a.kind === "bitcoin" && a.height === height && a.msg === day.bitcoin_merkle_root
          )
        } catch {
          return false
        }
      })
      if (!proven) violations.push(`daily root ${dayId} confirmed at ${height} but no stored timestamp reaches that block`)
      if (options.blockHeaders) {
        const header = options.blockHeaders.get(height)
        if (!header) violations.push(`daily root ${dayId}: block ${height} was never mined`)
        else if (header.merkleRoot !== day.bitcoin_merkle_root) violations.push(`daily root ${dayId}: merkle root differs from block ${height}`)
      }
    }

    return {
      attestations: atts.length,
      byLevel,
      batches: batches.length,
      anchoredBatches,
      dailyRoots: days.length,
      confirmedRoots: days.filter((d) => d.status === "confirmed").length,
      submissions: subs.length,
      attempts,
      unsubmitted: subs.filter((x) => x.status === "unsubmitted").length,
      violations
    }
  })
