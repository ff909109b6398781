/**
 * End-to-end webhook delivery over a real server (spec 6; CONTRACT §4–5):
 * sealing emits t1_complete, anchoring through a simulated OpenTimestamps
 * calendar (HTTP, mined explicitly) emits t2_complete; receivers on 127.0.0.1
 * check the headers, the body and the signature (own HMAC and verifyWebhook).
 * Only webhooks of keys holding a live claim on the attestation hear of it.
 */
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { verifyWebhook } from "../../src/Client/Webhooks.js"
import { startSimulatedCalendarServer, type SimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { dialects } from "../helpers/databases.js"
import { sleep } from "../helpers/process.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"
import { type Received, type Receiver, signatureMatches, startReceiver } from "../helpers/webhookReceiver.js"

const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/
const isoMillis = (s: string) => Date.parse(s.replace(/(\.\d{3})\d+/, "$1").replace("+00:00", "Z"))

const checkDelivery = (r: Received, secret: string, event: "t1_complete" | "t2_complete") => {
  expect(r.method).toBe("POST")
  expect(r.headers["x-service-event"]).toBe(event)
  const deliveryId = r.headers["x-service-delivery"]
  expect(deliveryId).toMatch(/^[1-9][0-9]*$/)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  expect(String(r.headers["user-agent"])).toMatch(/attestd/i)
  expect(r.headers["x-service-signature"]).toMatch(/^sha256=[0-9a-f]{64}$/)
  expect(signatureMatches(r.headers["x-service-signature"], r.raw, secret)).toBe(true)
  const verified = verifyWebhook(r.raw, r.headers as Record<string, string>, secret, { toleranceSeconds: 600 })
  expect(verified.ok, JSON.stringify(verified)).toBe(true)
  expect(verifyWebhook(r.raw, r.headers as Record<string, string>, "0".repeat(64), { toleranceSeconds: 600 }).ok).toBe(false)
  expect(r.json.event).toBe(event)
  expect(r.json.delivery_id).toBe(Number(deliveryId))
  expect(r.json.created_at).toMatch(WIRE_TIME)
  return Number(deliveryId)
}

for (const dialect of await dialects()) {
  describe(`webhook delivery end to end (${dialect})`, () => {
    let server: TestServer
    let cal: SimulatedCalendarServer
    const receivers: Array<Receiver> = []
    const receiver = async (answer?: (r: Received, i: number) => number | "hang") => {
      const r = await startReceiver(answer ? { answer } : {})
      receivers.push(r)
      return r
    }
    beforeAll(async () => {
      cal = await startSimulatedCalendarServer()
      server = await startTestServer(dialect, {
        // seal windows end on whole seconds: see the first test
        sealInterval: Duration.seconds(1),
        anchorInterval: Duration.seconds(1),
        otsUpgradeInterval: Duration.millis(300),
        otsCalendars: [cal.url],
        webhookRetryDelays: [Duration.millis(200), Duration.millis(200), Duration.millis(200)]
      })
    })
    afterAll(async () => {
      await server?.close()
      await cal?.close()
      await Promise.all(receivers.map((r) => r.close()))
    })

    it("t1_complete then t2_complete reach the claim holders' webhooks, signed; others hear nothing", async () => {
      const k1 = client(server.url, (await server.createKey()).key)
      const k2 = client(server.url, (await server.createKey()).key) // no claim on the hash
      const k3 = client(server.url, (await server.createKey()).key) // claim, t2 only
      const k4 = client(server.url, (await server.createKey()).key) // claim soft-deleted before sealing
      const [r1, r2, r3, r4, r5] = [await receiver(), await receiver(), await receiver(), await receiver(), await receiver()]
      const reg = async (k: typeof k1, url: string, events: Array<string>) => {
        const r = await k.post("/v1/webhook/register", { url, events })
        expect(r.status).toBe(201)
        return r.body as { id: string; signing_secret: string }
      }
      const w1 = await reg(k1, `${r1.url}/hook?x=1`, ["t1_complete", "t2_complete"])
      await reg(k2, r2.url, ["t1_complete", "t2_complete"])
      const w3 = await reg(k3, r3.url, ["t2_complete"])
      await reg(k4, r4.url, ["t1_complete", "t2_complete"])
      const w5 = await reg(k1, r5.url, ["t1_complete", "t2_complete"]) // deleted before the event
      expect((await k1.delete(`/v1/webhook/${w5.id}`)).status).toBe(200)

      // k4's claim must be gone before the seal: start just after a window's end (a whole second),
      // so that the four requests have the window's second
      await sleep(1_000 - (Date.now() % 1_000) + 20)
      const hash = randomHash()
      const a = await k1.post("/v1/attest", { hash_hex: hash, source: "k1" })
      expect(a.status).toBe(201)
      const id = a.body.id as string
      expect((await k3.post("/v1/attest", { hash_hex: hash })).status).toBe(200)
      expect((await k4.post("/v1/attest", { hash_hex: hash })).status).toBe(200)
      expect((await k4.delete(`/v1/attestation/${id}/metadata`)).status).toBe(200)

      // ---- t1_complete
      const [t1] = await r1.waitForRequests(1, 20_000, (r) => r.headers["x-service-event"] === "t1_complete")
      expect(t1!.url).toBe("/hook?x=1")
      const d1 = checkDelivery(t1!, w1.signing_secret, "t1_complete")
      expect(Object.keys(t1!.json).sort()).toEqual(["attestation_id", "created_at", "delivery_id", "event", "hash_hex", "tsa_timestamp"])
      expect(t1!.json).toMatchObject({ attestation_id: id, hash_hex: hash })
      const status1 = (await client(server.url).get(`/v1/attestation/${id}/status`)).body
      expect(status1.level).not.toBe("T0")
      expect(isoMillis(t1!.json.tsa_timestamp)).toBe(isoMillis(status1.t1_timestamp))
      const evidence = (await client(server.url).get(`/v1/attestation/${id}/evidence`)).body
      expect(isoMillis(t1!.json.tsa_timestamp)).toBe(isoMillis(evidence.t1.tsaTimestamp))

      // the delivery record: id = X-Service-Delivery, succeeded, 200 (the receiver logs the request
      // before the server has read the answer and recorded it: wait for the record to settle)
      let rec: any
      const settled = Date.now() + 10_000
      while (true) {
        const deliveries = await k1.get(`/v1/webhook/${w1.id}/deliveries`)
        expect(deliveries.status).toBe(200)
        rec = deliveries.body.deliveries.find((d: { id: number }) => d.id === d1)
        if (rec?.status === "succeeded" || Date.now() > settled) break
        await sleep(25)
      }
      expect(rec).toMatchObject({ id: d1, event_type: "t1_complete", status: "succeeded", response_code: 200, attempts: 1, next_attempt_at: null })
      expect(rec.created_at).toMatch(WIRE_TIME)
      expect(rec.last_attempt_at).toMatch(WIRE_TIME)

      // ---- t2_complete: mine until the daily root is confirmed
      const deadline = Date.now() + 30_000
      while (r1.requests.filter((r) => r.headers["x-service-event"] === "t2_complete").length === 0) {
        if (Date.now() > deadline) throw new Error(`no t2_complete (calendar submissions: ${cal.submissions})`)
        if (cal.submissions > 0) cal.mine()
        await sleep(200)
      }
      const t2 = r1.requests.find((r) => r.headers["x-service-event"] === "t2_complete")!
      const d2 = checkDelivery(t2, w1.signing_secret, "t2_complete")
      expect(d2).not.toBe(d1)
      expect(Object.keys(t2.json).sort()).toEqual(["attestation_id", "bitcoin_block", "confirmed_at", "created_at", "delivery_id", "event", "hash_hex"])
      const status2 = (await client(server.url).get(`/v1/attestation/${id}/status`)).body
      expect(status2.level).toBe("T2")
      expect(t2.json).toMatchObject({ attestation_id: id, hash_hex: hash, bitcoin_block: status2.t2_bitcoin_block })
      expect(Number.isInteger(t2.json.bitcoin_block)).toBe(true)
      expect(isoMillis(t2.json.confirmed_at)).toBe(isoMillis(status2.t2_timestamp))

      // k3 (t2 only) hears t2 only, signed with its own secret
      const [t2k3] = await r3.waitForRequests(1, 10_000)
      checkDelivery(t2k3!, w3.signing_secret, "t2_complete")
      expect(t2k3!.json.attestation_id).toBe(id)
      expect(signatureMatches(t2k3!.headers["x-service-signature"], t2k3!.raw, w1.signing_secret)).toBe(false)

      // give the dispatcher a few more polls, then: nobody else heard anything, nothing twice
      await sleep(1200)
      expect(r1.requests).toHaveLength(2)
      expect(r3.requests).toHaveLength(1)
      expect(r2.requests).toHaveLength(0) // no claim
      expect(r4.requests).toHaveLength(0) // claim soft-deleted
      expect(r5.requests).toHaveLength(0) // webhook deleted
    })

    it("a failing receiver is retried with the same delivery id, body bytes and signature (short real delays)", async () => {
      const k = client(server.url, (await server.createKey()).key)
      const r = await receiver((_req, i) => (i < 2 ? 503 : 200))
      const w = (await k.post("/v1/webhook/register", { url: r.url, events: ["t1_complete"] })).body
      const a = await k.post("/v1/attest", { hash_hex: randomHash() })
      expect(a.status).toBe(201)
      const got = await r.waitForRequests(3, 20_000)
      const ids = new Set(got.map((x) => x.headers["x-service-delivery"]))
      expect(ids.size).toBe(1)
      expect(new Set(got.map((x) => x.raw.toString("base64"))).size).toBe(1)
      expect(new Set(got.map((x) => x.headers["x-service-signature"])).size).toBe(1)
      for (const x of got) checkDelivery(x, w.signing_secret, "t1_complete")
      expect(got[0]!.json.attestation_id).toBe(a.body.id)
      const deadline = Date.now() + 5000
      let rec: any
      while (Date.now() < deadline) {
        rec = (await k.get(`/v1/webhook/${w.id}/deliveries`)).body.deliveries[0]
        if (rec?.status === "succeeded") break
        await sleep(100)
      }
      expect(rec).toMatchObject({ status: "succeeded", response_code: 200, attempts: 3 })
      await sleep(600)
      expect(r.requests).toHaveLength(3)
    })
  })
}
