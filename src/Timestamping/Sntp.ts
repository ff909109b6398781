/**
 * SNTP (RFC 4330) over UDP: the 48-byte packet and one query to one server.
 * Local times come from Effect's Clock, the clock the authority stamps tokens
 * with, so the offset measured is that clock's and a TestClock can stand in.
 *
 * A reply counts only when it answers this request: it comes from the address
 * asked, its originate timestamp is exactly the transmit timestamp sent (whose
 * low 16 fraction bits, about 15 µs, are random), it is a server reply (mode 4)
 * from a synchronised server (leap indicator not 3, stratum 1..15; stratum 0 is
 * a kiss-o'-death whose code is reported).
 */
import { randomFillSync } from "node:crypto"
import { createSocket } from "node:dgram"
import { lookup } from "node:dns/promises"
import { Clock, Data, Duration, Effect } from "effect"
import type { NtpServer } from "../Platform/Config.js"

export const PACKET_BYTES = 48

/** Seconds from the NTP epoch (1900-01-01) to the Unix epoch. */
const UNIX_EPOCH_NTP_SECONDS = 2_208_988_800
const TWO_32 = 4_294_967_296
/** Era 1 of NTP time starts at 2036-02-07T06:28:16Z: the 32-bit seconds wrap there. */
const ERA_1_UNIX_SECONDS = TWO_32 - UNIX_EPOCH_NTP_SECONDS

const ORIGINATE = 24
const RECEIVE = 32
const TRANSMIT = 40

/** The 8 bytes of the NTP timestamp of `unixMs`; `noise` (0..65535) fills the fraction's lowest 16 bits. */
export const ntpTimestamp = (unixMs: number, noise = 0): Uint8Array => {
  const seconds = Math.floor(unixMs / 1000)
  const fraction = Math.min(TWO_32 - 1, Math.floor(((unixMs - seconds * 1000) / 1000) * TWO_32))
  const ntpSeconds = (seconds + UNIX_EPOCH_NTP_SECONDS) % TWO_32
  const out = new Uint8Array(8)
  const view = new DataView(out.buffer)
  view.setUint32(0, ntpSeconds)
  view.setUint32(4, ((fraction & 0xffff0000) | (noise & 0xffff)) >>> 0)
  return out
}

/**
 * Unix milliseconds of the NTP timestamp at `at` in `packet`. RFC 4330 §3: with the top bit
 * of the seconds set the time lies in 1968–2036 (era 0), with it clear in 2036–2104 (era 1).
 */
export const unixMillisOf = (packet: Uint8Array, at: number): number => {
  const view = new DataView(packet.buffer, packet.byteOffset + at, 8)
  const seconds = view.getUint32(0)
  const fraction = view.getUint32(4)
  const unixSeconds = seconds >= 0x80000000 ? seconds - UNIX_EPOCH_NTP_SECONDS : seconds + ERA_1_UNIX_SECONDS
  return unixSeconds * 1000 + (fraction / TWO_32) * 1000
}

/** A client request (version 4, mode 3) whose transmit timestamp is `transmit`. */
export const encodeRequest = (transmit: Uint8Array): Uint8Array => {
  const packet = new Uint8Array(PACKET_BYTES)
  packet[0] = (0 << 6) | (4 << 3) | 3
  packet.set(transmit, TRANSMIT)
  return packet
}

export interface SntpReply {
  readonly stratum: number
  /** t2: when the server received the request (server clock, Unix ms). */
  readonly receiveMs: number
  /** t3: when the server sent the reply (server clock, Unix ms). */
  readonly transmitMs: number
}

const isZero = (packet: Uint8Array, at: number): boolean => packet.subarray(at, at + 8).every((b) => b === 0)

