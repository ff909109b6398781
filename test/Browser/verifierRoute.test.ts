/**
 * GET /verifier: the page with the instance's trust inputs embedded (keys as GET
 * /v1/keys, the TSA anchors, the origin), under a restrictive CSP. npm run build
 * must have built the page (a failed page build fails the build).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { loadVerifierPage } from "../../src/Info/VerifierPage.js"
import { client, expectEnvelope, startTestServer, type TestServer } from "../helpers/server.js"

describe("GET /verifier", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer("sqlite")
  })
  afterAll(async () => {
    await server?.close()
  })

  it("serves the built page with the instance's trust inputs", async () => {
    expect(loadVerifierPage(), "dist/verifier/page.html: run npm run build").not.toBeNull()
    const reply = await client(server.url).get("/verifier")
    expect(reply.status).toBe(200)
    expect(reply.headers.get("content-type")).toMatch(/^text\/html/)
    expect(reply.headers.get("content-security-policy")).toMatch(/default-src 'none'.*frame-ancestors 'none'/)
    const json = /<script type="application\/json" id="attestd-trust">([^<]*)<\/script>/.exec(reply.text)?.[1]
    const trust = JSON.parse(json!)
    expect(trust.origin).toBe(server.url)
    expect(trust.keys).toEqual((await client(server.url).get("/v1/keys")).body.keys)
    expect(trust.tsaCaPem[0]).toMatch(/^-----BEGIN CERTIFICATE-----/)
  })

  it("other methods are refused with the envelope", async () => {
    expectEnvelope(await client(server.url).post("/verifier", {}), 405, "METHOD_NOT_ALLOWED")
  })
})
