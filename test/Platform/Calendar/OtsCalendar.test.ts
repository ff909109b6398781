import { createHash } from "node:crypto"
import { createServer, type IncomingHttpHeaders } from "node:http"
import type { AddressInfo } from "node:net"
import { createRequire } from "node:module"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import {
  Attestations,
  bitcoinAttestations,
  bytesToHex,
  chain,
  graft,
  isComplete,
  leaf,
  merkleStepsToOps,
  parseDetachedFile,
  parseTimestamp,
  pendingAttestations,
  replay,
  serializeDetachedFile,
  serializeTimestamp
} from "../../../src/Domain/Ots.js"
import { CalendarError, layerHttp, OtsCalendar } from "../../../src/Platform/Calendar/OtsCalendar.js"
import { startSimulatedCalendarServer } from "../../helpers/simulatedCalendarServer.js"

const require = createRequire(import.meta.url)
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const OpenTimestamps: any = require("opentimestamps")

const sha256 = (b: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest())
const hex = bytesToHex
const digestOf = (s: string) => sha256(Buffer.from(s))

const simServer = Effect.acquireRelease(
  Effect.promise(() => startSimulatedCalendarServer()),
  (s) => Effect.promise(() => s.close())
)

const calendar = (urls: ReadonlyArray<string>, timeoutMs?: number) =>
  Effect.provide(OtsCalendar, layerHttp(timeoutMs === undefined ? { urls } : { urls, timeoutMs }))

/** A throwaway HTTP server with a fixed handler (for protocol / error-path checks). */
const rawServer = (handler: (req: { method: string; url: string; headers: IncomingHttpHeaders; body: Buffer }) => {
  status: number
  body: Uint8Array | string
}) =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ url: string; close: () => Promise<void> }>((resolve) => {
          const server = createServer((req, res) => {
            const chunks: Buffer[] = []
            req.on("data", (c: Buffer) => chunks.push(c))
            req.on("end", () => {
              const out = handler({
                method: req.method ?? "",
                url: req.url ?? "",
                headers: req.headers,
                body: Buffer.concat(chunks)
              })
              res.writeHead(out.status, { "Content-Type": "application/octet-stream" })
              res.end(out.body)
            })
          })
          server.listen(0, "127.0.0.1", () =>
            resolve({
              url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
              close: () =>
                new Promise<void>((r) => {
                  server.close(() => r())
                  server.closeAllConnections()
                })
            })
          )
        })
    ),
    (s) => Effect.promise(() => s.close())
  )