/** The reply to the request whose transmit timestamp was `sent`, or why it is not one. */
export const decodeReply = (packet: Uint8Array, sent: Uint8Array): SntpReply | string => {
  if (packet.length < PACKET_BYTES) return `a ${packet.length}-byte reply (an NTP packet has ${PACKET_BYTES})`
  const leap = packet[0]! >> 6
  const version = (packet[0]! >> 3) & 7
  const mode = packet[0]! & 7
  const stratum = packet[1]!
  if (mode !== 4) return `not a server reply (mode ${mode})`
  if (version < 3 || version > 4) return `NTP version ${version}`
  if (!packet.subarray(ORIGINATE, ORIGINATE + 8).every((b, i) => b === sent[i])) return "the reply does not answer this request (its originate timestamp differs)"
  if (stratum === 0) {
    const code = String.fromCharCode(...packet.subarray(12, 16)).replace(/[^\x20-\x7e]/g, "?")
    return `kiss-o'-death ${code}`
  }
  if (leap === 3 || stratum > 15) return `the server's clock is not synchronised (leap indicator ${leap}, stratum ${stratum})`
  if (isZero(packet, RECEIVE) || isZero(packet, TRANSMIT)) return "the reply carries no receive or transmit timestamp"
  return { stratum, receiveMs: unixMillisOf(packet, RECEIVE), transmitMs: unixMillisOf(packet, TRANSMIT) }
}

/** One server's answer: what the quorum rule reads. */
export interface SntpSample {
  readonly server: string
  /** Server clock minus local clock, ms: ((t2 − t1) + (t3 − t4)) / 2. */
  readonly offsetMs: number
  /** (t4 − t1) − (t3 − t2), ms, never below 0. */
  readonly roundTripMs: number
  readonly stratum: number
}

export class SntpError extends Data.TaggedError("SntpError")<{ readonly server: string; readonly reason: string }> {
  override get message() {
    return `${this.server}: ${this.reason}`
  }
}

export const serverLabel = (server: NtpServer): string => (server.host.includes(":") ? `[${server.host}]:${server.port}` : `${server.host}:${server.port}`)

const reasonOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** Local time in (fractional) Unix ms from the Effect clock. */
const nowMs = (clock: Clock.Clock): number => Number(clock.unsafeCurrentTimeNanos()) / 1e6

/** Asks `server` once; fails when it does not answer within `timeout` or answers with something else. */
export const query = (server: NtpServer, timeout: Duration.DurationInput): Effect.Effect<SntpSample, SntpError> => {
  const label = serverLabel(server)
  const fail = (reason: string) => new SntpError({ server: label, reason })
  return Effect.gen(function*() {
    const address = yield* Effect.tryPromise({ try: () => lookup(server.host), catch: (e) => fail(`cannot resolve ${server.host}: ${reasonOf(e)}`) })
    const clock = yield* Effect.clock
    return yield* Effect.async<SntpSample, SntpError>((resume) => {
      const socket = createSocket(address.family === 6 ? "udp6" : "udp4")
      let open = true
      const close = () => {
        if (open) {
          open = false
          socket.close()
        }
      }
      const finish = (result: Effect.Effect<SntpSample, SntpError>) => {
        close()
        resume(result)
      }
      const noise = new Uint16Array(1)
      randomFillSync(noise)
      const t1 = nowMs(clock)
      const sent = ntpTimestamp(t1, noise[0])
      socket.on("message", (message, from) => {
        const t4 = nowMs(clock)
        // Anything not from the server asked is not its answer: keep waiting.
        if (from.address !== address.address || from.port !== server.port) return
        const reply = decodeReply(new Uint8Array(message.buffer, message.byteOffset, message.length), sent)
        if (typeof reply === "string") return finish(Effect.fail(fail(reply)))
        finish(Effect.succeed({
          server: label,
          offsetMs: ((reply.receiveMs - t1) + (reply.transmitMs - t4)) / 2,
          roundTripMs: Math.max(0, (t4 - t1) - (reply.transmitMs - reply.receiveMs)),
          stratum: reply.stratum
        }))
      })
      socket.on("error", (e) => finish(Effect.fail(fail(reasonOf(e)))))
      try {
        socket.send(encodeRequest(sent), server.port, address.address)
      } catch (e) {
        finish(Effect.fail(fail(reasonOf(e))))
      }
      return Effect.sync(close)
    })
  }).pipe(
    Effect.timeoutFail({ duration: timeout, onTimeout: () => fail(`no answer within ${Duration.format(Duration.decode(timeout))}`) })
  )
}
