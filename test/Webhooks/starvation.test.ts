/**
 * Starvation, end to end with the real dispatcher loop (issue 11 §4): key A
 * registers 10 webhooks at an endpoint that accepts TCP and never answers, and
 * has 800 deliveries queued; key B's t1_complete must still arrive promptly.
 * The bound is an ordering, not a wall-clock budget: B's delivery arrives
 * before the black hole has seen a third wave of A's attempts (each wave ends
 * only when its 10 s timeouts fire), and A never holds more than its share of
 * the dispatcher's slots. On the old scheduler B waited behind all 800.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { KEY_IN_FLIGHT } from "../../src/Webhooks/Domain.js"
import { dialects } from "../helpers/databases.js"
import { sleep } from "../helpers/process.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"
import { type BlackHole, type Receiver, startBlackHole, startReceiver } from "../helpers/webhookReceiver.js"

for (const dialect of await dialects()) {
  describe(`webhook starvation (${dialect})`, () => {
    let server: TestServer
    let hole: BlackHole
    let healthy: Receiver
    beforeAll(async () => {
      hole = await startBlackHole()
      healthy = await startReceiver()
      server = await startTestServer(dialect, { sealInterval: Duration.millis(300) })
    })
    afterAll(async () => {
      await server?.close()
      await hole?.close()
      await healthy?.close()
    })

    it("800 deliveries to a black hole (10 webhooks of key A) do not hold up key B's t1_complete", { timeout: 120_000 }, async () => {
      const a = client(server.url, (await server.createKey()).key)
      const b = client(server.url, (await server.createKey()).key)
      for (let i = 0; i < 10; i++) {
        expect((await a.post("/v1/webhook/register", { url: `${hole.url}/a${i}`, events: ["t1_complete"] })).status).toBe(201)
      }
      const batch = await a.post("/v1/attest/batch", { hashes: Array.from({ length: 80 }, () => randomHash()) })
      expect(batch.status).toBe(200)
      await hole.waitForAccepted(1, 30_000) // A's deliveries are being attempted (sealed, fanned out: 80 × 10)

      const w = (await b.post("/v1/webhook/register", { url: `${healthy.url}/b`, events: ["t1_complete"] })).body
      const att = await b.post("/v1/attest", { hash_hex: randomHash() })
      expect(att.status).toBe(201)
      const [got] = await healthy.waitForRequests(1, 60_000)
      expect(got!.json).toMatchObject({ event: "t1_complete", attestation_id: att.body.id })
      const aAttemptsBeforeB = hole.acceptedAt.filter((t) => t <= got!.at).length
      expect(aAttemptsBeforeB).toBeLessThanOrEqual(2 * KEY_IN_FLIGHT)
      expect(hole.maxOpen()).toBeLessThanOrEqual(KEY_IN_FLIGHT)
      const [queued] = await server.run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
          WHERE w.url LIKE ${`${hole.url}/%`} AND d.status IN ('pending', 'retrying')`))
      expect(Number(queued!.n)).toBe(800) // all of A's still queued: delayed, none dropped

      let rec: any
      for (let i = 0; i < 50 && rec?.status !== "succeeded"; i++) {
        rec = (await b.get(`/v1/webhook/${w.id}/deliveries`)).body.deliveries[0]
        if (rec?.status !== "succeeded") await sleep(100)
      }
      expect(rec).toMatchObject({ status: "succeeded", attempts: 1, response_code: 200 })
    })
  })
}
