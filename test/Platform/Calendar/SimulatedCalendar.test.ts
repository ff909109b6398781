import { blockHash, headerBytes, meetsTarget, parseHeader, REGTEST_BITS } from "../../../src/Domain/BitcoinHeader.js"
import { createHash } from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import {
  Attestations,
  bitcoinAttestations,
  bytesToHex,
  graft,
  parseTimestamp,
  pendingAttestations,
  replay
} from "../../../src/Domain/Ots.js"
import { OtsCalendar } from "../../../src/Platform/Calendar/OtsCalendar.js"
import { layerSimulated, makeSimulatedCalendar, SIMULATED_CALENDAR_LABEL, SIMULATED_CALENDAR_URL, SIMULATED_START_HEIGHT, SimulatedBitcoinChain } from "../../../src/Platform/Calendar/SimulatedCalendar.js"
import { startSimulatedCalendarServer } from "../../helpers/simulatedCalendarServer.js"

const sha256 = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest())
const digestOf = (s: string) => sha256(Buffer.from(s))

/** submit + parse + commitment */
const submitted = (digest: Uint8Array) =>
  Effect.gen(function* () {
    const cal = yield* OtsCalendar
    const bytes = yield* cal.submit(SIMULATED_CALENDAR_URL, digest)
    const ts = parseTimestamp(bytes, digest)
    const [p] = pendingAttestations(ts, digest)
    return { ts, commitment: p!.commitment, uri: p!.uri }
  })

describe("in-process simulated calendar (demo mode)", () => {
  it.effect("confirms once confirmDelayMs has elapsed on the Effect Clock", () => {
    const chain = new SimulatedBitcoinChain()
    return Effect.gen(function* () {
      const cal = yield* OtsCalendar
      expect(cal.simulated).toBe(true)
      expect(cal.urls).toStrictEqual([SIMULATED_CALENDAR_URL])

      const d1 = digestOf("day 1")
      const s1 = yield* submitted(d1)
      expect(s1.uri).toBe(SIMULATED_CALENDAR_URL)
      expect(replay(s1.ts, d1).map((r) => r.attestation)).toStrictEqual([Attestations.pending(SIMULATED_CALENDAR_URL)])

      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, s1.commitment)).toBeNull()
      yield* TestClock.adjust("30 seconds")
      const d2 = digestOf("day 2")
      const s2 = yield* submitted(d2)
      yield* TestClock.adjust("29 seconds")
      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, s1.commitment)).toBeNull()
      yield* TestClock.adjust("1 second")

      const up1 = yield* cal.upgrade(SIMULATED_CALENDAR_URL, s1.commitment)
      expect(up1).not.toBeNull()
      const full1 = graft(s1.ts, d1, s1.commitment, parseTimestamp(up1!, s1.commitment))
      const [b1] = bitcoinAttestations(full1, d1)
      expect(b1!.height).toBeGreaterThanOrEqual(SIMULATED_START_HEIGHT)
      const header = chain.headers().get(b1!.height)
      expect(header?.merkleRoot).toBe(bytesToHex(b1!.commitment))
      expect(header?.time).toBe(60) // TestClock starts at 0
      // idempotent: the same proof again
      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, s1.commitment)).toStrictEqual(up1)

      // the second submission was not old enough for that block
      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, s2.commitment)).toBeNull()
      yield* TestClock.adjust("30 seconds")
      const up2 = yield* cal.upgrade(SIMULATED_CALENDAR_URL, s2.commitment)
      const [b2] = bitcoinAttestations(graft(s2.ts, d2, s2.commitment, parseTimestamp(up2!, s2.commitment)), d2)
      expect(b2!.height).toBeGreaterThan(b1!.height)
      expect(chain.headers().get(b2!.height)?.merkleRoot).toBe(bytesToHex(b2!.commitment))
    }).pipe(Effect.provide(layerSimulated({ confirmDelayMs: 60_000, chain })))
  })

  it.effect("an explicit clock function can drive it; wrong URL and bad digests are CalendarErrors", () =>
    Effect.gen(function* () {
      let now = 1_700_000_000_000
      const chain = new SimulatedBitcoinChain()
      const cal = makeSimulatedCalendar({ confirmDelayMs: 1_000, clock: () => now, chain })
      expect(cal.label).toBe(SIMULATED_CALENDAR_LABEL)
      const d = digestOf("clocked")
      const ts = parseTimestamp(yield* cal.submit(SIMULATED_CALENDAR_URL, d), d)
      const [p] = pendingAttestations(ts, d)
      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, p!.commitment)).toBeNull()
      now += 1_000
      const up = yield* cal.upgrade(SIMULATED_CALENDAR_URL, p!.commitment)
      const [b] = bitcoinAttestations(parseTimestamp(up!, p!.commitment), p!.commitment)
      const mined = cal.blockHeaders().get(b!.height)!
      expect(mined).toStrictEqual({
        height: b!.height,
        merkleRoot: bytesToHex(b!.commitment),
        time: 1_700_000_001,
        calendar: SIMULATED_CALENDAR_URL,
        hash: blockHash(headerBytes(mined.header)),
        header: mined.header
      })
      // a real header: merkle root = the attested message, regtest nBits met, chained to the previous simulated block
      const fields = parseHeader(mined.header)
      expect([fields.merkleRoot, fields.time, fields.bits]).toEqual([bytesToHex(b!.commitment), 1_700_000_001, REGTEST_BITS])
      expect(meetsTarget(headerBytes(mined.header))).toBe(true)
      const parent = chain.headers().get(b!.height - 1)
      expect(fields.prevBlockHash).toBe(parent === undefined ? "00".repeat(32) : parent.hash)

      const wrong = yield* Effect.flip(cal.submit("https://a.example", d))
      expect(wrong._tag).toBe("CalendarError")
      expect((yield* Effect.flip(cal.submit(SIMULATED_CALENDAR_URL, new Uint8Array(0))))._tag).toBe("CalendarError")
      expect(yield* cal.upgrade(SIMULATED_CALENDAR_URL, new Uint8Array(32))).toBeNull()
    })
  )
})

