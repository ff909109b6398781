/**
 * POST /v1/timestamp and its lookups over HTTP (CONTRACT §6), in-process on
 * SQLite: the exact reply media type at 200 for granted and refused alike
 * whatever the Accept header, 415 and 413 in the envelope, the JSON form, the
 * certificate chain, lookup and evidence by serial, `key` access (401 without
 * credentials, Bearer or Basic with the `timestamp` scope, the key's claims),
 * the public per-address limit, and ATTESTD_TIMESTAMPING=off (404).
 */
import { Option } from "effect"
import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AppConfig } from "../../src/Platform/Config.js"
import { parseTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { client, expectEnvelope, startTestServer, type TestServer } from "../helpers/server.js"
import { readReply, timestampRequest } from "../helpers/timestampRequests.js"

const QUERY = "application/timestamp-query"
const JARSIGNER_ACCEPT = "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2"

const postDer = async (base: string, body: Uint8Array | ReadableStream, headers: Record<string, string> = {}) => {
  const res = await fetch(`${base}/v1/timestamp`, {
    method: "POST",
    headers: { "content-type": QUERY, ...headers },
    body,
    ...(body instanceof ReadableStream ? { duplex: "half" } : {})
  } as RequestInit)
  const bytes = new Uint8Array(await res.arrayBuffer())
  return { status: res.status, headers: res.headers, bytes, text: new TextDecoder().decode(bytes) }
}

/** An envelope reply as `expectEnvelope` reads it. */
const asReply = (r: { status: number; headers: Headers; text: string }) => ({ ...r, body: JSON.parse(r.text) as unknown })

const sha256Hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")
const serialOf = (token: Uint8Array) => BigInt(parseTimeStampToken(token).serial_number).toString(16)

describe("time-stamping over HTTP", () => {
  const base = AppConfig.make().timestamping
  let open: TestServer
  let keyed: TestServer
  let off: TestServer

  beforeAll(async () => {
    ;[open, keyed, off] = await Promise.all([
      startTestServer("sqlite", { publicRateLimit: Option.some(500) }),
      startTestServer("sqlite", { timestamping: { ...base, access: "key" } }),
      startTestServer("sqlite", { timestamping: { ...base, enabled: false } })
    ])
  })

  afterAll(async () => {
    await Promise.all([open?.close(), keyed?.close(), off?.close()])
  })

  it("answers a DER request with exactly application/timestamp-reply, whatever Accept says, counted by the public limit", async () => {
    const r = await postDer(open.url, timestampRequest(), { accept: JARSIGNER_ACCEPT })
    expect(r.status).toBe(200)
    expect(r.headers.get("content-type")).toBe("application/timestamp-reply")
    expect(readReply(r.bytes).status).toBe(0)
    expect(r.headers.get("x-ratelimit-limit")).toBe("500")
    // the unprefixed alias too
    const alias = await fetch(`${open.url}/timestamp`, { method: "POST", headers: { "content-type": QUERY }, body: timestampRequest() })
    expect(alias.status).toBe(200)
    expect(readReply(new Uint8Array(await alias.arrayBuffer())).status).toBe(0)
  })

  it("answers a refusal at HTTP 200 as a rejection", async () => {
    const r = await postDer(open.url, new TextEncoder().encode("garbage"))
    expect(r.status).toBe(200)
    expect(r.headers.get("content-type")).toBe("application/timestamp-reply")
    expect(readReply(r.bytes)).toMatchObject({ status: 2, failInfo: ["badDataFormat"] })
  })

  it("refuses another media type with 415 and a body over 64 KiB with 413, in the envelope", async () => {
    for (const type of ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"]) {
      expectEnvelope(asReply(await postDer(open.url, timestampRequest(), { "content-type": type })), 415, "VALIDATION_ERROR")
    }
    const untyped = await fetch(`${open.url}/v1/timestamp`, { method: "POST", body: new Blob([timestampRequest()]) })
    expect(untyped.status).toBe(415)
    expectEnvelope(asReply(await postDer(open.url, new Uint8Array(64 * 1024 + 1))), 413, "VALIDATION_ERROR")
    // without a Content-Length (chunked), the limit holds while reading
    const chunks = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 5; i++) controller.enqueue(new Uint8Array(16 * 1024))
        controller.close()
      }
    })
    expectEnvelope(asReply(await postDer(open.url, chunks)), 413, "VALIDATION_ERROR")
    // a DER request within the limit still works on the same server
    expect(readReply((await postDer(open.url, timestampRequest())).bytes).status).toBe(0)
  })

  it("takes the JSON form and answers DER; a JSON body off its schema is 400", async () => {
    const api = client(open.url)
    const res = await fetch(`${open.url}/v1/timestamp`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ artifact_hash: "cd".repeat(64), hash_algorithm: "sha512", nonce: "42", cert_req: false })
    })
    expect(res.headers.get("content-type")).toBe("application/timestamp-reply")
    const reply = readReply(new Uint8Array(await res.arrayBuffer()))
    expect(parseTimeStampToken(reply.token!)).toMatchObject({ hash_algorithm: "SHA-512", nonce: "42", certificates: [] })
    expectEnvelope(await api.post("/v1/timestamp", { artifact_hash: "ab".repeat(32), hash_algorithm: "md5" }), 400, "VALIDATION_ERROR")
    // a length that does not fit the algorithm is the RFC 3161 refusal, not a 400
    const short = await fetch(`${open.url}/v1/timestamp`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ artifact_hash: "ab".repeat(20), hash_algorithm: "sha256" })
    })
    expect(readReply(new Uint8Array(await short.arrayBuffer()))).toMatchObject({ status: 2, failInfo: ["badDataFormat"] })
  })

  it("publishes the chain, and looks a token and its evidence up by serial (any case, leading zeros)", async () => {
    const chain = await fetch(`${open.url}/v1/timestamp/certchain`)
    expect(chain.headers.get("content-type")).toBe("application/pem-certificate-chain")
    expect((await chain.text()).match(/BEGIN CERTIFICATE/g)).toHaveLength(2)

    const token = readReply((await postDer(open.url, timestampRequest())).bytes).token!
    const serial = serialOf(token)
    const api = client(open.url)
    for (const asked of [serial, `000${serial.toUpperCase()}`]) {
      const found = await api.get(`/v1/timestamp/${asked}`)
      expect(found.status).toBe(200)
      expect(Object.keys(found.body).sort()).toEqual([
        "gen_time", "hash_algorithm", "hashed_message", "imprint_attestation_id", "policy", "serial_number", "token",
        "token_attestation_id", "token_sha256"
      ])
      expect(found.body).toMatchObject({ serial_number: serial, policy: "2.999.1", hash_algorithm: "sha256", token_sha256: sha256Hex(token) })
      expect(found.body.token).toBe(Buffer.from(token).toString("base64"))
    }
    const evidence = await api.get(`/v1/timestamp/${serial}/evidence`)
    expect(evidence.status).toBe(200)
    expect(evidence.body).toMatchObject({ hash_hex: sha256Hex(token), level: "T0" })
    expectEnvelope(await api.get("/v1/timestamp/abcdef0123"), 404, "NOT_FOUND")
    expectEnvelope(await api.get("/v1/timestamp/not-hex/evidence"), 404, "NOT_FOUND")
  })

  it("under key access: 401 without credentials, the timestamp scope as Bearer or Basic, the key's claims", async () => {
    expectEnvelope(asReply(await postDer(keyed.url, timestampRequest())), 401, "AUTH_ERROR")
    const holder = await keyed.createKey({ scopes: ["timestamp", "metadata:read"] })
    const other = await keyed.createKey({ scopes: ["attest"] })
    expectEnvelope(asReply(await postDer(keyed.url, timestampRequest(), { authorization: `Bearer ${other.key}` })), 403, "FORBIDDEN")
    expectEnvelope(
      asReply(await postDer(keyed.url, timestampRequest(), { authorization: `Basic ${Buffer.from(`x:${holder.key}x`).toString("base64")}` })),
      401,
      "AUTH_ERROR"
    )

    const bearer = readReply((await postDer(keyed.url, timestampRequest(), { authorization: `Bearer ${holder.key}` })).bytes)
    expect(bearer.status).toBe(0)
    const basic = await postDer(keyed.url, timestampRequest(), { authorization: `Basic ${Buffer.from(`jarsigner:${holder.key}`).toString("base64")}` })
    expect(readReply(basic.bytes).status).toBe(0)
    expect(basic.headers.get("x-ratelimit-limit")).toBe("1000")

    // the key holds the claim on the token's attestation; the lookup stays public
    const found = await client(keyed.url).get(`/v1/timestamp/${serialOf(bearer.token!)}`)
    expect(found.status).toBe(200)
    const metadata = await client(keyed.url, holder.key).get(`/v1/attestation/${found.body.token_attestation_id}/metadata`)
    expect(metadata.status).toBe(200)
    expect(metadata.body.source).toBe(`rfc3161 token ${serialOf(bearer.token!)}`)
  })

  it("is 404 when ATTESTD_TIMESTAMPING=off", async () => {
    expectEnvelope(asReply(await postDer(off.url, timestampRequest())), 404, "NOT_FOUND")
    expectEnvelope(await client(off.url).get("/v1/timestamp/certchain"), 404, "NOT_FOUND")
  })
})
