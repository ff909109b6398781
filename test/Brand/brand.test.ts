/**
 * White-label brands (spec 2.15, 4.8; CONTRACT §1, §3, §5): `attestd brand set
 * SLUG --file brand.json` (in-process, test/helpers/cli.ts; once as a child process,
 * `node dist/cli.mjs`, needs dist/) against the database of a real test server, then the public GET /brand/{slug}
 * and /v1/brand/{slug}. Invalid input exits non-zero and stores nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Schema } from "effect"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Brand } from "../../src/Brand/Domain.js"
import { dialects } from "../helpers/databases.js"
import { cliInProcess } from "../helpers/cli.js"
import { requireDist, runCli } from "../helpers/process.js"
import { client, expectEnvelope, startTestServer, type TestServer } from "../helpers/server.js"

requireDist()

/** `brand set` listens nowhere, but the configuration it loads rejects PORT=0. */
const CLI_PORT = 8080

const PNG_1x1 =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

const acme = {
  display_name: "Acme Corp",
  logo_url: "https://cdn.example.com/acme/logo.png",
  colors: { primary: "#112233", secondary: "#445566", background: "#FFFFFF", text: "#000000" }
}


describe("brand schema (what `brand set` decodes, with unknown fields rejected)", () => {
  const decode = (slug: string, raw: Record<string, unknown>) =>
    Schema.decodeUnknownEither(Brand)({ logo_url: null, ...raw, slug }, { onExcessProperty: "error" })
  const valid = (slug: string, raw: Record<string, unknown>) => Either.isRight(decode(slug, raw))

  it("accepts https:// and data:image logos, #rrggbb in any case, slugs of [a-z0-9-] up to 63 characters", () => {
    expect(valid("acme", acme)).toBe(true)
    expect(valid("a", { ...acme, logo_url: PNG_1x1 })).toBe(true)
    expect(valid("0-9", { ...acme, logo_url: "data:image/svg+xml;base64,PHN2Zy8+" })).toBe(true)
    expect(valid("a".repeat(63), { display_name: "x", colors: acme.colors })).toBe(true)
    expect(valid("x", { ...acme, colors: { primary: "#abcdef", secondary: "#ABCDEF", background: "#000000", text: "#fFfFfF" } })).toBe(true)
  })

  it("rejects bad slugs, non-https logos, bad colors, unknown and missing fields", () => {
    for (const slug of ["Acme", "-x", "a.b", "a_b", "", "a".repeat(64), "é", "a b", "a/b"]) expect(valid(slug, acme), slug).toBe(false)
    for (const logo_url of ["http://cdn.example.com/l.png", "javascript:alert(1)", "data:text/html;base64,PGgxPg==", "ftp://x/y.png", "logo.png", ""]) {
      expect(valid("acme", { ...acme, logo_url }), logo_url).toBe(false)
    }
    for (const c of ["red", "#12345", "#1234567", "112233", "#gggggg", "#fff", ""]) {
      expect(valid("acme", { ...acme, colors: { ...acme.colors, primary: c } }), c).toBe(false)
    }
    expect(valid("acme", { ...acme, tagline: "x" })).toBe(false)
    expect(valid("acme", { ...acme, colors: { ...acme.colors, accent: "#000000" } })).toBe(false)
    expect(valid("acme", { ...acme, colors: { primary: "#112233", secondary: "#445566", background: "#ffffff" } })).toBe(false)
    expect(valid("acme", { ...acme, display_name: "" })).toBe(false)
    expect(valid("acme", { ...acme, display_name: "x".repeat(201) })).toBe(false)
    expect(valid("acme", { logo_url: acme.logo_url, colors: acme.colors })).toBe(false)
  })
})

