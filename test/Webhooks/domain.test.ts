/**
 * Pure webhook pieces: the SSRF guard (isPublicAddress, checkWebhookUrl and webhookUrlShape —
 * refusals and literal public IPs only; nothing here resolves a public name
 * or sends traffic), the signature, and the consumer-side verifyWebhook.
 */
import { createHmac } from "node:crypto"
import { describe, expect, it } from "vitest"
import { verifyWebhook } from "../../src/Client/Webhooks.js"
import { checkWebhookUrl, eventBody, isPublicAddress, newSigningSecret, signBody, webhookUrlShape } from "../../src/Webhooks/Domain.js"
import { expectedSignature } from "../helpers/webhookReceiver.js"

describe("isPublicAddress", () => {
  const refused = [
    "127.0.0.1", "127.1.2.3", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.1.1",
    "169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.255", "0.0.0.0", "0.1.2.3", "192.0.0.8",
    "192.0.2.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250",
    "240.0.0.1", "255.255.255.255",
    "::1", "[::1]", "::", "fe80::1", "fe80::abcd:1234", "fc00::1", "fd12:3456::1", "ff02::1", "2001:db8::1",
    "64:ff9b::7f00:1", "100::1",
    // IPv4-mapped IPv6, dotted and hex forms
    "::ffff:127.0.0.1", "::ffff:7f00:1", "[::ffff:7f00:1]", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "::FFFF:10.0.0.1",
    "::ffff:0:0",
    // not addresses at all
    "", "localhost", "example.com", "1.2.3", "256.1.1.1", "127.0.0.1:80", " 8.8.8.8", "::ffff:999.1.1.1",
    // issue 11 §4: site-local, IPv4 embedded in IPv6 (checked as the IPv4), local-use NAT64
    "fec0::1", "feff::1", "64:ff9b:1::a9fe:a9fe", "64:ff9b:1::808:808", "2002:7f00:1::1", "2002:a9fe:a9fe::1", "2002:c0a8:101::1",
    "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "::ffff:0:808:808x", "64:ff9b::a9fe:a9fe", "64:ff9b::10.0.0.1",
    // Teredo: server 2001:0:<v4> and client (last 32 bits, inverted) both checked
    "2001:0:7f00:1:0:0:f7f7:f7f7", "2001:0:808:808:0:0:80ff:fefe", "2001::1",
    // other special IPv6 ranges outside global unicast
    "2001:2::1", "2001:10::1", "5f00::1", "4000::1", "3fff::1"
  ]
  const allowed = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "198.20.0.1",
    "2606:4700:4700::1111", "[2606:4700:4700::1111]", "2a00:1450:4001:81b::200e", "::ffff:8.8.8.8",
    // IPv4 embedded in IPv6 that carries a global unicast IPv4
    "::ffff:0:808:808", "64:ff9b::808:808", "2002:808:808::1", "2001:0:808:808:0:0:f7f7:f7f7"]

  it.each(refused)("refuses %j", (a) => {
    expect(isPublicAddress(a)).toBe(false)
  })
  it.each(allowed)("allows %j", (a) => {
    expect(isPublicAddress(a)).toBe(true)
  })
})

