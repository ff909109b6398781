/**
 * GET /metrics on its own listener, on both stores: the exposition parses
 * (every family has HELP and TYPE, every sample line is well formed), HTTP
 * series carry route templates rather than raw paths, and the values move
 * with activity: requests, T0 created, pending T0 up then down after a seal,
 * seal batch size, TSA requests, calendar submissions, webhook deliveries,
 * rate-limit rejections, build info and the signing key id.
 */
import { Duration, Option } from "effect"
import { createServer, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { waitFor } from "../helpers/process.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

interface Sample {
  readonly name: string
  readonly labels: Record<string, string>
  readonly value: number
}

interface Exposition {
  readonly types: Map<string, string>
  readonly help: Map<string, string>
  readonly samples: ReadonlyArray<Sample>
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (-?(?:[0-9.e+-]+|\+Inf|-Inf|NaN))$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y

/** A strict parser of the Prometheus text format (0.0.4): throws on any line it does not understand. */
const parseExposition = (text: string): Exposition => {
  const types = new Map<string, string>()
  const help = new Map<string, string>()
  const samples: Array<Sample> = []
  expect(text.endsWith("\n")).toBe(true)
  for (const line of text.trimEnd().split("\n")) {
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/.exec(line)
    if (meta) {
      if (meta[1] === "TYPE") {
        expect(["counter", "gauge", "histogram"]).toContain(meta[3])
        types.set(meta[2]!, meta[3]!)
      } else help.set(meta[2]!, meta[3]!)
      continue
    }
    const m = SAMPLE.exec(line)
    if (!m) throw new Error(`not a sample line: ${line}`)
    const labels: Record<string, string> = {}
    const body = m[3] ?? ""
    LABEL.lastIndex = 0
    while (LABEL.lastIndex < body.length) {
      const l = LABEL.exec(body)
      if (!l) throw new Error(`bad labels in: ${line}`)
      labels[l[1]!] = l[2]!
    }
    samples.push({ name: m[1]!, labels, value: Number(m[4]!.replace("+Inf", "Infinity")) })
  }
  for (const s of samples) {
    const family = s.name.replace(/_(bucket|sum|count)$/, "")
    const f = types.has(s.name) ? s.name : family
    if (!types.has(f)) throw new Error(`sample ${s.name} has no TYPE`)
    if (!help.get(f)) throw new Error(`family ${f} has no HELP`)
    expect(s.name.startsWith("attestd_")).toBe(true)
  }
  return { types, help, samples }
}

const value = (e: Exposition, name: string, labels: Record<string, string> = {}): number =>
  e.samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((acc, s) => acc + s.value, 0)

const scrape = async (server: TestServer): Promise<Exposition> => {
  const res = await fetch(server.metricsUrl!)
  expect(res.status).toBe(200)
  expect(res.headers.get("content-type")).toContain("text/plain")
  return parseExposition(await res.text())
}

for (const dialect of await dialects()) {
  describe(`metrics (${dialect})`, () => {
    let server: TestServer
    let plain: TestServer
    let receiver: Server
    let receiverUrl = ""
    let received = 0

    beforeAll(async () => {
      receiver = createServer((req, res) => {
        req.resume()
        req.on("end", () => {
          received++
          res.writeHead(204).end()
        })
      })
      await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
      const address = receiver.address()
      receiverUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/hook`
      server = await startTestServer(dialect, {
        metricsPort: Option.some(0),
        sealInterval: Duration.millis(500),
        anchorInterval: Duration.seconds(2),
        otsUpgradeInterval: Duration.millis(500),
        demoConfirmDelay: Duration.millis(500),
        webhookRetryDelays: [Duration.millis(200)]
      })
      plain = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
      await plain?.close()
      await new Promise((r) => receiver?.close(r))
    })

    it("has no metrics listener unless ATTESTD_METRICS_PORT is set, and is not on the API port", async () => {
      expect(plain.metricsUrl).toBeUndefined()
      expect(server.metricsUrl).toBeDefined()
      expect(new URL(server.metricsUrl!).port).not.toBe(new URL(server.url).port)
      const onApi = await client(server.url).get("/metrics")
      expect(onApi.status).toBe(404)
    })

    it("exposes every series with help text, and the values move with activity", async () => {
      const startedAt = performance.now()
      const before = await scrape(server)
      // The registry is per process and these tests run two servers in one: counters are compared as deltas.
      const grew = (e: Exposition, name: string, labels: Record<string, string> = {}) =>
        value(e, name, labels) > value(before, name, labels)
      expect(value(before, "attestd_build_info")).toBe(1)
      // (One process holds one signer; these tests run several servers in one process.)
      const info = await client(server.url).get("/v1/keys")
      const kid = info.body.keys.at(-1).kid as string
      expect(value(before, "attestd_signing_key_info", { kid })).toBe(1)

      const { key } = await server.createKey({ rateLimit: 5 })
      const api = client(server.url, key)
      const hook = await api.post("/v1/webhook/register", { url: receiverUrl, events: ["t1_complete"] })
      expect(hook.status, hook.text).toBeLessThan(300)

      // Stop sealing from racing the pending-T0 check: attest, then scrape at once.
      const hashes = [randomHash(), randomHash(), randomHash()]
      const a = await api.post("/v1/attest/batch", { hashes })
      expect(a.status, a.text).toBe(200)
      const one = await api.post("/v1/attest", { hash_hex: randomHash() })
      expect(one.status).toBeLessThan(300)
      const again = await api.post("/v1/attest", { hash_hex: hashes[0] })
      expect(again.status).toBe(200)
      const status = await client(server.url).get(`/v1/attestation/${one.body.id}/status`)
      expect(status.status).toBe(200)
      // The sixth request in the minute is refused.
      let refused = 0
      for (let i = 0; i < 3; i++) if ((await api.post("/v1/attest", { hash_hex: randomHash() })).status === 429) refused++
      expect(refused).toBeGreaterThan(0)

      const after = await scrape(server)
      const elapsedSeconds = (performance.now() - startedAt) / 1000
      // The process counters: both grew with the work; the loop cannot have been busy longer than the time that passed.
      const busy = value(after, "attestd_event_loop_busy_seconds_total") - value(before, "attestd_event_loop_busy_seconds_total")
      expect(busy).toBeGreaterThan(0)
      expect(busy).toBeLessThanOrEqual(elapsedSeconds)
      expect(value(after, "attestd_process_cpu_seconds_total")).toBeGreaterThan(value(before, "attestd_process_cpu_seconds_total"))
      expect([after.types.get("attestd_event_loop_busy_seconds_total"), after.types.get("attestd_process_cpu_seconds_total")]).toEqual(["counter", "counter"])
      expect(value(after, "attestd_attestations_created_total") - value(before, "attestd_attestations_created_total"))
        .toBeGreaterThanOrEqual(4)
      const answered = (e: Exposition) =>
        value(e, "attestd_http_requests_total", { route: "/v1/attest", status: "201" }) +
        value(e, "attestd_http_requests_total", { route: "/v1/attest", status: "200" })
      expect(answered(after) - answered(before)).toBe(2 + 3 - refused)
      // Route templates, never raw ids.
      expect(value(after, "attestd_http_requests_total", { route: "/v1/attestation/:id/status", status: "200" })).toBeGreaterThanOrEqual(1)
      expect(after.samples.some((s) => s.labels.route?.includes(one.body.id))).toBe(false)
      expect(value(after, "attestd_http_request_duration_seconds_count", { route: "/v1/attest/batch" })).toBeGreaterThanOrEqual(1)
      expect(value(after, "attestd_rate_limit_rejections_total") - value(before, "attestd_rate_limit_rejections_total")).toBe(refused)
      expect(
        value(after, "attestd_http_requests_total", { route: "/v1/attest", status: "429" }) -
          value(before, "attestd_http_requests_total", { route: "/v1/attest", status: "429" })
      ).toBe(refused)

      // Sealing: pending T0 drains, a batch is recorded, the TSA answered, the webhook fired.
      const sealed = await waitFor("a seal and a delivery", async () => {
        const e = await scrape(server)
        return value(e, "attestd_t0_pending") === 0 && grew(e, "attestd_seal_batch_size_count") &&
            grew(e, "attestd_webhook_deliveries_total", { outcome: "succeeded" }) && received > 0
          ? e
          : undefined
      }, 20_000, 200)
      expect(value(sealed, "attestd_t0_oldest_pending_age_seconds")).toBe(0)
      expect(grew(sealed, "attestd_seal_duration_seconds_count")).toBe(true)
      expect(value(sealed, "attestd_seal_batch_size_sum") - value(before, "attestd_seal_batch_size_sum")).toBeGreaterThanOrEqual(4)
      expect(grew(sealed, "attestd_tsa_requests_total", { outcome: "ok" })).toBe(true)
      expect(grew(sealed, "attestd_tsa_request_duration_seconds_count", { outcome: "ok" })).toBe(true)
      const expiry = sealed.samples.find((s) => s.name === "attestd_tsa_certificate_expiry_days")
      expect(expiry?.value).toBeGreaterThan(30)
      expect(received).toBeGreaterThan(0)

      // Anchoring: the simulated calendar is submitted to, then the day confirms and the T1 backlog empties.
      const anchored = await waitFor("anchoring", async () => {
        const e = await scrape(server)
        return grew(e, "attestd_calendar_submissions_total", { outcome: "ok" }) &&
            grew(e, "attestd_calendar_upgrades_total") &&
            value(e, "attestd_t1_roots_awaiting_bitcoin") === 0
          ? e
          : undefined
      }, 30_000, 250)
      expect(value(anchored, "attestd_t1_oldest_awaiting_bitcoin_age_seconds")).toBe(0)
      expect(value(anchored, "attestd_webhook_backlog")).toBeGreaterThanOrEqual(0)
      for (const name of anchored.types.keys()) expect(anchored.help.get(name)!.length).toBeGreaterThan(10)
    })
  })
}