describe("OtsCalendar HTTP layer against the simulated calendar server", () => {
  it.scopedLive("submit → pending timestamp; upgrade null before mining, proof after; merged proof reaches the block", () =>
    Effect.gen(function* () {
      const server = yield* simServer
      const cal = yield* calendar([server.url])
      expect(cal.simulated).toBe(false)
      expect(cal.urls).toStrictEqual([server.url])

      const digest = digestOf("daily root 2025-01-01")
      const pendingBytes = yield* cal.submit(server.url, digest)
      expect(server.submissions).toBe(1)
      const pending = parseTimestamp(pendingBytes, digest)
      expect(isComplete(pending)).toBe(false)
      const ends = replay(pending, digest)
      expect(ends).toHaveLength(1)
      expect(ends[0]!.attestation).toStrictEqual(Attestations.pending(server.url))
      // like the real calendars: append a 16-byte nonce, then sha256
      expect(pending.ops.map(([op]) => op._tag)).toStrictEqual(["append"])
      const [p] = pendingAttestations(pending, digest)
      expect(p!.uri).toBe(server.url)

      expect(yield* cal.upgrade(server.url, p!.commitment)).toBeNull()
      const block = server.mine()
      const upgradeBytes = yield* cal.upgrade(server.url, p!.commitment)
      expect(upgradeBytes).not.toBeNull()

      const full = graft(pending, digest, p!.commitment, parseTimestamp(upgradeBytes!, p!.commitment))
      expect(isComplete(full)).toBe(true)
      const btc = bitcoinAttestations(full, digest)
      expect(btc).toHaveLength(1)
      expect(btc[0]!.height).toBe(block.height)
      expect(hex(btc[0]!.commitment)).toBe(block.merkleRoot)
      expect(server.blockHeaders().get(block.height)?.merkleRoot).toBe(block.merkleRoot)
      expect(server.chain.headers().get(block.height)?.merkleRoot).toBe(block.merkleRoot)
      // the upgrade answer itself carries no pending attestation
      expect(replay(parseTimestamp(upgradeBytes!, p!.commitment), p!.commitment).map((r) => r.attestation._tag)).toStrictEqual([
        "bitcoin"
      ])
      // an unknown commitment is just "not found" (null), not an error
      expect(yield* cal.upgrade(server.url, new Uint8Array(32))).toBeNull()
    })
  )

  it.scopedLive("several digests in one block all replay to the same header merkle root", () =>
    Effect.gen(function* () {
      const server = yield* simServer
      const cal = yield* calendar([server.url])
      const digests = Array.from({ length: 5 }, (_, i) => digestOf(`batch ${i}`))
      const pendings = yield* Effect.forEach(digests, (d) => cal.submit(server.url, d), { concurrency: "unbounded" })
      const block = server.mine()
      for (const [i, d] of digests.entries()) {
        const ts = parseTimestamp(pendings[i]!, d)
        const [p] = pendingAttestations(ts, d)
        const up = yield* cal.upgrade(server.url, p!.commitment)
        const [b] = bitcoinAttestations(graft(ts, d, p!.commitment, parseTimestamp(up!, p!.commitment)), d)
        expect(b!.height).toBe(block.height)
        expect(hex(b!.commitment)).toBe(block.merkleRoot)
      }
      // a later submission lands in a later block
      const late = digestOf("late")
      const lateTs = parseTimestamp(yield* cal.submit(server.url, late), late)
      const [lp] = pendingAttestations(lateTs, late)
      expect(yield* cal.upgrade(server.url, lp!.commitment)).toBeNull()
      const block2 = server.mine()
      expect(block2.height).toBeGreaterThan(block.height)
      const up = yield* cal.upgrade(server.url, lp!.commitment)
      expect(bitcoinAttestations(parseTimestamp(up!, lp!.commitment), lp!.commitment)[0]!.height).toBe(block2.height)
    })
  )

  it.scopedLive("the opentimestamps package agrees on a full detached file (digest → merkle → calendar → bitcoin)", () =>
    Effect.gen(function* () {
      const server = yield* simServer
      const cal = yield* calendar([server.url])

      // T1 batch tree then T2 daily tree, both Merkle v2: node = sha256(0x01 ‖ left ‖ right)
      const node = (l: Uint8Array, r: Uint8Array) => sha256(Buffer.concat([Uint8Array.of(1), l, r]))
      const attestationDigest = digestOf("a document")
      const batchSibling = digestOf("other attestation")
      const batchRoot = node(attestationDigest, batchSibling)
      const otherBatch = digestOf("another batch root")
      const dailyRoot = node(otherBatch, batchRoot)
      const merkleOps = merkleStepsToOps([
        { hash: hex(batchSibling), position: "right" },
        { hash: hex(otherBatch), position: "left" }
      ])

      const pending = parseTimestamp(yield* cal.submit(server.url, dailyRoot), dailyRoot)
      const [p] = pendingAttestations(pending, dailyRoot)
      const block = server.mine()
      const upgrade = parseTimestamp((yield* cal.upgrade(server.url, p!.commitment))!, p!.commitment)
      const calendarTs = graft(pending, dailyRoot, p!.commitment, upgrade)
      const file = { fileHashOp: "sha256" as const, digest: attestationDigest, timestamp: chain(merkleOps, calendarTs) }
      const bytes = serializeDetachedFile(file)
      expect(parseDetachedFile(bytes)).toStrictEqual(file)

      const theirs = OpenTimestamps.DetachedTimestampFile.deserialize(Array.from(bytes))
      expect(hex(Uint8Array.from(theirs.fileDigest()))).toBe(hex(attestationDigest))
      expect(hex(Uint8Array.from(theirs.serializeToBytes()))).toBe(hex(bytes))
      expect(theirs.timestamp.isTimestampComplete()).toBe(true)
      const found: Array<[string, string]> = []
      theirs.timestamp.allAttestations().forEach((att: { height?: number; uri?: string }, msg: number[]) => {
        found.push([hex(Uint8Array.from(msg)), att.height !== undefined ? `bitcoin:${att.height}` : `pending:${att.uri}`])
      })
      expect(found.sort()).toStrictEqual(
        [
          [block.merkleRoot, `bitcoin:${block.height}`],
          [hex(p!.commitment), `pending:${server.url}`]
        ].sort()
      )
      // and ours
      const [ours] = bitcoinAttestations(file.timestamp, attestationDigest)
      expect(ours).toStrictEqual({ height: block.height, commitment: Uint8Array.from(Buffer.from(block.merkleRoot, "hex")) })
    })
  )
})

