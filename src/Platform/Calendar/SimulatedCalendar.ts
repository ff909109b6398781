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
 *   - `layerSimulated({ confirmDelayMs })`: in-process OtsCalendar (no HTTP),
 *     `simulated: true`, url `simulated://attestd-demo-calendar`; a block is
 *     mined lazily on upgrade once `confirmDelayMs` has elapsed since the
 *     submission, measured with the Effect Clock (TestClock-friendly) unless a
 *     `clock` function is given;
 *   - `startSimulatedCalendarServer()`: a real HTTP server on 127.0.0.1:0
 *     speaking the same protocol, mined explicitly with `mine()`.
 *
 * Every block has a real 80-byte header (version, previous-block hash chaining
 * to the previous simulated block, merkle root = the block's commitment tree,
 * time, regtest nBits 0x207fffff and a nonce meeting it), so simulated proofs
 * verify with the same code as real ones.
 *
 * The in-memory calendars here (tests) share one process-wide chain: heights are
 * unique and `simulatedBlockHeaders()` maps each height to its header. The test
 * HTTP server also answers the Esplora header endpoints for that chain. The
 * demo instance's calendar keeps its chain in the database instead
 * (SimulatedChain.ts), so a restart loses nothing.
 */
import { createHash, randomBytes } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Clock, Effect, Layer } from "effect"
import { blockHash, mineHeader, parseHeader } from "../../Domain/BitcoinHeader.js"
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

// ---------------------------------------------------------------------------
// Process-wide simulated chain
// ---------------------------------------------------------------------------

const chainHeaders = new Map<number, SimulatedBlockHeader>()
let nextHeight = SIMULATED_START_HEIGHT
let lastHash = SIMULATED_GENESIS_PREV

/** Every simulated block mined in this process so far: height → header. */
export const simulatedBlockHeaders = (): ReadonlyMap<number, SimulatedBlockHeader> => new Map(chainHeaders)

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

interface Submission {
  readonly commitment: Uint8Array
  readonly submittedAt: number
}

/** One simulated calendar's state (shared by the in-process layer and the HTTP server). */
class SimulatedCalendarCore {
  private readonly pending = new Map<string, Submission>()
  private readonly proofs = new Map<string, Uint8Array>()
  private readonly headers = new Map<number, SimulatedBlockHeader>()
  submissions = 0

  constructor(readonly url: string) {}

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
    const height = nextHeight++
    const time = Math.floor(now / 1000)
    const block = mineSimulatedBlock({ height, prevHash: lastHash, timeSec: time, commitments: included.map((s) => s.commitment) })
    lastHash = block.hash
    included.forEach((s, i) => {
      const key = bytesToHex(s.commitment)
      this.proofs.set(key, block.proofs[i]!)
      this.pending.delete(key)
    })
    const header: SimulatedBlockHeader = {
      height,
      merkleRoot: block.merkleRoot,
      time,
      calendar: this.url,
      hash: block.hash,
      header: block.header
    }
    this.headers.set(height, header)
    chainHeaders.set(height, header)
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
}

export interface SimulatedCalendarService extends OtsCalendarService {
  readonly label: string
  /** Blocks mined by this calendar instance: height → header. */
  readonly blockHeaders: () => ReadonlyMap<number, SimulatedBlockHeader>
}

export const makeSimulatedCalendar = (opts: SimulatedCalendarOptions): SimulatedCalendarService => {
  const url = opts.url ?? SIMULATED_CALENDAR_URL
  const core = new SimulatedCalendarCore(url)
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

// ---------------------------------------------------------------------------
// HTTP server (tests)
// ---------------------------------------------------------------------------

export interface SimulatedCalendarServer {
  readonly url: string
  readonly label: string
  /** Mine a block with every pending commitment; merkleRoot is hex in internal byte order. */
  mine(): { readonly height: number; readonly merkleRoot: string }
  /** While down, every connection is dropped without an answer. */
  setDown(down: boolean): void
  /** Delay every answer by `ms` (0 = immediate). */
  setSlow(ms: number): void
  /** While lying, the Esplora endpoints serve another valid chain (a header with a different time). */
  setLying(lying: boolean): void
  /** Number of accepted POST /digest requests. */
  readonly submissions: number
  blockHeaders(): ReadonlyMap<number, SimulatedBlockHeader>
  close(): Promise<void>
}

const MAX_REQUEST_BODY = 1024

const readBody = (req: IncomingMessage): Promise<Uint8Array | null> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let total = 0
    let overflow = false
    req.on("data", (c: Buffer) => {
      total += c.length
      if (total > MAX_REQUEST_BODY) overflow = true
      else chunks.push(c)
    })
    req.on("end", () => resolve(overflow ? null : new Uint8Array(Buffer.concat(chunks))))
    req.on("error", reject)
  })

