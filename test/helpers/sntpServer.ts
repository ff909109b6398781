/**
 * A small SNTP server for the clock-discipline tests (node:dgram on 127.0.0.1),
 * written apart from src/Timestamping/Sntp.ts so that a mistake there is not
 * repeated here. Its clock reads `offsetMs` ahead of the wall clock, or, with
 * base "echo", ahead of the client's own transmit timestamp (a server whose
 * clock is the client's clock plus the offset: what a TestClock-driven client
 * needs). It can go silent, answer late (half the delay before it reads its
 * clock, half after: a long, symmetric round trip), send a kiss-o'-death, or
 * answer a request it was not asked.
 */
import { createSocket, type Socket } from "node:dgram"

export interface SntpBehaviour {
  readonly offsetMs: number
  readonly mode: "answer" | "silent" | "kiss" | "unsynchronised" | "wrongOriginate"
  readonly delayMs: number
  readonly base: "wall" | "echo"
}

export interface SntpTestServer {
  /** `127.0.0.1:port`, as ATTESTD_NTP_SERVERS takes it. */
  readonly address: string
  readonly port: number
  readonly queries: number
  set(behaviour: Partial<SntpBehaviour>): void
  close(): Promise<void>
}

const NTP_UNIX_OFFSET = 2_208_988_800
const TWO_32 = 2 ** 32

const writeTimestamp = (packet: Buffer, at: number, unixMs: number) => {
  const seconds = Math.floor(unixMs / 1000)
  packet.writeUInt32BE(seconds + NTP_UNIX_OFFSET, at)
  packet.writeUInt32BE(Math.floor(((unixMs - seconds * 1000) / 1000) * TWO_32), at + 4)
}

/** The Unix ms of an era-0 NTP timestamp (the tests run between 1970 and 2036). */
const readTimestamp = (packet: Buffer, at: number): number =>
  (packet.readUInt32BE(at) - NTP_UNIX_OFFSET) * 1000 + (packet.readUInt32BE(at + 4) / TWO_32) * 1000

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export const startSntpServer = async (initial: Partial<SntpBehaviour> = {}): Promise<SntpTestServer> => {
  let behaviour: SntpBehaviour = { offsetMs: 0, mode: "answer", delayMs: 0, base: "wall", ...initial }
  let queries = 0
  const socket: Socket = createSocket("udp4")
  socket.on("message", (request, from) => {
    queries++
    const b = behaviour
    if (b.mode === "silent" || request.length < 48 || (request[0]! & 7) !== 3) return
    const now = () => (b.base === "echo" ? readTimestamp(request, 40) : Date.now()) + b.offsetMs
    void (async () => {
      await sleep(b.delayMs / 2)
      const t = now()
      await sleep(b.delayMs / 2)
      const reply = Buffer.alloc(48)
      reply[0] = ((b.mode === "unsynchronised" ? 3 : 0) << 6) | (4 << 3) | 4
      reply[1] = b.mode === "kiss" ? 0 : 1
      reply[2] = 6
      reply[3] = 0xec
      reply.write(b.mode === "kiss" ? "RATE" : "TEST", 12, "ascii")
      writeTimestamp(reply, 16, t)
      if (b.mode === "wrongOriginate") writeTimestamp(reply, 24, Date.now())
      else request.copy(reply, 24, 40, 48)
      writeTimestamp(reply, 32, t)
      writeTimestamp(reply, 40, t)
      socket.send(reply, from.port, from.address)
    })()
  })
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve))
  const port = socket.address().port
  return {
    address: `127.0.0.1:${port}`,
    port,
    get queries() {
      return queries
    },
    set: (next) => {
      behaviour = { ...behaviour, ...next }
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve()))
  }
}
