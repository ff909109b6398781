/**
 * The generated OpenAPI document is a checked-in contract: GET /v1/openapi.json
 * must equal test/fixtures/openapi.json. After an intended API change, refresh it:
 *
 *   UPDATE_FIXTURES=1 npx vitest run test/Http/openapi.test.ts
 *
 * and review the diff of the fixture like any other contract change.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { client, startTestServer, type TestServer } from "../helpers/server.js"

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "openapi.json")
const UPDATE = process.env.UPDATE_FIXTURES === "1" || process.env.UPDATE_FIXTURES === "true"

/** Stable serialisation: sorted object keys, two-space indent, trailing newline. */
const canonical = (value: unknown): string => {
  const sort = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sort)
      : v !== null && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort((v as Record<string, unknown>)[k])]))
      : v
  return JSON.stringify(sort(value), null, 2) + "\n"
}

describe("OpenAPI document", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer("sqlite")
  })
  afterAll(async () => {
    await server?.close()
  })

  it("GET /v1/openapi.json equals test/fixtures/openapi.json", async () => {
    const r = await client(server.url).get("/v1/openapi.json")
    expect(r.status).toBe(200)
    const actual = canonical(r.body)
    if (UPDATE || !existsSync(FIXTURE)) {
      mkdirSync(dirname(FIXTURE), { recursive: true })
      writeFileSync(FIXTURE, actual)
      if (!UPDATE) throw new Error(`wrote the missing fixture ${FIXTURE}; review and commit it, then rerun`)
      return
    }
    const expected = readFileSync(FIXTURE, "utf8")
    // A readable failure first: which paths and schemas changed.
    const exp = JSON.parse(expected)
    expect(Object.keys(r.body.paths).sort(), "paths (refresh with UPDATE_FIXTURES=1 if intended)").toEqual(
      Object.keys(exp.paths).sort()
    )
    expect(Object.keys(r.body.components?.schemas ?? {}).sort(), "component schemas").toEqual(
      Object.keys(exp.components?.schemas ?? {}).sort()
    )
    expect(actual, "OpenAPI document changed; refresh with UPDATE_FIXTURES=1 npx vitest run test/Http/openapi.test.ts")
      .toBe(expected)
  })

  it("the unprefixed alias serves the same document", async () => {
    const a = await client(server.url).get("/v1/openapi.json")
    const b = await client(server.url).get("/openapi.json")
    expect(b.status).toBe(200)
    expect(canonical(b.body)).toBe(canonical(a.body))
  })

  it("documents the error envelope on operations", async () => {
    const doc = (await client(server.url).get("/v1/openapi.json")).body
    expect(doc.openapi).toBe("3.1.0")
    const attest = doc.paths["/v1/attest"]?.post
    expect(attest).toBeDefined()
    expect(Object.keys(attest.responses)).toEqual(expect.arrayContaining(["201", "400", "401", "403", "429"]))
    expect(JSON.stringify(doc.components.schemas)).toContain("VALIDATION_ERROR")
  })

  it("documents the scope each keyed operation needs, alternatives OR-ed", async () => {
    const doc = (await client(server.url).get("/v1/openapi.json")).body
    const security = (path: string, method: string) => doc.paths[path]?.[method]?.security
    expect(security("/v1/attest", "post")).toEqual([{ bearer: ["attest"] }])
    expect(security("/v1/attest/batch", "post")).toEqual([{ bearer: ["attest"] }, { bearer: ["batch"] }])
    expect(security("/v1/attestation/{id}/metadata", "patch")).toEqual([{ bearer: ["metadata:write"] }])
    expect(security("/v1/tags/query", "post")).toEqual([{ bearer: ["tags:read"] }])
    expect(security("/v1/share-tokens", "post")).toEqual([{ bearer: ["share"] }])
    expect(security("/v1/webhook/register", "post")).toEqual([{ bearer: ["webhook"] }])
    expect(security("/v1/scan", "post")).toEqual([{ bearer: ["scan"] }])
    expect(security("/v1/inventory/stats", "get")).toEqual([{ bearer: ["batch"] }])
    expect(security("/v1/derived-lists", "post")).toEqual([{ bearer: ["census"] }])
    // public operations need nothing
    expect(security("/v1/verify", "post") ?? []).toEqual([])
  })
})