describe("simulated calendar HTTP server", () => {
  it.live("speaks the calendar protocol and labels itself simulated", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startSimulatedCalendarServer())
      try {
        const root = yield* Effect.promise(() => fetch(`${server.url}/`).then((r) => r.text()))
        expect(root).toContain("SIMULATED")
        const post = yield* Effect.promise(() =>
          fetch(`${server.url}/digest`, { method: "POST", body: digestOf("p") }).then(async (r) => ({
            status: r.status,
            type: r.headers.get("content-type"),
            body: new Uint8Array(await r.arrayBuffer())
          }))
        )
        expect(post.status).toBe(200)
        expect(post.type).toBe("application/octet-stream")
        expect(server.submissions).toBe(1)
        const [p] = pendingAttestations(parseTimestamp(post.body, digestOf("p")), digestOf("p"))
        const status = (path: string) => Effect.promise(() => fetch(`${server.url}${path}`).then((r) => r.status))
        expect(yield* status(`/timestamp/${bytesToHex(p!.commitment)}`)).toBe(404)
        expect(yield* status(`/timestamp/xyz`)).toBe(404)
        expect(yield* status(`/timestamp/abc`)).toBe(400)
        expect(yield* status(`/nope`)).toBe(404)
        const tooLong = yield* Effect.promise(() =>
          fetch(`${server.url}/digest`, { method: "POST", body: new Uint8Array(65) }).then((r) => r.status)
        )
        expect(tooLong).toBe(400)
        server.mine()
        expect(yield* status(`/timestamp/${bytesToHex(p!.commitment)}`)).toBe(200)
      } finally {
        yield* Effect.promise(() => server.close())
      }
    })
  )
})
