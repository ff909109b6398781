/**
 * Crash safety of T1 sealing on both stores: `attestd serve` (a real child
 * process, 200 ms windows, embedded demo TSA) is SIGKILLed at random moments
 * while clients attest continuously, then restarted, N times. Afterwards the
 * tables must satisfy every T1 invariant (checked straight from the database
 * with an independent Merkle v2 implementation), every acknowledged hash must
 * exist exactly once with the id the client was given, and after the last
 * restart every attestation must reach T1.
 *
 * N = 3 here (the bounded run of `npm test`; each kill lands at a random moment
 * within 650 ms of a fresh acknowledgement); `node scripts/kill-loop.mjs` runs the
 * long version (KILL_LOOP_ITERATIONS, default 50).
 */
import { afterAll, describe, expect, it } from "vitest"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import {
  attestLoad,
  checkSealingInvariants,
  createKeyCli,
  freePort,
  newAckLog,
  requireDist,
  type ServeEnv,
  type ServeProcess,
  sleep,
  startServe,
  waitFor
} from "../helpers/process.js"

const ITERATIONS = 3

for (const dialect of await dialects()) {
  describe(`kill -9 while sealing (${dialect})`, () => {
    const cleanup: Array<() => Promise<unknown>> = []
    afterAll(async () => {
      for (const f of cleanup.reverse()) await f().catch(() => undefined)
    })

    it(`survives ${ITERATIONS} SIGKILLs: invariants hold, acknowledged hashes kept, everything sealed after restart`, async () => {
      requireDist()
      const started = Date.now()
      const db: TestDatabase = await createDatabase(dialect)
      cleanup.push(() => db.drop())
      const env: ServeEnv = { databaseUrl: db.url, dataDir: db.dataDir, port: await freePort(), sealInterval: "200ms" }
      const key = await createKeyCli(env)
      const log = newAckLog()
      let current: ServeProcess | undefined
      cleanup.push(async () => current?.kill("SIGKILL"))
      const kills: Array<number> = []

      for (let i = 0; i < ITERATIONS; i++) {
        current = await startServe(env)
        const server = current
        let stop = false
        const ackedBefore = log.acked.size
        const load = attestLoad({ urls: () => [server.url], key, stop: () => stop, log, concurrency: 3, batchSize: 20 })
        // Kill while the load is being acknowledged (a loaded machine may take a while to answer the first one).
        await waitFor("a first acknowledgement from this start", async () => log.acked.size > ackedBefore, 30_000, 20)
        const delay = Math.floor(Math.random() * 650)
        kills.push(delay)
        await sleep(delay)
        const exit = await server.kill("SIGKILL")
        expect(exit.signal).toBe("SIGKILL")
        stop = true
        await load
        // Whatever the moment of the kill: no partial batch, no orphan event.
        const snap = await checkSealingInvariants(db.url)
        expect(snap.violations, `after kill ${i + 1} (${delay} ms)`).toEqual([])
      }
      expect(kills.length).toBe(ITERATIONS)
      expect(log.acked.size).toBeGreaterThan(0)

      // Last restart: everything left at T0 is sealed within a few windows.
      current = await startServe(env)
      const last = current
      await waitFor("no attestation left at T0", async () => {
        const res = await fetch(`${last.url}/v1/stats`)
        const stats = (await res.json()) as { by_level: { T0: number } }
        return stats.by_level.T0 === 0
      }, 15_000, 100)
      await last.kill("SIGTERM")

      const snap = await checkSealingInvariants(db.url)
      expect(snap.violations).toEqual([])
      expect(snap.byLevel.T0).toBe(0)
      expect(snap.byLevel.T1).toBe(snap.attestations)
      expect(snap.batches).toBeGreaterThan(0)
      const missing: Array<string> = []
      for (const [hash, id] of log.acked) {
        if (snap.hashCounts.get(hash) !== 1) missing.push(`${hash}: stored ${snap.hashCounts.get(hash) ?? 0} times`)
        else if (snap.ids.get(hash) !== id) missing.push(`${hash}: acknowledged as ${id}, stored as ${snap.ids.get(hash)}`)
      }
      expect(missing).toEqual([])
      // Only what was sent can exist.
      expect(snap.attestations).toBeLessThanOrEqual(log.sent)
      console.log(
        `[kill ${dialect}] ${kills.length} kills after ${kills.join(",")} ms; ${log.acked.size} acknowledged, ` +
          `${snap.attestations} stored, ${snap.batches} batches, ${log.failures.length} failed requests, ${Date.now() - started} ms`
      )
    }, 180_000)
  })
}
