/**
 * kill -9 between enqueue and send (spec 6.2, at-least-once): a child
 * `node dist/cli.mjs serve` seals an attestation; its t1_complete delivery is
 * in the database but the receiver is down, so nothing has been delivered.
 * A second attestation is acknowledged just before the kill, wherever its
 * event happens to be (T0, outbox, delivery). The server is SIGKILLed, the
 * receiver comes up, the server restarts over the same database — and both
 * deliveries arrive, the first one with the delivery id it had before the kill.
 */
import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { verifyWebhook } from "../../src/Client/Webhooks.js"
import { createDatabase, dialects } from "../helpers/databases.js"
import { BIN, createKeyCli, freePort, REPO_ROOT, type ServeEnv, type ServeProcess, sleep, startServe } from "../helpers/process.js"
import { client, randomHash } from "../helpers/server.js"
import { type Received, type Receiver, signatureMatches, startReceiver } from "../helpers/webhookReceiver.js"

const ensureDist = (): void => {
  if (!existsSync(BIN)) execFileSync("npx", ["tsc", "-p", "tsconfig.build.json"], { cwd: REPO_ROOT, stdio: "inherit" })
}

for (const dialect of await dialects()) {
  describe(`webhooks survive kill -9 (${dialect})`, () => {
    it("a delivery enqueued but not yet delivered arrives after a restart, with the same delivery id", async () => {
      ensureDist()
      const db = await createDatabase(dialect)
      const receiverPort = await freePort()
      let proc: ServeProcess | undefined
      let receiver: Receiver | undefined
      try {
        const base: Omit<ServeEnv, "port"> = {
          databaseUrl: db.url,
          dataDir: db.dataDir,
          sealInterval: "200ms",
          // many retries 3 s apart: the delivery stays open, and the kill (within ~0.1 s of the first
          // recorded failure) never lands while an attempt is in flight
          extra: { ATTESTD_WEBHOOK_RETRY_DELAYS: Array.from({ length: 40 }, () => "3s").join(",") }
        }
        const port1 = await freePort()
        proc = await startServe({ ...base, port: port1 })
        const key = await createKeyCli({ ...base, port: port1 }, "attest,webhook")
        let api = client(proc.url, key)
        const reg = await api.post("/v1/webhook/register", { url: `http://127.0.0.1:${receiverPort}/hook`, events: ["t1_complete"] })
        expect(reg.status, reg.text).toBe(201)
        const secret = reg.body.signing_secret as string

        const first = await api.post("/v1/attest", { hash_hex: randomHash() })
        expect(first.status).toBe(201)
        // the delivery exists and has failed at least once (receiver down): enqueued, not delivered
        let before: any
        const deadline = Date.now() + 20_000
        while (true) {
          const d = await api.get(`/v1/webhook/${reg.body.id}/deliveries`)
          before = d.body?.deliveries?.[0]
          if (before && before.attempts >= 1) break
          if (Date.now() > deadline) throw new Error(`no failed attempt recorded: ${d.text}\n${proc.output()}`)
          await sleep(25)
        }
        expect(before.status).toBe("retrying")
        expect(before.response_code).toBeNull()

        const second = await api.post("/v1/attest", { hash_hex: randomHash() })
        expect(second.status).toBe(201)
        const killed = await proc.kill("SIGKILL")
        expect(killed.signal).toBe("SIGKILL")
        proc = undefined

        receiver = await startReceiver({ port: receiverPort })
        proc = await startServe({ ...base, port: await freePort() })
        api = client(proc.url, key)

        // A kill during an in-flight attempt would hold that delivery's lease for 60 s: wait past it.
        await receiver.waitForRequests(2, 75_000).catch((e) => {
          throw new Error(`${String(e)}\n${proc?.output()}`)
        })
        const byAttestation = new Map<string, Array<Received>>()
        for (const r of receiver.requests) {
          expect(signatureMatches(r.headers["x-service-signature"], r.raw, secret)).toBe(true)
          expect(verifyWebhook(r.raw, r.headers as Record<string, string>, secret, { toleranceSeconds: 600 }).ok).toBe(true)
          const list = byAttestation.get(r.json.attestation_id) ?? []
          list.push(r)
          byAttestation.set(r.json.attestation_id, list)
        }
        expect([...byAttestation.keys()].sort()).toEqual([first.body.id, second.body.id].sort())
        const firstDelivery = byAttestation.get(first.body.id)![0]!
        expect(firstDelivery.headers["x-service-delivery"]).toBe(String(before.id))
        expect(firstDelivery.json.delivery_id).toBe(before.id)

        // the records say succeeded: the receiver logs a request before the server has read the
        // answer and recorded it, so wait for the record to leave "retrying"
        let rec: any
        const recorded = Date.now() + 15_000
        while (true) {
          const after = await api.get(`/v1/webhook/${reg.body.id}/deliveries`)
          rec = after.body.deliveries.find((d: { id: number }) => d.id === before.id)
          if (rec?.status !== "retrying" || Date.now() > recorded) break
          await sleep(25)
        }
        expect(rec).toMatchObject({ status: "succeeded", response_code: 200 })
        expect(rec.attempts).toBeGreaterThan(before.attempts)
      } finally {
        await proc?.kill("SIGKILL")
        await receiver?.close()
        await db.drop()
      }
    }, 120_000)
  })
}
