/**
 * Cross-origin access (issue 42, finding 6). Public routes answer any origin with
 * `Access-Control-Allow-Origin: *` (POST /verify with a body too) and their
 * preflight is answered 204 without allowing Authorization; authenticated routes
 * only for the origins in ATTESTD_CORS_ORIGINS, whose preflight allows Authorization
 * and names the origin back. Refusals by the edge (401) carry the headers as well.
 */
import { ConfigProvider, Effect, Either } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { appConfig } from "../../src/Platform/Config.js"
import { randomHash, startTestServer, type TestServer } from "../helpers/server.js"

const TRUSTED = "https://app.example"
const STRANGER = "https://evil.example"

describe("CORS (sqlite)", () => {
  let server: TestServer
  let key: string
  beforeAll(async () => {
    server = await startTestServer("sqlite", { corsOrigins: [TRUSTED] })
    key = (await server.createKey()).key
  })
  afterAll(async () => {
    await server?.close()
  })
  const preflight = (path: string, origin: string, method: string, headers: string) =>
    fetch(`${server.url}${path}`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": method, "access-control-request-headers": headers }
    })

  it("public routes: any origin gets *, on GET and on POST /verify; the preflight is 204 without Authorization", async () => {
    const info = await fetch(`${server.url}/v1/info`, { headers: { origin: STRANGER } })
    expect(info.status).toBe(200)
    expect(info.headers.get("access-control-allow-origin")).toBe("*")
    expect(info.headers.get("access-control-expose-headers")).toMatch(/x-request-id/)

    const verify = await fetch(`${server.url}/v1/verify`, {
      method: "POST",
      headers: { origin: STRANGER, "content-type": "application/json" },
      body: JSON.stringify({ hash_hex: randomHash() })
    })
    expect(verify.status).toBe(200)
    expect(verify.headers.get("access-control-allow-origin")).toBe("*")

    const pre = await preflight("/v1/verify", STRANGER, "POST", "content-type")
    expect(pre.status).toBe(204)
    expect(pre.headers.get("access-control-allow-origin")).toBe("*")
    expect(pre.headers.get("access-control-allow-methods")).toMatch(/POST/)
    expect(pre.headers.get("access-control-allow-headers")).toMatch(/content-type/)
    expect(pre.headers.get("access-control-allow-headers")).not.toMatch(/authorization/)
    expect(pre.headers.get("x-request-id")).toBeTruthy()

    // no Origin: no CORS headers at all
    expect((await fetch(`${server.url}/v1/info`)).headers.get("access-control-allow-origin")).toBeNull()
  })

  it("authenticated routes: a listed origin is named back and may send Authorization; another origin gets no Allow-Origin", async () => {
    const trustedPre = await preflight("/v1/attest", TRUSTED, "POST", "authorization, content-type")
    expect(trustedPre.status).toBe(204)
    expect(trustedPre.headers.get("access-control-allow-origin")).toBe(TRUSTED)
    expect(trustedPre.headers.get("vary")).toMatch(/Origin/)
    expect(trustedPre.headers.get("access-control-allow-headers")).toMatch(/authorization/)

    const attested = await fetch(`${server.url}/v1/attest`, {
      method: "POST",
      headers: { origin: TRUSTED, "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: randomHash() })
    })
    expect(attested.status).toBe(201)
    expect(attested.headers.get("access-control-allow-origin")).toBe(TRUSTED)

    const strangerPre = await preflight("/v1/attest", STRANGER, "POST", "authorization, content-type")
    expect(strangerPre.status).toBe(204)
    expect(strangerPre.headers.get("access-control-allow-origin")).toBeNull()
    expect(strangerPre.headers.get("access-control-allow-headers")).toBeNull()

    const strangerGet = await fetch(`${server.url}/v1/webhooks`, { headers: { origin: STRANGER, authorization: `Bearer ${key}` } })
    expect(strangerGet.status).toBe(200)
    expect(strangerGet.headers.get("access-control-allow-origin")).toBeNull()

    // a 401 from the API and the edge's own 401 (before it reads a body) carry the listed origin's headers too
    const refused = await fetch(`${server.url}/v1/webhooks`, { headers: { origin: TRUSTED } })
    expect(refused.status).toBe(401)
    expect(refused.headers.get("access-control-allow-origin")).toBe(TRUSTED)
    const refusedAtEdge = await fetch(`${server.url}/v1/attest`, {
      method: "POST",
      headers: { origin: TRUSTED, "content-type": "application/json" },
      body: JSON.stringify({ hash_hex: randomHash() })
    })
    expect(refusedAtEdge.status).toBe(401)
    expect(refusedAtEdge.headers.get("access-control-allow-origin")).toBe(TRUSTED)
    expect(refusedAtEdge.headers.get("x-request-id")).toBeTruthy()
  })
})

describe("ATTESTD_CORS_ORIGINS", () => {
  const load = (env: Record<string, string>) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))

  it("a comma-separated list of origins; none by default; a URL with a path is refused", () => {
    const ok = load({ ATTESTD_CORS_ORIGINS: "https://app.example, http://localhost:3000" })
    expect(Either.isRight(ok) && ok.right.corsOrigins).toEqual(["https://app.example", "http://localhost:3000"])
    const none = load({})
    expect(Either.isRight(none) && none.right.corsOrigins).toEqual([])
    expect(Either.isLeft(load({ ATTESTD_CORS_ORIGINS: "https://app.example/path" }))).toBe(true)
    expect(Either.isLeft(load({ ATTESTD_CORS_ORIGINS: "*" }))).toBe(true)
  })
})
