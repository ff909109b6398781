/**
 * The webhook API over the real server (spec 2.9, 2.10, 4.6, 5.3; CONTRACT §4–5):
 * register / list / delete / deliveries, ownership (404 for others), the scope
 * matrix, and the SSRF table on a server in production mode (no traffic is
 * ever sent: nothing is attested there, and the literal public address is
 * only registered, then deleted).
 */
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { client, expectEnvelope, startTestServer, type TestServer, WIRE_TIME } from "../helpers/server.js"

for (const dialect of await dialects()) {
  describe(`webhook API (${dialect})`, () => {
    let server: TestServer
    let api: ReturnType<typeof client>
    beforeAll(async () => {
      server = await startTestServer(dialect)
      api = client(server.url, (await server.createKey({ scopes: ["webhook"] })).key)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("register: 201 with id, url, events, label and a 64-hex signing_secret; list never includes the secret", async () => {
      const r = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/hook", events: ["t1_complete", "t2_complete"], label: "ops" })
      expect(r.status).toBe(201)
      expect(r.body).toMatchObject({ url: "http://127.0.0.1:9/hook", events: ["t1_complete", "t2_complete"], label: "ops" })
      expect(r.body.id).toEqual(expect.any(String))
      expect(r.body.signing_secret).toMatch(/^[0-9a-f]{64}$/)
      const r2 = await api.post("/webhook/register", { url: "http://127.0.0.1:9/other", events: ["t2_complete", "t2_complete"] })
      expect(r2.status).toBe(201)
      expect(r2.body.label).toBeNull()
      expect(r2.body.events).toEqual(["t2_complete"])
      expect(r2.body.signing_secret).not.toBe(r.body.signing_secret)

      const list = await api.get("/v1/webhooks")
      expect(list.status).toBe(200)
      const mine = list.body.webhooks.filter((w: { id: string }) => w.id === r.body.id || w.id === r2.body.id)
      expect(mine).toHaveLength(2)
      const item = list.body.webhooks.find((w: { id: string }) => w.id === r.body.id)
      expect(item).toMatchObject({ id: r.body.id, url: "http://127.0.0.1:9/hook", label: "ops", events: ["t1_complete", "t2_complete"], failure_count: 0 })
      expect(item.created_at).toMatch(WIRE_TIME)
      expect(list.text).not.toContain(r.body.signing_secret)
      expect(list.text).not.toContain(r2.body.signing_secret)
      expect(list.text).not.toContain("signing_secret")
      const alias = await api.get("/webhooks")
      expect(alias.text).not.toContain(r.body.signing_secret)
    })

    it("register validation: events ⊆ {t1_complete, t2_complete}, non-empty; label ≤ 200; url required", async () => {
      const ok = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/x", events: ["t1_complete"], label: "l".repeat(200) })
      expect(ok.status).toBe(201)
      expect(ok.body.label).toBe("l".repeat(200))
      const bad: Array<unknown> = [
        { url: "http://127.0.0.1:9/x", events: ["t1_complete"], label: "l".repeat(201) },
        { url: "http://127.0.0.1:9/x", events: [] },
        { url: "http://127.0.0.1:9/x", events: ["t3_complete"] },
        { url: "http://127.0.0.1:9/x", events: ["t1_complete", "T2_COMPLETE"] },
        { url: "http://127.0.0.1:9/x", events: "t1_complete" },
        { url: "http://127.0.0.1:9/x" },
        { events: ["t1_complete"] },
        { url: 42, events: ["t1_complete"] },
        { url: "not a url", events: ["t1_complete"] },
        { url: "ftp://127.0.0.1/x", events: ["t1_complete"] },
        { url: "http://user:pw@127.0.0.1:9/x", events: ["t1_complete"] },
        { url: "http://127.0.0.1/" + "a".repeat(2100), events: ["t1_complete"] }
      ]
      for (const body of bad) expectEnvelope(await api.post("/v1/webhook/register", body), 400, "VALIDATION_ERROR")
    })

    it("delete → {deleted: true}; gone from the list; second delete and deliveries 404", async () => {
      const r = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/del", events: ["t1_complete"] })
      const d = await api.get(`/v1/webhook/${r.body.id}/deliveries`)
      expect(d.status).toBe(200)
      expect(d.body).toEqual({ deliveries: [] })
      const del = await api.delete(`/v1/webhook/${r.body.id}`)
      expect(del.status).toBe(200)
      expect(del.body).toEqual({ deleted: true })
      expect((await api.get("/v1/webhooks")).body.webhooks.map((w: { id: string }) => w.id)).not.toContain(r.body.id)
      expectEnvelope(await api.delete(`/v1/webhook/${r.body.id}`), 404, "NOT_FOUND")
      expectEnvelope(await api.get(`/v1/webhook/${r.body.id}/deliveries`), 404, "NOT_FOUND")
      expectEnvelope(await api.delete("/v1/webhook/wh_nope"), 404, "NOT_FOUND")
    })

    it("another key: list excludes the webhook, delete and deliveries are 404, the webhook survives", async () => {
      const r = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/owned", events: ["t1_complete"] })
      const other = client(server.url, (await server.createKey({ scopes: ["webhook"] })).key)
      const list = await other.get("/v1/webhooks")
      expect(list.status).toBe(200)
      expect(list.body.webhooks).toEqual([])
      expectEnvelope(await other.delete(`/v1/webhook/${r.body.id}`), 404, "NOT_FOUND")
      expectEnvelope(await other.get(`/v1/webhook/${r.body.id}/deliveries`), 404, "NOT_FOUND")
      expect((await api.get("/v1/webhooks")).body.webhooks.map((w: { id: string }) => w.id)).toContain(r.body.id)
    })

    it("scope matrix: without the webhook scope every webhook operation is 403; without a key 401", async () => {
      const r = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/s", events: ["t1_complete"] })
      const allButWebhook = ["attest", "batch", "metadata:read", "metadata:write", "tags:read", "tags:write", "share", "scan", "census"] as const
      for (const scopes of [[...allButWebhook], ["attest"], ["metadata:write"]] as const) {
        const k = client(server.url, (await server.createKey({ scopes: [...scopes] })).key)
        expectEnvelope(await k.post("/v1/webhook/register", { url: "http://127.0.0.1:9/x", events: ["t1_complete"] }), 403, "FORBIDDEN")
        expectEnvelope(await k.get("/v1/webhooks"), 403, "FORBIDDEN")
        expectEnvelope(await k.delete(`/v1/webhook/${r.body.id}`), 403, "FORBIDDEN")
        expectEnvelope(await k.get(`/v1/webhook/${r.body.id}/deliveries`), 403, "FORBIDDEN")
      }
      // a key from before scopes existed (null) holds them all
      const legacy = client(server.url, (await server.createKey({ scopes: null })).key)
      expect((await legacy.get("/v1/webhooks")).status).toBe(200)
      const anon = client(server.url)
      expectEnvelope(await anon.post("/v1/webhook/register", { url: "http://127.0.0.1:9/x", events: ["t1_complete"] }), 401, "AUTH_ERROR")
      expectEnvelope(await anon.get("/v1/webhooks"), 401, "AUTH_ERROR")
      expectEnvelope(await anon.delete(`/v1/webhook/${r.body.id}`), 401, "AUTH_ERROR")
      expectEnvelope(await anon.get(`/v1/webhook/${r.body.id}/deliveries`), 401, "AUTH_ERROR")
      expect((await api.get("/v1/webhooks")).body.webhooks.map((w: { id: string }) => w.id)).toContain(r.body.id)
    })

    it("demo mode accepts http:// to loopback", async () => {
      for (const url of ["http://127.0.0.1:8080/x", "http://localhost:9/x", "http://[::1]:9/x", "https://127.0.0.1/x"]) {
        const r = await api.post("/v1/webhook/register", { url, events: ["t1_complete"] })
        expect(r.status, `${url}: ${r.text}`).toBe(201)
        await api.delete(`/v1/webhook/${r.body.id}`)
      }
    })
  })

  describe(`webhooks per key (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("a key holds at most 10 live webhooks: the 11th is 400 VALIDATION_ERROR and stores nothing; deleting one frees a place; other keys unaffected", async () => {
      const api = client(server.url, (await server.createKey({ scopes: ["webhook"] })).key)
      const ids: Array<string> = []
      for (let i = 0; i < 10; i++) {
        const r = await api.post("/v1/webhook/register", { url: `http://127.0.0.1:9/h${i}`, events: ["t1_complete"] })
        expect(r.status).toBe(201)
        ids.push(r.body.id)
      }
      const over = await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/h10", events: ["t1_complete"] })
      expectEnvelope(over, 400, "VALIDATION_ERROR")
      expect(over.body.message).toMatch(/at most 10 webhooks/)
      expect((await api.get("/v1/webhooks")).body.webhooks).toHaveLength(10)
      const other = client(server.url, (await server.createKey({ scopes: ["webhook"] })).key)
      expect((await other.post("/v1/webhook/register", { url: "http://127.0.0.1:9/o", events: ["t1_complete"] })).status).toBe(201)
      expect((await api.delete(`/v1/webhook/${ids[0]}`)).status).toBe(200)
      expect((await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/h11", events: ["t1_complete"] })).status).toBe(201)
      expectEnvelope(await api.post("/v1/webhook/register", { url: "http://127.0.0.1:9/h12", events: ["t1_complete"] }), 400, "VALIDATION_ERROR")
    })
  })

  describe(`webhook SSRF guard, production mode (${dialect})`, () => {
    let server: TestServer
    let api: ReturnType<typeof client>
    beforeAll(async () => {
      // Production refuses to start without a TSA and calendars; AppConfig.make does not
      // validate, and with 24 h intervals neither is ever called.
      server = await startTestServer(dialect, {
        mode: "production",
        environment: "production",
        tsaUrls: ["http://127.0.0.1:9/tsa"],
        otsCalendars: ["http://127.0.0.1:9/calendar"],
        sealInterval: Duration.hours(24),
        anchorInterval: Duration.hours(24),
        otsUpgradeInterval: Duration.hours(24)
      })
      api = client(server.url, (await server.createKey({ scopes: ["webhook"] })).key)
    })
    afterAll(async () => {
      await server?.close()
    })

    const refused = [
      "http://127.0.0.1:8080/x",
      "http://93.184.216.34/x",
      "https://127.0.0.1/x",
      "https://10.0.0.1/x",
      "https://[::1]/x",
      "https://169.254.169.254/latest",
      "https://localhost/x",
      "https://0x7f.1/x",
      "https://2130706433/x",
      "https://[::ffff:127.0.0.1]/x",
      "https://[::ffff:a9fe:a9fe]/latest",
      "https://192.168.1.10/x",
      "https://[fd00::1]/x",
      "https://user:pw@93.184.216.34/x",
      " https://127.0.0.1/x ",
      // issue 11 §4
      "https://[fec0::1]/",
      "https://[64:ff9b:1::a9fe:a9fe]/",
      "https://[2002:7f00:1::1]/",
      "https://[::ffff:0:7f00:1]/",
      "https://8.8.8.8:6379/"
    ]
    it.each(refused)("refuses %j with 400 VALIDATION_ERROR", async (url) => {
      const r = await api.post("/v1/webhook/register", { url, events: ["t1_complete"] })
      expectEnvelope(r, 400, "VALIDATION_ERROR")
      expect(r.body.details).toEqual([{ path: ["url"], message: expect.any(String) }])
    })

    it("nothing refused was stored; a literal public https address is accepted (registered, never called)", async () => {
      expect((await api.get("/v1/webhooks")).body.webhooks).toEqual([])
      const r = await api.post("/v1/webhook/register", { url: "https://93.184.216.34/hook", events: ["t2_complete"] })
      expect(r.status).toBe(201)
      expect(r.body.url).toBe("https://93.184.216.34/hook")
      expect((await api.delete(`/v1/webhook/${r.body.id}`)).status).toBe(200)
    })
  })
}