describe("checkWebhookUrl", () => {
  const refusedInProduction = [
    "http://93.184.216.34/hook", // plain http
    "https://127.0.0.1/x",
    "https://127.0.0.1:8443/x",
    "https://10.0.0.1/x",
    "https://[::1]/x",
    "https://169.254.169.254/latest",
    "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "https://localhost/x",
    "https://LOCALHOST./x",
    "https://0x7f.1/x", // WHATWG URL normalizes to 127.0.0.1
    "https://2130706433/x", // 127.0.0.1 as one number
    "https://127.1/x",
    "https://0/x",
    "https://[::ffff:127.0.0.1]/x",
    "https://[::ffff:a9fe:a9fe]/x",
    "https://[0:0:0:0:0:ffff:169.254.169.254]/x",
    "https://[fe80::1]/x",
    "https://[fd00::1]/x",
    "https://192.168.0.1/x",
    "https://172.20.1.1/x",
    "https://100.100.100.200/x", // Alibaba metadata (CGNAT range)
    "https://user:pass@93.184.216.34/x", // credentials
    "https://:pass@93.184.216.34/x",
    "ftp://93.184.216.34/x",
    "file:///etc/passwd",
    "gopher://93.184.216.34/",
    "javascript:alert(1)",
    "not a url",
    "",
    "https://does-not-exist.invalid/x", // does not resolve
    // issue 11 §4
    "https://[fec0::1]/",
    "https://[64:ff9b:1::a9fe:a9fe]/",
    "https://[2002:7f00:1::1]/",
    "https://[::ffff:0:7f00:1]/",
    "https://8.8.8.8:6379/", // only 443 unless ATTESTD_WEBHOOK_PORTS says otherwise
    "https://93.184.216.34:8443/hook"
  ]
  it.each(refusedInProduction)("production refuses %j", async (url) => {
    const r = await checkWebhookUrl(url, true)
    expect(r.ok).toBe(false)
    if (!r.ok) expect(r.reason.length).toBeGreaterThan(0)
  })

  it.each(["https://93.184.216.34/", "https://93.184.216.34:443/hook?x=1", "https://[2606:4700:4700::1111]/hook", "https://8.8.8.8/a/b"])(
    "production accepts the literal public address %j (no DNS, no traffic)",
    async (url) => {
      const r = await checkWebhookUrl(url, true)
      expect(r.ok).toBe(true)
      if (r.ok) expect(r.url.toString()).toBe(new URL(url).toString())
    }
  )

  it("ATTESTD_WEBHOOK_PORTS: the listed ports pass, others are refused, the address check still applies", async () => {
    expect((await checkWebhookUrl("https://8.8.8.8:8443/x", true, [443, 8443])).ok).toBe(true)
    expect((await checkWebhookUrl("https://8.8.8.8/x", true, [443, 8443])).ok).toBe(true)
    expect((await checkWebhookUrl("https://8.8.8.8:6379/x", true, [443, 8443])).ok).toBe(false)
    expect((await checkWebhookUrl("https://8.8.8.8/x", true, [8443])).ok).toBe(false)
    expect((await checkWebhookUrl("https://127.0.0.1:8443/x", true, [8443])).ok).toBe(false)
  })

  it("demo mode accepts http(s) to loopback and private hosts, still refuses other schemes and credentials", async () => {
    for (const url of ["http://127.0.0.1:8080/hook", "http://localhost/x", "https://10.0.0.1/x", "http://[::1]:9/x"]) {
      expect((await checkWebhookUrl(url, false)).ok, url).toBe(true)
    }
    for (const url of ["ftp://127.0.0.1/x", "file:///etc/passwd", "http://u:p@127.0.0.1/x", "nope"]) {
      expect((await checkWebhookUrl(url, false)).ok, url).toBe(false)
    }
  })

  // A delivery checks only the shape: a host name is left to the connection's lookup
  // (publicOnlyLookup, test/Webhooks/productionDelivery.test.ts), an IP address is checked here.
  const hostNames = new Set(["https://localhost/x", "https://LOCALHOST./x", "https://does-not-exist.invalid/x"])
  it.each(refusedInProduction)("webhookUrlShape refuses %j as registration does (host names aside: accepted)", async (url) => {
    const shape = webhookUrlShape(url, true)
    if (hostNames.has(url)) expect(shape.ok).toBe(true)
    else expect(shape).toEqual(await checkWebhookUrl(url, true))
  })

  it("webhookUrlShape agrees with registration on public addresses, ports and demo mode", async () => {
    const cases: Array<[string, boolean, Array<number>]> = [
      ["https://93.184.216.34/", true, [443]],
      ["https://[2606:4700:4700::1111]/hook", true, [443]],
      ["https://8.8.8.8:8443/x", true, [443, 8443]],
      ["https://8.8.8.8/x", true, [8443]],
      ["https://127.0.0.1:8443/x", true, [8443]],
      ["http://127.0.0.1:8080/hook", false, [443]],
      ["http://localhost/x", false, [443]],
      ["ftp://127.0.0.1/x", false, [443]],
      ["http://u:p@127.0.0.1/x", false, [443]]
    ]
    for (const [url, production, ports] of cases) {
      expect(webhookUrlShape(url, production, ports), url).toEqual(await checkWebhookUrl(url, production, ports))
    }
  })
})

