/**
 * SIMULATED OpenTimestamps calendar + Bitcoin chain — for demo mode and tests.
 * Nothing produced here is anchored in the real Bitcoin blockchain.
 *
 * Behaves like a real calendar:
 *   - submit(digest) answers at once with `append <16-byte nonce>, sha256`
 *     then a pending attestation naming the calendar URL; the resulting
 *     message is the calendar's commitment;
 *   - GET /timestamp/<commitment hex> is 404 until a block is "mined", then
 *     returns the ops from the commitment up to the block header merkle root
 *     (a Bitcoin-style sha256d Merkle tree over a random coinbase txid and
 *     every commitment in the block) ending in a Bitcoin block-header
 *     attestation at a simulated height (from 900000 upwards).
 *
 * Two ways to use it:
 *   - `layerSimulated({ confirmDelayMs, chain })`: in-process OtsCalendar (no HTTP),
 *     `simulated: true`, url `simulated://attestd-demo-calendar`; a block is
 *     mined lazily on upgrade once `confirmDelayMs` has elapsed since the
 *     submission, measured with the Effect Clock (TestClock-friendly) unless a
 *     `clock` function is given;
 *   - `startSimulatedCalendarServer()` (test/helpers/simulatedCalendarServer.ts,
 *     tests only): a real HTTP server on 127.0.0.1:0 speaking the same
 *     protocol over a `SimulatedCalendarCore`, mined explicitly with `mine()`.
 *
 * Every block has a real 80-byte header (version, previous-block hash chaining
 * to the previous simulated block, merkle root = the block's commitment tree,
 * time, regtest nBits 0x207fffff and a nonce meeting it), so simulated proofs
 * verify with the same code as real ones.
 *
 * The in-memory calendars here (tests) mine on the `SimulatedBitcoinChain` they
 * are given: calendars given the same one share its heights, and its
 * `headers()` maps each height to its header. The test HTTP server also answers
 * the Esplora header endpoints for its chain. The demo instance's calendar keeps
 * its chain in the database instead (SimulatedChain.ts), so a restart loses
 * nothing.
 */
import { createHash, randomBytes } from "node:crypto"
import { Clock, Effect, Layer } from "effect"
import { blockHash, mineHeader } from "../../Domain/BitcoinHeader.js"
import {
  Attestations,
  bytesToHex,
  chain,
  leaf,
  type Op,
  Ops,
  serializeTimestamp
} from "../../Domain/Ots.js"
import { CalendarError, MAX_SUBMIT_DIGEST_BYTES, OtsCalendar, type OtsCalendarService } from "./OtsCalendar.js"

export const SIMULATED_CALENDAR_LABEL =
  "SIMULATED OpenTimestamps calendar — attestations reference a simulated Bitcoin chain, not the real blockchain"
export const SIMULATED_CALENDAR_URL = "simulated://attestd-demo-calendar"
export const SIMULATED_START_HEIGHT = 900_000

export interface SimulatedBlockHeader {
  readonly height: number
  /** Header merkle root as hex of the bytes OTS replay reaches (internal byte order, not explorer order). */
  readonly merkleRoot: string
  /** Simulated block time, unix seconds. */
  readonly time: number
  /** Calendar URL whose submissions were mined in this block. */
  readonly calendar: string
  /** Block hash, display order (as Esplora shows it). */
  readonly hash: string
  /** The 80-byte block header, lowercase hex. */
  readonly header: string
}

/** Genesis parent of every simulated chain. */
export const SIMULATED_GENESIS_PREV = "00".repeat(32)

/**
 * Mines one simulated block over `commitments` (after a random coinbase):
 * the header chained to `prevHash` and each commitment's OTS proof (ops up to
 * the header merkle root, then the Bitcoin attestation at `height`).
 */
