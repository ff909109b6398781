/**
 * The simulated OpenTimestamps calendar as a real HTTP server on 127.0.0.1:0
 * (tests and the anchor benchmark only): the protocol of a calendar over a
 * `SimulatedCalendarCore` (src/Platform/Calendar/SimulatedCalendar.ts), mined
 * explicitly with `mine()`, with switches for outages, slowness and a lying
 * chain. It also answers the Esplora header endpoints for its simulated chain:
 * a fresh one unless `chain` is given (servers given the same chain serve each
 * other's blocks).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { blockHash, mineHeader, parseHeader } from "../../src/Domain/BitcoinHeader.js"
import { bytesToHex } from "../../src/Domain/Ots.js"
import { MAX_SUBMIT_DIGEST_BYTES } from "../../src/Platform/Calendar/OtsCalendar.js"
import {
  SIMULATED_CALENDAR_LABEL,
  SimulatedBitcoinChain,
  type SimulatedBlockHeader,
  SimulatedCalendarCore
} from "../../src/Platform/Calendar/SimulatedCalendar.js"

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
  /** Blocks this calendar mined: height → header. */
  blockHeaders(): ReadonlyMap<number, SimulatedBlockHeader>
  /** The chain it mines on and serves headers of. */
  readonly chain: SimulatedBitcoinChain
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
  opts: { readonly host?: string; readonly chain?: SimulatedBitcoinChain } = {}
): Promise<SimulatedCalendarServer> => {
  const host = opts.host ?? "127.0.0.1"
  const chain = opts.chain ?? new SimulatedBitcoinChain()
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
      const h = chain.headers().get(Number(byHeight[1]))
      return h === undefined ? send(res, 404, "Block not found", "text/plain") : send(res, 200, served(h).hash, "text/plain")
    }
    const byHash = /^\/block\/([0-9a-f]{64})\/header$/.exec(path)
    if (req.method === "GET" && byHash !== null) {
      const h = [...chain.headers().values()].map(served).find((b) => b.hash === byHash[1])
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
  const theCore = new SimulatedCalendarCore(url, chain)
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
    chain,
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t)
        timers.clear()
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}