describe("signatures and payloads", () => {
  it("signBody is sha256=<hex HMAC-SHA256(body, ASCII bytes of the 64-hex secret)>", () => {
    const secret = newSigningSecret()
    expect(secret).toMatch(/^[0-9a-f]{64}$/)
    const body = JSON.stringify({ event: "t1_complete", note: "ünïcødé ✓" })
    const mine = `sha256=${createHmac("sha256", Buffer.from(secret, "ascii")).update(Buffer.from(body, "utf8")).digest("hex")}`
    expect(signBody(body, secret)).toBe(mine)
    expect(expectedSignature(body, secret)).toBe(mine)
    // not keyed with the raw bytes of the hex (that is the derived-list rule, not this one)
    const rawKeyed = `sha256=${createHmac("sha256", Buffer.from(secret, "hex")).update(body).digest("hex")}`
    expect(signBody(body, secret)).not.toBe(rawKeyed)
  })

  it("eventBody: t1_complete and t2_complete carry the spec §6 fields plus event and delivery_id", () => {
    const base = {
      deliveryId: 7,
      attestationId: "att_AAAAAAAAAAAAAAAAAAAAAAAA",
      hashHex: "ab".repeat(32),
      tsaTimestamp: "2026-01-01T00:00:00.000Z",
      bitcoinBlock: 900001,
      confirmedAt: "2026-01-01T01:00:00.000000+00:00",
      createdAt: "2026-01-01T01:00:00.000000+00:00"
    }
    expect(JSON.parse(eventBody({ ...base, event: "t1_complete" }))).toEqual({
      event: "t1_complete",
      delivery_id: 7,
      attestation_id: base.attestationId,
      hash_hex: base.hashHex,
      tsa_timestamp: base.tsaTimestamp,
      created_at: base.createdAt
    })
    expect(JSON.parse(eventBody({ ...base, event: "t2_complete" }))).toEqual({
      event: "t2_complete",
      delivery_id: 7,
      attestation_id: base.attestationId,
      hash_hex: base.hashHex,
      bitcoin_block: 900001,
      confirmed_at: base.confirmedAt,
      created_at: base.createdAt
    })
  })
})

