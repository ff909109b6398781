/**
 * Several `attestd serve` processes on ONE Postgres database with short
 * anchor and upgrade windows and one simulated calendar over HTTP: exactly one
 * instance anchors a window (one daily root per window, each batch in one day),
 * and each day moves to T2 once, with one t2_complete per attestation.
 * Postgres only (under CI=true `dialects()` insists on it).
 */
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { createPgDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import {
  attestLoad,
  createKeyCli,
  freePort,
  newAckLog,
  requireDist,
  type ServeEnv,
  type ServeProcess,
  sleep,
  startServe,
  waitFor,
  withDb
} from "../helpers/process.js"

const INSTANCES = 3
const hasPg = (await dialects()).includes("pg")

describe.skipIf(!hasPg)(`${INSTANCES} instances anchoring one Postgres database`, () => {
  let db: TestDatabase | undefined
  let calendar: Awaited<ReturnType<typeof startSimulatedCalendarServer>> | undefined
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill("SIGKILL")))
    await calendar?.close()
    await db?.drop()
  })

  it("one daily root per window, each batch in exactly one day, each day confirmed once", async () => {
    requireDist()
    db = await createPgDatabase()
    calendar = await startSimulatedCalendarServer()
    const envs: Array<ServeEnv> = []
    for (let i = 0; i < INSTANCES; i++) {
      const dataDir = join(db.dataDir, `instance-${i}`)
      mkdirSync(dataDir, { recursive: true })
      envs.push({
        databaseUrl: db.url,
        dataDir,
        port: await freePort(),
        sealInterval: "250ms",
        extra: {
          ATTESTD_ANCHOR_INTERVAL: "1s",
          ATTESTD_OTS_UPGRADE_INTERVAL: "250ms",
          ATTESTD_OTS_CALENDARS: calendar.url,
          ATTESTD_BITCOIN_SOURCES: calendar.url
        }
      })
    }
    procs.push(...(await Promise.all(envs.map((e) => startServe(e)))))
    const key = await createKeyCli(envs[0]!)

    const log = newAckLog()
    let stop = false
    const load = attestLoad({ urls: () => procs.map((p) => p.url), key, stop: () => stop, log, concurrency: 4, batchSize: 10 })
    await sleep(3_000)
    stop = true
    await load
    expect(log.failures).toEqual([])

    // Let every batch reach a daily root, then confirm them all.
    // One statement, so one snapshot: read apart, a batch sealed between the two reads would be
    // neither T0 nor seen unanchored, and its day could be built after the block below is mined.
    await waitFor("every batch anchored", async () =>
      withDb(db!.url, async (query) =>
        (await query(`SELECT ((SELECT COUNT(*) FROM batches WHERE daily_root_id IS NULL)
          + (SELECT COUNT(*) FROM attestations WHERE level = 'T0'))::int AS n`))[0]!.n === 0), 20_000, 200)
    // Every day has a submission the calendar answered: a day whose submission row is not written
    // yet would otherwise pass for submitted, and miss the one block mined next.
    await waitFor("every day submitted", async () =>
      withDb(db!.url, async (query) =>
        (await query(`SELECT COUNT(*)::int AS n FROM daily_roots d WHERE NOT EXISTS
          (SELECT 1 FROM calendar_submissions s WHERE s.daily_root_id = d.id AND s.status <> 'unsubmitted')`))[0]!.n === 0), 10_000, 200)
    calendar.mine()
    const minedAt = Date.now()
    await waitFor("every attestation at T2", async () =>
      withDb(db!.url, async (query) => (await query("SELECT COUNT(*)::int AS n FROM attestations WHERE level <> 'T2'"))[0]!.n === 0), 45_000, 200)
      .catch(async (e: Error) => {
        // what the database and the instances say, for the one who reads the failure
        const days = await withDb(db!.url, (query) => query("SELECT id, status FROM daily_roots ORDER BY id"))
        const subs = await withDb(db!.url, (query) => query("SELECT daily_root_id, status, last_error FROM calendar_submissions ORDER BY daily_root_id"))
        const said = procs.map((p, i) =>
          `instance ${i}:\n` + p.output().split("\n").filter((l) => /daily root|upgrade|T2|calendar|bitcoin|warn/i.test(l)).slice(-15).join("\n")
        )
        throw new Error(`${e.message} (${Date.now() - minedAt} ms after mining)\ndays ${JSON.stringify(days)}\nsubmissions ${JSON.stringify(subs)}\n${said.join("\n")}`)
      })
    console.log(`[multi-anchor] every attestation at T2 ${Date.now() - minedAt} ms after mining`)

    await withDb(db.url, async (query) => {
      expect(await query("SELECT window_end FROM daily_roots GROUP BY window_end HAVING COUNT(*) > 1")).toEqual([])
      expect(await query("SELECT id FROM batches WHERE daily_root_id IS NULL")).toEqual([])
      expect(await query(`SELECT d.id FROM daily_roots d LEFT JOIN batches b ON b.daily_root_id = d.id
        GROUP BY d.id, d.batch_count HAVING COUNT(b.id) <> d.batch_count`)).toEqual([])
      expect(await query(`SELECT attestation_seq FROM outbox WHERE event_type = 't2_complete'
        GROUP BY attestation_seq HAVING COUNT(*) <> 1`)).toEqual([])
      const [counts] = await query(`SELECT (SELECT COUNT(*)::int FROM attestations) AS a,
        (SELECT COUNT(*)::int FROM outbox WHERE event_type = 't2_complete') AS e,
        (SELECT COUNT(*)::int FROM daily_roots) AS d`)
      expect(counts!.e).toBe(counts!.a)
      expect(counts!.a).toBe(log.acked.size)
      const days = counts!.d as number
      await Promise.all(procs.map((p) => p.kill("SIGTERM")))
      // Each window's root was built by exactly one instance.
      const anchoredBy = procs.map((p) => (p.output().match(/daily root \d+ over/g) ?? []).length)
      expect(anchoredBy.reduce((x, y) => x + y, 0)).toBe(days)
      const confirmedBy = procs.map((p) => (p.output().match(/daily root \d+ confirmed/g) ?? []).length)
      expect(confirmedBy.reduce((x, y) => x + y, 0)).toBe(days)
      console.log(`[multi-anchor] ${counts!.a} attestations, ${days} daily roots; anchored per instance ${anchoredBy.join("/")}`)
    })
  }, 90_000)
})