export const mineSimulatedBlock = (input: {
  readonly height: number
  readonly prevHash: string
  readonly timeSec: number
  readonly commitments: ReadonlyArray<Uint8Array>
}): { readonly merkleRoot: string; readonly hash: string; readonly header: string; readonly proofs: ReadonlyArray<Uint8Array> } => {
  const coinbase = new Uint8Array(randomBytes(32))
  const { root, paths } = bitcoinMerkle([coinbase, ...input.commitments])
  const merkleRoot = bytesToHex(root)
  const header = mineHeader({ prevBlockHash: input.prevHash, merkleRoot, time: input.timeSec })
  return {
    merkleRoot,
    hash: blockHash(header),
    header: bytesToHex(header),
    proofs: input.commitments.map((_, i) => serializeTimestamp(chain(paths[i + 1]!, leaf(Attestations.bitcoin(input.height)))))
  }
}

const sha256 = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest())
const sha256d = (b: Uint8Array): Uint8Array => sha256(sha256(b))
const cat = (a: Uint8Array, b: Uint8Array): Uint8Array => {
  const out = new Uint8Array(a.length + b.length)
  out.set(a)
  out.set(b, a.length)
  return out
}

/** Bitcoin-style Merkle tree (sha256d(left ‖ right), last node paired with itself when odd) with per-leaf OTS paths. */
const bitcoinMerkle = (leaves: ReadonlyArray<Uint8Array>): { root: Uint8Array; paths: Array<Array<Op>> } => {
  const paths: Array<Array<Op>> = leaves.map(() => [])
  let level = leaves.map((h, i) => ({ hash: h, members: [i] }))
  while (level.length > 1) {
    const next: typeof level = []
    for (let i = 0; i < level.length; i += 2) {
      const left = level[i]!
      const right = level[i + 1] ?? left
      for (const m of left.members) paths[m]!.push(Ops.append(right.hash), Ops.sha256, Ops.sha256)
      if (right !== left) for (const m of right.members) paths[m]!.push(Ops.prepend(left.hash), Ops.sha256, Ops.sha256)
      next.push({
        hash: sha256d(cat(left.hash, right.hash)),
        members: right === left ? left.members : [...left.members, ...right.members]
      })
    }
    level = next
  }
  return { root: level[0]!.hash, paths }
}

/**
 * A simulated Bitcoin chain in memory: every block mined on it, height → header.
 * Calendars that share one (several test calendar servers, the Esplora header
 * endpoints that serve their blocks) see one chain with unique heights.
 */
export class SimulatedBitcoinChain {
  private readonly byHeight = new Map<number, SimulatedBlockHeader>()
  private nextHeight = SIMULATED_START_HEIGHT
  private tip = SIMULATED_GENESIS_PREV

  /** Mines the next block over `commitments` for `calendar`; its header and each commitment's proof. */
  mine(calendar: string, timeSec: number, commitments: ReadonlyArray<Uint8Array>): {
    readonly header: SimulatedBlockHeader
    readonly proofs: ReadonlyArray<Uint8Array>
  } {
    const height = this.nextHeight++
    const block = mineSimulatedBlock({ height, prevHash: this.tip, timeSec, commitments })
    this.tip = block.hash
    const header: SimulatedBlockHeader = {
      height,
      merkleRoot: block.merkleRoot,
      time: timeSec,
      calendar,
      hash: block.hash,
      header: block.header
    }
    this.byHeight.set(height, header)
    return { header, proofs: block.proofs }
  }

  /** Every block mined on this chain so far: height → header. */
  headers(): ReadonlyMap<number, SimulatedBlockHeader> {
    return new Map(this.byHeight)
  }
}

export interface Submission {
  readonly commitment: Uint8Array
  readonly submittedAt: number
}

/** One simulated calendar's state (the in-process layer here; the test HTTP server in test/helpers). */
export class SimulatedCalendarCore {
  private readonly pending = new Map<string, Submission>()
  private readonly proofs = new Map<string, Uint8Array>()
  private readonly headers = new Map<number, SimulatedBlockHeader>()
  submissions = 0

  constructor(readonly url: string, private readonly chain: SimulatedBitcoinChain) {}

  submit(digest: Uint8Array, now: number): Uint8Array {
    this.submissions++
    const nonce = new Uint8Array(randomBytes(16))
    const commitment = sha256(cat(digest, nonce))
    this.pending.set(bytesToHex(commitment), { commitment, submittedAt: now })
    return serializeTimestamp(chain([Ops.append(nonce), Ops.sha256], leaf(Attestations.pending(this.url))))
  }