describe("verifyWebhook", () => {
  const secret = newSigningSecret()
  const now = new Date("2026-03-01T12:00:00.000Z")
  const payload = {
    event: "t1_complete",
    delivery_id: 42,
    attestation_id: "att_AAAAAAAAAAAAAAAAAAAAAAAA",
    hash_hex: "cd".repeat(32),
    tsa_timestamp: "2026-03-01T11:59:00.000Z",
    created_at: "2026-03-01T11:59:30.123456+00:00"
  }
  const body = JSON.stringify(payload)
  const headers = (over: Record<string, string> = {}) => ({
    "x-service-event": "t1_complete",
    "x-service-delivery": "42",
    "x-service-signature": expectedSignature(body, secret),
    ...over
  })

  it("accepts a genuine delivery (string, bytes, Headers, mixed-case header names)", () => {
    const ok = verifyWebhook(body, headers(), secret, { now })
    expect(ok.ok).toBe(true)
    if (ok.ok) {
      expect(ok.webhook.event).toBe("t1_complete")
      expect(ok.webhook.deliveryId).toBe("42")
      expect(ok.webhook.payload).toEqual(payload)
    }
    expect(verifyWebhook(Buffer.from(body), headers(), secret, { now }).ok).toBe(true)
    expect(verifyWebhook(new Uint8Array(Buffer.from(body)), new Headers(headers()), secret, { now }).ok).toBe(true)
    expect(verifyWebhook(body, {
      "X-Service-Event": "t1_complete",
      "X-Service-Delivery": "42",
      "X-Service-Signature": expectedSignature(body, secret)
    }, secret, { now }).ok).toBe(true)
  })

  it("rejects a wrong secret", () => {
    const r = verifyWebhook(body, headers(), newSigningSecret(), { now })
    expect(r.ok).toBe(false)
    // the right secret's hex bytes instead of its ASCII bytes
    const hexKeyed = `sha256=${createHmac("sha256", Buffer.from(secret, "hex")).update(body).digest("hex")}`
    expect(verifyWebhook(body, headers({ "x-service-signature": hexKeyed }), secret, { now }).ok).toBe(false)
  })

  it("rejects a tampered body (one byte, re-serialized JSON, trailing whitespace)", () => {
    const tampered = [
      body.replace('"delivery_id":42', '"delivery_id":43'),
      body.replace(payload.hash_hex, "ce" + payload.hash_hex.slice(2)),
      JSON.stringify(payload, null, 2),
      body + "\n",
      body.slice(0, -1)
    ]
    for (const t of tampered) expect(verifyWebhook(t, headers(), secret, { now }).ok).toBe(false)
  })

  it("rejects missing, malformed or truncated signatures", () => {
    const good = expectedSignature(body, secret)
    for (const sig of ["", "sha256=", good.slice(7), good.replace("sha256=", "sha1="), good.slice(0, -2), good + "00", good.toUpperCase(), `sha256=${"zz".repeat(32)}`]) {
      expect(verifyWebhook(body, headers({ "x-service-signature": sig }), secret, { now }).ok, sig).toBe(false)
    }
    const { "x-service-signature": _, ...noSig } = headers()
    expect(verifyWebhook(body, noSig, secret, { now }).ok).toBe(false)
  })

  it("rejects a stale created_at (older than toleranceSeconds), accepts within it", () => {
    // created 29.877 s before `now`
    expect(verifyWebhook(body, headers(), secret, { now, toleranceSeconds: 30 }).ok).toBe(true)
    const stale = verifyWebhook(body, headers(), secret, { now, toleranceSeconds: 29 })
    expect(stale.ok).toBe(false)
    // default tolerance 300 s
    expect(verifyWebhook(body, headers(), secret, { now: new Date(now.getTime() + 270_000) }).ok).toBe(true)
    expect(verifyWebhook(body, headers(), secret, { now: new Date(now.getTime() + 300_000) }).ok).toBe(false)
    // missing / unparsable created_at
    for (const created_at of [undefined, "yesterday", ""]) {
      const b = JSON.stringify({ ...payload, created_at })
      expect(verifyWebhook(b, headers({ "x-service-signature": expectedSignature(b, secret) }), secret, { now }).ok).toBe(false)
    }
  })

  it("rejects header/body mismatches (event, delivery id) and non-JSON bodies", () => {
    expect(verifyWebhook(body, headers({ "x-service-event": "t2_complete" }), secret, { now }).ok).toBe(false)
    expect(verifyWebhook(body, headers({ "x-service-delivery": "43" }), secret, { now }).ok).toBe(false)
    expect(verifyWebhook(body, headers({ "x-service-delivery": "042" }), secret, { now }).ok).toBe(false)
    const { "x-service-event": _e, ...noEvent } = headers()
    expect(verifyWebhook(body, noEvent, secret, { now }).ok).toBe(false)
    const { "x-service-delivery": _d, ...noDelivery } = headers()
    expect(verifyWebhook(body, noDelivery, secret, { now }).ok).toBe(false)
    const notJson = "event=t1_complete"
    expect(verifyWebhook(notJson, headers({ "x-service-signature": expectedSignature(notJson, secret) }), secret, { now }).ok).toBe(false)
  })
})