export const startSimulatedCalendarServer = async (
  opts: { readonly host?: string } = {}
): Promise<SimulatedCalendarServer> => {
  const host = opts.host ?? "127.0.0.1"
  let down = false
  let lying = false
  let slowMs = 0
  let core: SimulatedCalendarCore | undefined
  const timers = new Set<NodeJS.Timeout>()

  const send = (res: ServerResponse, status: number, body: Uint8Array | string, type: string): void => {
    if (res.destroyed || res.writableEnded) return
    res.writeHead(status, {
      "Content-Type": type,
      "Content-Length": typeof body === "string" ? Buffer.byteLength(body) : body.length,
      "X-Simulated": "true"
    })
    res.end(body)
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const c = core!
    const path = (req.url ?? "/").split("?")[0] ?? "/"
    if (req.method === "POST" && path === "/digest") {
      const body = await readBody(req)
      if (body === null || body.length < 1 || body.length > MAX_SUBMIT_DIGEST_BYTES) {
        return send(res, 400, "digest too long or empty\n", "text/plain")
      }
      const ts = c.submit(body, Date.now())
      return send(res, 200, ts, "application/octet-stream")
    }
    const m = /^\/timestamp\/([0-9a-fA-F]*)$/.exec(path)
    if (req.method === "GET" && m !== null) {
      const hex = m[1]!.toLowerCase()
      if (hex.length === 0 || hex.length % 2 !== 0 || hex.length > 2 * MAX_SUBMIT_DIGEST_BYTES) {
        return send(res, 400, "invalid commitment\n", "text/plain")
      }
      const proof = c.proof(hex)
      return proof === null
        ? send(res, 404, "Pending confirmation in Bitcoin blockchain\n", "text/plain")
        : send(res, 200, proof, "application/octet-stream")
    }
    const served = (b: SimulatedBlockHeader): SimulatedBlockHeader => {
      if (!lying) return b
      // A different, self-consistent header for the same height: another chain.
      const forged = mineHeader({ prevBlockHash: parseHeader(b.header).prevBlockHash, merkleRoot: b.merkleRoot, time: b.time + 1 })
      return { ...b, hash: blockHash(forged), header: bytesToHex(forged) }
    }
    const byHeight = /^\/block-height\/(\d{1,10})$/.exec(path)
    if (req.method === "GET" && byHeight !== null) {
      const h = chainHeaders.get(Number(byHeight[1]))
      return h === undefined ? send(res, 404, "Block not found", "text/plain") : send(res, 200, served(h).hash, "text/plain")
    }
    const byHash = /^\/block\/([0-9a-f]{64})\/header$/.exec(path)
    if (req.method === "GET" && byHash !== null) {
      const h = [...chainHeaders.values()].map(served).find((b) => b.hash === byHash[1])
      return h === undefined ? send(res, 404, "Block not found", "text/plain") : send(res, 200, h.header, "text/plain")
    }
    if (req.method === "GET" && path === "/") return send(res, 200, `${SIMULATED_CALENDAR_LABEL}\n`, "text/plain")
    return send(res, 404, "not found\n", "text/plain")
  }

  const server = createServer((req, res) => {
    if (down) {
      req.socket.destroy()
      return
    }
    const run = (): void => {
      handle(req, res).catch(() => send(res, 500, "internal error\n", "text/plain"))
    }
    if (slowMs > 0) {
      const t = setTimeout(() => {
        timers.delete(t)
        run()
      }, slowMs)
      timers.add(t)
    } else {
      run()
    }
  })

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, host, () => {
      server.off("error", reject)
      resolve()
    })
  })
  const { port } = server.address() as AddressInfo
  const url = `http://${host}:${port}`
  const theCore = new SimulatedCalendarCore(url)
  core = theCore

  return {
    url,
    label: SIMULATED_CALENDAR_LABEL,
    mine: () => {
      const h = theCore.mine(Date.now())
      return { height: h.height, merkleRoot: h.merkleRoot }
    },
    setDown: (b) => {
      down = b
    },
    setLying: (b) => {
      lying = b
    },
    setSlow: (ms) => {
      slowMs = Math.max(0, ms)
    },
    get submissions() {
      return theCore.submissions
    },
    blockHeaders: () => theCore.blockHeaders(),
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t)
        timers.clear()
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}