  /** Mine a block containing the pending commitments selected by `include` (all by default). */
  mine(now: number, include: (s: Submission) => boolean = () => true): SimulatedBlockHeader {
    const included = [...this.pending.values()].filter(include)
    const { header, proofs } = this.chain.mine(this.url, Math.floor(now / 1000), included.map((s) => s.commitment))
    included.forEach((s, i) => {
      const key = bytesToHex(s.commitment)
      this.proofs.set(key, proofs[i]!)
      this.pending.delete(key)
    })
    this.headers.set(header.height, header)
    return header
  }

  /** Upgrade answer for a commitment, or null while pending / unknown. */
  proof(commitmentHex: string): Uint8Array | null {
    return this.proofs.get(commitmentHex) ?? null
  }

  /** In-process semantics: mine lazily once the commitment has waited `confirmDelayMs`. */
  upgradeLazily(commitmentHex: string, now: number, confirmDelayMs: number): Uint8Array | null {
    const done = this.proofs.get(commitmentHex)
    if (done !== undefined) return done
    const sub = this.pending.get(commitmentHex)
    if (sub === undefined || now - sub.submittedAt < confirmDelayMs) return null
    this.mine(now, (s) => now - s.submittedAt >= confirmDelayMs)
    return this.proofs.get(commitmentHex) ?? null
  }

  blockHeaders(): ReadonlyMap<number, SimulatedBlockHeader> {
    return new Map(this.headers)
  }
}

const badDigest = (url: string, digest: Uint8Array): CalendarError | undefined =>
  digest.length < 1 || digest.length > MAX_SUBMIT_DIGEST_BYTES
    ? new CalendarError({ url, message: `digest must be 1..${MAX_SUBMIT_DIGEST_BYTES} bytes` })
    : undefined

// ---------------------------------------------------------------------------
// In-process layer (demo mode)
// ---------------------------------------------------------------------------

export interface SimulatedCalendarOptions {
  /** How long after submission a commitment gets mined (checked lazily on upgrade). */
  readonly confirmDelayMs: number
  /** Time source in epoch ms; defaults to the Effect Clock (so TestClock drives it). */
  readonly clock?: () => number
  /** Calendar URL written into pending attestations; default `simulated://attestd-demo-calendar`. */
  readonly url?: string
  /** The chain its blocks are mined on (shared by every calendar given the same one). */
  readonly chain: SimulatedBitcoinChain
}

export interface SimulatedCalendarService extends OtsCalendarService {
  readonly label: string
  /** Blocks mined by this calendar instance: height → header. */
  readonly blockHeaders: () => ReadonlyMap<number, SimulatedBlockHeader>
}

export const makeSimulatedCalendar = (opts: SimulatedCalendarOptions): SimulatedCalendarService => {
  const url = opts.url ?? SIMULATED_CALENDAR_URL
  const core = new SimulatedCalendarCore(url, opts.chain)
  const clock = opts.clock
  const now: Effect.Effect<number> = clock !== undefined ? Effect.sync(clock) : Clock.currentTimeMillis
  const checkUrl = (u: string): CalendarError | undefined =>
    u === url ? undefined : new CalendarError({ url: u, message: `unknown simulated calendar (expected ${url})` })

  return {
    urls: [url],
    simulated: true,
    label: SIMULATED_CALENDAR_LABEL,
    submit: (u, digest) => {
      const err = checkUrl(u) ?? badDigest(u, digest)
      return err !== undefined ? Effect.fail(err) : Effect.map(now, (t) => core.submit(digest, t))
    },
    upgrade: (u, commitment) => {
      const err = checkUrl(u)
      return err !== undefined
        ? Effect.fail(err)
        : Effect.map(now, (t) => core.upgradeLazily(bytesToHex(commitment), t, opts.confirmDelayMs))
    },
    blockHeaders: () => core.blockHeaders()
  }
}

export const layerSimulated = (opts: SimulatedCalendarOptions): Layer.Layer<OtsCalendar> =>
  Layer.sync(OtsCalendar, () => makeSimulatedCalendar(opts))