describe("OtsCalendar HTTP failure modes", () => {
  it.scopedLive("a dead calendar fails fast with CalendarError and recovers when back", () =>
    Effect.gen(function* () {
      const server = yield* simServer
      const cal = yield* calendar([server.url], 2_000)
      server.setDown(true)
      const r = yield* Effect.either(cal.submit(server.url, digestOf("x")))
      const u = yield* Effect.either(cal.upgrade(server.url, digestOf("x")))
      expect(Either.isLeft(r) && r.left instanceof CalendarError && r.left.url === server.url).toBe(true)
      expect(Either.isLeft(u) && u.left._tag === "CalendarError").toBe(true)
      // fast: the refusal itself is the error, not the 2 s timeout running out
      if (Either.isLeft(r)) expect(r.left.message).not.toMatch(/timed out/)
      if (Either.isLeft(u)) expect(u.left.message).not.toMatch(/timed out/)
      server.setDown(false)
      expect((yield* cal.submit(server.url, digestOf("x"))).length).toBeGreaterThan(0)
    })
  )

  it.scopedLive("a slow calendar times out without holding up a good one run concurrently", () =>
    Effect.gen(function* () {
      const good = yield* simServer
      const slow = yield* simServer
      const slowDelayMs = 5_000
      slow.setSlow(slowDelayMs)
      const cal = yield* calendar([good.url, slow.url], 400)
      const digest = digestOf("daily root")
      // order of completion, not wall-clock bounds: the good calendar answers before the slow
      // one's timeout fires, and the slow one ends by our 400 ms timeout, not by its 5 s answer
      const finished: Array<string> = []
      const [g, s] = yield* Effect.all(
        [
          cal.submit(good.url, digest).pipe(Effect.ensuring(Effect.sync(() => finished.push("good")))),
          Effect.either(cal.submit(slow.url, digest)).pipe(Effect.ensuring(Effect.sync(() => finished.push("slow"))))
        ],
        { concurrency: "unbounded" }
      )
      expect(replay(parseTimestamp(g, digest), digest)[0]!.attestation).toStrictEqual(Attestations.pending(good.url))
      expect(finished).toStrictEqual(["good", "slow"])
      expect(Either.isLeft(s)).toBe(true)
      if (Either.isLeft(s)) {
        expect(s.left.url).toBe(slow.url)
        expect(s.left.message).toMatch(/timed out after 400 ms/)
      }
    })
  )

  it.scopedLive("sends the reference client's headers and raw body; rejects garbage, oversized and 5xx answers", () =>
    Effect.gen(function* () {
      const digest = digestOf("headers")
      let seen: { method: string; url: string; headers: IncomingHttpHeaders; body: Buffer } | undefined
      const good = serializeTimestamp(leaf(Attestations.pending("https://cal.example")))
      const ok = yield* rawServer((req) => {
        seen = req
        return { status: 200, body: good }
      })
      const cal = yield* calendar([ok.url + "/"], 2_000)
      expect(hex(yield* cal.submit(ok.url + "/", digest))).toBe(hex(good))
      expect(seen!.method).toBe("POST")
      expect(seen!.url).toBe("/digest")
      expect(seen!.headers["accept"]).toBe("application/vnd.opentimestamps.v1")
      expect(seen!.headers["content-type"]).toBe("application/x-www-form-urlencoded")
      expect(hex(new Uint8Array(seen!.body))).toBe(hex(digest))
      yield* cal.upgrade(ok.url, digest)
      expect(seen!.method).toBe("GET")
      expect(seen!.url).toBe(`/timestamp/${hex(digest)}`)
      expect(seen!.headers["accept"]).toBe("application/vnd.opentimestamps.v1")

      const garbage = yield* rawServer(() => ({ status: 200, body: Uint8Array.of(0x09, 0x09) }))
      const huge = yield* rawServer(() => ({ status: 200, body: new Uint8Array(70 * 1024) }))
      const broken = yield* rawServer(() => ({ status: 500, body: "boom" }))
      const all = yield* calendar([garbage.url, huge.url, broken.url], 2_000)
      const e1 = yield* Effect.flip(all.submit(garbage.url, digest))
      expect(e1.message).toMatch(/invalid timestamp/)
      const e2 = yield* Effect.flip(all.upgrade(garbage.url, digest))
      expect(e2.message).toMatch(/invalid timestamp/)
      const e3 = yield* Effect.flip(all.submit(huge.url, digest))
      expect(e3.message).toMatch(/too large/)
      const e4 = yield* Effect.flip(all.upgrade(broken.url, digest))
      expect(e4.message).toMatch(/HTTP 500/)
      const e5 = yield* Effect.flip(all.submit(broken.url, new Uint8Array(65)))
      expect(e5.message).toMatch(/1\.\.64 bytes/)
    })
  )
})
