/**
 * Graceful shutdown (issue 14 §4): `attestd serve` (a real child process, 200 ms
 * seal windows so a seal may be running) gets SIGTERM while 24 keep-alive
 * clients attest as fast as they can. Every request whose bytes were written
 * before the signal must get a complete 200/201 answer (no reset, no hang);
 * the process exits 0 within ATTESTD_SHUTDOWN_TIMEOUT; afterwards every T1
 * invariant holds and every acknowledged hash is stored once under its id.
 */
import { request, Agent } from "node:http"
import { afterAll, describe, expect, it } from "vitest"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { checkSealingInvariants, createKeyCli, freePort, randomHex32, requireDist, type ServeEnv, sleep, startServe } from "../helpers/process.js"

interface Outcome {
  readonly hash: string
  /** When the request body had been handed to the kernel. */
  sentAt: number | undefined
  status?: number | undefined
  id?: string
  error?: string
  /** When the error came. */
  failedAt?: number
}

const post = (agent: Agent, port: number, key: string, hash: string, outcome: Outcome) =>
  new Promise<void>((resolve) => {
    const body = JSON.stringify({ hash_hex: hash })
    const req = request(
      { host: "127.0.0.1", port, path: "/v1/attest", method: "POST", agent, headers: { "content-type": "application/json", authorization: `Bearer ${key}`, "content-length": Buffer.byteLength(body) } },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => (text += c))
        res.on("end", () => {
          outcome.status = res.statusCode
          try {
            outcome.id = (JSON.parse(text) as { id: string }).id
          } catch {
            outcome.error = `incomplete body: ${text.slice(0, 80)}`
          }
          resolve()
        })
        res.on("error", (e) => {
          outcome.error = String(e)
          outcome.failedAt = performance.now()
          resolve()
        })
      }
    )
    req.setTimeout(30_000, () => req.destroy(new Error("no answer in 30 s")))
    req.on("finish", () => (outcome.sentAt = performance.now()))
    req.on("error", (e) => {
      outcome.error = String(e)
      outcome.failedAt = performance.now()
      resolve()
    })
    req.end(body)
  })

for (const dialect of await dialects()) {
  describe(`SIGTERM under load (${dialect})`, () => {
    const cleanup: Array<() => Promise<unknown>> = []
    afterAll(async () => {
      for (const f of cleanup.reverse()) await f().catch(() => undefined)
    })

    it("answers every request sent before the signal, exits 0 within the bound, leaves nothing half-written", async () => {
      requireDist()
      const db: TestDatabase = await createDatabase(dialect)
      cleanup.push(() => db.drop())
      const port = await freePort()
      const env: ServeEnv = { databaseUrl: db.url, dataDir: db.dataDir, port, sealInterval: "200ms", extra: { ATTESTD_SHUTDOWN_TIMEOUT: "5s" } }
      const key = await createKeyCli(env)
      const server = await startServe(env)
      cleanup.push(() => server.kill("SIGKILL"))

      const agent = new Agent({ keepAlive: true, maxSockets: 24 })
      const outcomes: Array<Outcome> = []
      let stop = false
      const loop = async () => {
        while (!stop) {
          const o: Outcome = { hash: randomHex32(), sentAt: undefined }
          outcomes.push(o)
          await post(agent, port, key, o.hash, o)
          if (o.error !== undefined || (o.status !== 200 && o.status !== 201)) return
        }
      }
      const loops = Promise.all(Array.from({ length: 24 }, loop))
      // Load for a while (enough requests in flight on a slow machine too), then the signal.
      const loadStart = Date.now()
      while (outcomes.filter((o) => o.status !== undefined).length < 100 && Date.now() - loadStart < 20_000) await sleep(50)
      const signalAt = performance.now()
      server.child.kill("SIGTERM")
      const exit = await Promise.race([server.exited, sleep(15_000).then(() => "timeout" as const)])
      const exitedAt = performance.now()
      stop = true
      await loops
      agent.destroy()

      expect(exit, server.output()).toEqual({ code: 0, signal: null })
      expect(exitedAt - signalAt).toBeLessThan(5_000 + 3_000)

      const before = outcomes.filter((o) => o.sentAt !== undefined && o.sentAt < signalAt)
      const unanswered = before.filter((o) => o.error !== undefined || (o.status !== 200 && o.status !== 201) || o.id === undefined)
      console.log(`${dialect}: ${before.length - unanswered.length}/${before.length} requests sent before SIGTERM answered; exit ${exit === "timeout" ? exit : exit.code} after ${Math.round(exitedAt - signalAt)} ms`)
      // On failure: when each was sent and failed (ms from the signal), and the server's lines but the access log's.
      const timeline = unanswered.map((o) => `${o.error ?? o.status}: sent ${Math.round(o.sentAt! - signalAt)} ms, failed ${o.failedAt === undefined ? "-" : Math.round(o.failedAt - signalAt)} ms`)
      const serverLines = server.output().split("\n").filter((l) => !l.includes('"message":"request"')).join("\n").slice(-3000)
      expect(unanswered.map((o) => o.error ?? o.status), `${timeline.join("\n")}\n${serverLines}`).toEqual([])
      expect(before.length).toBeGreaterThan(50)

      const snap = await checkSealingInvariants(db.url)
      expect(snap.violations).toEqual([])
      const acked = outcomes.filter((o) => o.id !== undefined)
      for (const o of acked) expect(snap.ids.get(o.hash), o.hash).toBe(o.id)
      for (const o of acked) expect(snap.hashCounts.get(o.hash)).toBe(1)
    })
  })
}
