/**
 * kill -9 during anchoring and OTS upgrading, on both stores: a child
 * `node dist/cli.mjs serve` with short windows (seal 200 ms, anchor 500 ms,
 * upgrade 200 ms) against a simulated calendar over HTTP (in this process, so
 * it outlives the child), attested continuously while blocks are mined at
 * random; the child is SIGKILLed at random moments (every other one just after
 * an anchor boundary, when the anchorer writes and submits) and restarted.
 * After every kill, and at the end (server left running, blocks mined, until
 * everything is T2), the T1 and T2 invariants are checked straight from the
 * tables.
 */
import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { checkAnchoringInvariants, poll, sleep, withDb } from "../helpers/anchoring.js"
import {
  attestLoad,
  BIN,
  checkSealingInvariants,
  createKeyCli,
  freePort,
  newAckLog,
  REPO_ROOT,
  type ServeEnv,
  type ServeProcess,
  startServe
} from "../helpers/process.js"

/** The bounded run of `npm test`: kills 1 and 3 just after an anchor boundary, 2 at a random moment. */
const ITERATIONS = 3
const ANCHOR_MS = 500

const ensureDist = (): void => {
  if (!existsSync(BIN)) execFileSync("npx", ["tsc", "-p", "tsconfig.build.json"], { cwd: REPO_ROOT, stdio: "inherit" })
}

const checkAll = async (db: TestDatabase, cal: SimulatedCalendarServer, acked: ReadonlyMap<string, string>, when: string) => {
  const t2 = await checkAnchoringInvariants(db.url, { calendars: [cal.url], blockHeaders: cal.blockHeaders() })
  expect(t2.violations, `T2 invariants ${when}`).toEqual([])
  const t1 = await checkSealingInvariants(db.url)
  expect(t1.violations, `T1 invariants ${when}`).toEqual([])
  // nothing acknowledged is lost, and it kept its id
  const lost = [...acked].filter(([hash, id]) => t1.ids.get(hash) !== id)
  expect(lost, `acknowledged attestations missing ${when}`).toEqual([])
  return t2
}

for (const dialect of await dialects()) {
  describe(`kill -9 during anchoring and upgrading (${dialect})`, () => {
    it(`${ITERATIONS} SIGKILLs at random moments lose nothing; T2 invariants hold after each; everything reaches T2`, async () => {
      ensureDist()
      const cal = await startSimulatedCalendarServer()
      const db = await createDatabase(dialect)
      const base: Omit<ServeEnv, "port"> = {
        databaseUrl: db.url,
        dataDir: db.dataDir,
        sealInterval: "200ms",
        extra: {
          ATTESTD_ANCHOR_INTERVAL: `${ANCHOR_MS}ms`,
          ATTESTD_OTS_UPGRADE_INTERVAL: "200ms",
          ATTESTD_OTS_CALENDARS: cal.url,
          ATTESTD_BITCOIN_SOURCES: cal.url,
          ATTESTD_DEFAULT_RATE_LIMIT: "1000000"
        }
      }
      let proc: ServeProcess | undefined
      const miner = setInterval(() => {
        if (Math.random() < 0.6) cal.mine()
      }, 250)
      const log = newAckLog()
      const states: Array<string> = [] // T0/T1/T2, confirmed/all days, unanswered submissions — after each kill
      const started = Date.now()
      try {
        const key = await createKeyCli({ ...base, port: await freePort() }, "attest,batch")
        for (let i = 0; i < ITERATIONS; i++) {
          proc = await startServe({ ...base, port: await freePort() })
          const url = proc.url
          let stop = false
          const load = attestLoad({ urls: () => [url], key, stop: () => stop, log, concurrency: 2, batchSize: 10 })
          await sleep(600 + Math.random() * 1400)
          if (i % 2 === 0) {
            // just after an anchor boundary: the anchorer is creating / submitting the day
            const t = Date.now()
            await sleep(Math.ceil(t / ANCHOR_MS) * ANCHOR_MS - t + Math.random() * 30)
          }
          const exit = await proc.kill("SIGKILL")
          expect(exit.signal).toBe("SIGKILL")
          stop = true
          await load
          const snap = await checkAll(db, cal, log.acked, `after kill ${i + 1}`)
          states.push(`${snap.byLevel.T0}/${snap.byLevel.T1}/${snap.byLevel.T2} days ${snap.confirmedRoots}/${snap.dailyRoots} unsubmitted ${snap.unsubmitted}`)
        }

        // Left running with blocks mined: everything reaches T2.
        proc = await startServe({ ...base, port: await freePort() })
        const draining = Date.now()
        expect(log.acked.size).toBeGreaterThan(0)
        await poll(
          "every attestation at T2",
          () =>
            withDb(db.url, async (q) => {
              const rows = await q("SELECT level, COUNT(*) AS n FROM attestations GROUP BY level")
              const notT2 = rows.filter((r) => r.level !== "T2").reduce((s, r) => s + Number(r.n), 0)
              return notT2 === 0 && rows.length > 0
            }),
          20_000,
          200
        )
        const drainedMs = Date.now() - draining
        await proc.kill("SIGKILL")
        const final = await checkAll(db, cal, log.acked, "at the end")
        expect(final.byLevel).toEqual({ T0: 0, T1: 0, T2: final.attestations })
        expect(final.attestations).toBeGreaterThanOrEqual(log.acked.size)
        expect(final.confirmedRoots).toBe(final.dailyRoots)
        expect(final.anchoredBatches).toBe(final.batches)
        console.log(
          `[kill ${dialect}] ${ITERATIONS} kills in ${Date.now() - started} ms: ${final.attestations} attestations, ${final.batches} batches, ` +
            `${final.dailyRoots} daily roots, ${final.attempts} submission attempts, ${cal.submissions} calendar submissions, ` +
            `${cal.blockHeaders().size} blocks; ${log.failures.length} failed requests; all at T2 ${drainedMs} ms after the last start; ` +
            `after each kill: ${states.join(" | ")}`
        )
      } catch (e) {
        if (proc) console.error(`--- last server output ---\n${proc.output()}`)
        throw e
      } finally {
        clearInterval(miner)
        await proc?.kill("SIGKILL")
        await cal.close()
        await db.drop()
      }
    }, 180_000)
  })
}