for (const dialect of await dialects()) {
  describe(`brand (${dialect})`, () => {
    let server: TestServer
    let files = 0

    /**
     * Writes `content` (JSON-encoded unless a string; no file at all when undefined)
     * into the server's data dir and runs `brand set slug --file it`.
     */
    const brandSet = async (slug: string, content: unknown, asProcess = false) => {
      const file = join(server.db.dataDir, `brand-${files++}.json`)
      if (content !== undefined) writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content))
      const args = ["brand", "set", slug, "--file", file]
      return asProcess
        ? runCli({ databaseUrl: server.db.url, dataDir: server.db.dataDir, port: CLI_PORT }, args)
        : cliInProcess(args, { DATABASE_URL: server.db.url, ATTESTD_DATA_DIR: server.db.dataDir, PORT: String(CLI_PORT) })
    }

    const storedSlugs = () =>
      server.run(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ slug: string }>`SELECT slug FROM brands ORDER BY slug`)).then((rows) =>
        rows.map((r) => r.slug))

    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })

    it("brand set stores the brand; GET /brand/{slug} and /v1/brand/{slug} return it without a key; set again replaces", async () => {
      // the smoke test of `brand set` as a process (dist/cli.mjs), once
      const set = await brandSet("acme", acme, dialect === "sqlite")
      expect(set.code, set.stderr).toBe(0)
      const expected = { slug: "acme", ...acme }
      const anon = client(server.url)
      for (const path of ["/brand/acme", "/v1/brand/acme"]) {
        const r = await anon.get(path)
        expect(r.status, `${path}: ${r.text}`).toBe(200)
        expect(r.body).toEqual(expected)
        expect(Object.keys(r.body).sort()).toEqual(["colors", "display_name", "logo_url", "slug"])
        expect(Object.keys(r.body.colors).sort()).toEqual(["background", "primary", "secondary", "text"])
        expect(r.headers.get("content-type")).toContain("application/json")
      }
      // a key is not needed, and a key of any scope does not change the answer
      const key = (await server.createKey({ scopes: ["attest"] })).key
      expect((await client(server.url, key).get("/v1/brand/acme")).body).toEqual(expected)

      // replace: data: URL logo, new name and colors
      const next = {
        display_name: "Acme Corporation (EU)",
        logo_url: PNG_1x1,
        colors: { primary: "#a1b2c3", secondary: "#000001", background: "#fafafa", text: "#101010" }
      }
      const again = await brandSet("acme", next)
      expect(again.code, again.stderr).toBe(0)
      expect((await anon.get("/v1/brand/acme")).body).toEqual({ slug: "acme", ...next })
      // logo_url may be omitted: null
      const noLogo = await brandSet("acme-2", { display_name: "No Logo", colors: acme.colors })
      expect(noLogo.code, noLogo.stderr).toBe(0)
      expect((await anon.get("/brand/acme-2")).body).toEqual({ slug: "acme-2", display_name: "No Logo", logo_url: null, colors: acme.colors })
      expect(await storedSlugs()).toEqual(["acme", "acme-2"])
    }, 120_000)

    it("invalid slug, http:// logo, bad colors, unknown or missing fields, bad JSON → non-zero exit and nothing stored", async () => {
      // a valid brand to compare with afterwards
      const base = await brandSet("keep", acme)
      expect(base.code, base.stderr).toBe(0)
      const before = await storedSlugs()

      // The CLI cases the contract names; more variants of the schema are checked in-process below.
      const cases: Array<[string, string, unknown]> = [
        ["uppercase slug", "Acme", acme],
        ["slug starting with -", "-x", acme],
        ["http logo", "keep", { ...acme, logo_url: "http://cdn.example.com/logo.png" }],
        ["color name", "keep", { ...acme, colors: { ...acme.colors, primary: "red" } }],
        ["5-digit color", "keep", { ...acme, colors: { ...acme.colors, secondary: "#12345" } }],
        ["unknown extra field", "keep", { ...acme, tagline: "we make everything" }],
        ["not JSON", "keep", "{ display_name: nope"],
        ["a JSON array", "keep", [acme]],
        ["JSON null", "keep", null],
        ["missing file", "ghost", undefined]
      ]
      const results: Array<{ what: string; r: Awaited<ReturnType<typeof brandSet>> }> = []
      for (const [what, slug, content] of cases) results.push({ what, r: await brandSet(slug, content) })
      for (const { r, what } of results) {
        expect(r.code, `${what}: exit ${r.code}\n${r.stdout}\n${r.stderr}`).not.toBe(0)
        expect(r.stdout.trim(), what).not.toMatch(/^\{/)
      }
      expect(await storedSlugs()).toEqual(before)
      const anon = client(server.url)
      expect((await anon.get("/v1/brand/keep")).body).toEqual({ slug: "keep", ...acme })
      for (const slug of ["Acme", "a.b", "ghost"]) expectEnvelope(await anon.get(`/v1/brand/${slug}`), 404, "NOT_FOUND")
    }, 120_000)

    it("an unknown slug is 404 NOT_FOUND in the error envelope, on both paths", async () => {
      const anon = client(server.url)
      expectEnvelope(await anon.get("/brand/no-such-brand"), 404, "NOT_FOUND")
      expectEnvelope(await anon.get("/v1/brand/no-such-brand"), 404, "NOT_FOUND")
      expectEnvelope(await anon.get(`/v1/brand/${"x".repeat(300)}`), 404, "NOT_FOUND")
    })
  })
}
