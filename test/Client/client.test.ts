/**
 * The Promise client (`attestd/client`): typed operations against the real
 * in-process server on both stores; retries against a server that injects 429
 * and 503 (only those are retried, same X-Request-Id, Retry-After honoured,
 * attempts bounded); the browser bundle holds no server code.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { gzipSync } from "node:zlib"
import * as esbuild from "esbuild"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { AttestdError, createClient, hashBlob, hashString, hmacDigest } from "../../src/client.js"
import { hashFile } from "../../src/client-node.js"
import { dialects } from "../helpers/databases.js"
import { randomHash, startTestServer, type TestServer } from "../helpers/server.js"

describe("client helpers", () => {
  it("hashString is SHA-256 of the UTF-8 bytes, no normalisation, no newline", async () => {
    expect(await hashString("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    expect(await hashString("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    // é precomposed and decomposed differ: no normalisation
    expect(await hashString("\u00e9")).not.toBe(await hashString("e\u0301"))
  })
  it("hmacDigest matches RFC 4231 case 2; hashBlob streams a Blob", async () => {
    expect(await hmacDigest("Jefe", "what do ya want for nothing?"))
      .toBe("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    const big = new Uint8Array(3 * 1024 * 1024 + 7).map((_, i) => i % 251)
    const expected = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", big)), (b) => b.toString(16).padStart(2, "0")).join("")
    expect(await hashBlob(new Blob([big]))).toBe(expected)
    const dir = mkdtempSync(join(tmpdir(), "attestd-hash-"))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, "f.bin")
    writeFileSync(path, big)
    expect(await hashFile(path)).toBe(expected)
  })
})

describe("client bundle", () => {
  it("bundles for the browser without server modules; size reported", async () => {
    const out = await esbuild.build({
      entryPoints: ["src/client.ts"],
      bundle: true,
      platform: "browser",
      format: "esm",
      minify: true,
      write: false,
      metafile: true,
      logLevel: "silent"
    })
    const inputs = Object.keys(out.metafile.inputs)
    const server = inputs.filter((f) => /better-sqlite3|node_modules\/pg\/|@effect\/sql|@effect\/platform-node|src\/(Platform\/(Sql|Config|Signer)|[A-Za-z]+\/(Http|Repo)\.ts|main)/.test(f))
    expect(server).toEqual([])
    const code = out.outputFiles[0]!.contents
    expect(new TextDecoder().decode(code)).not.toMatch(/from"node:|require\("node:/)
    const gz = gzipSync(code).length
    console.log(`attestd/client browser bundle: ${code.length} bytes minified, ${gz} bytes gzipped`)
    expect(gz).toBeGreaterThan(0)
  })
})

describe("client retries against an injecting server", () => {
  let upstream: TestServer
  let proxy: Server
  let url = ""
  const seen: Array<{ method: string; path: string; rid: string | undefined; injected: number | null }> = []
  let counter = 0
  beforeAll(async () => {
    upstream = await startTestServer("sqlite")
    proxy = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Array<Buffer> = []
      for await (const c of req) chunks.push(c as Buffer)
      counter++
      // every 3rd request 429 (Retry-After 0), every 5th 503 with a non-JSON body
      const inject = counter % 3 === 0 ? 429 : counter % 5 === 0 ? 503 : null
      seen.push({ method: req.method!, path: req.url!, rid: req.headers["x-request-id"] as string | undefined, injected: inject })
      if (inject === 429) {
        res.writeHead(429, { "content-type": "application/json", "retry-after": "0" })
        return res.end(JSON.stringify({ error: true, code: "RATE_LIMITED", message: "slow down", details: [] }))
      }
      if (inject === 503) {
        res.writeHead(503, { "content-type": "text/html" })
        return res.end("<html>busy</html>")
      }
      const headers: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "content-length") headers[k] = v
      const r = await fetch(upstream.url + req.url, { method: req.method!, headers, ...(chunks.length ? { body: Buffer.concat(chunks) } : {}) })
      const out: Record<string, string> = {}
      r.headers.forEach((v, k) => {
        if (k !== "content-encoding" && k !== "content-length" && k !== "transfer-encoding") out[k] = v
      })
      res.writeHead(r.status, out)
      res.end(Buffer.from(await r.arrayBuffer()))
    })
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r))
    const a = proxy.address()
    url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`
  })
  afterAll(async () => {
    await new Promise<void>((r) => proxy?.close(() => r()))
    await upstream?.close()
  })

  it("500 hashes in batches of 100: nothing lost, retries counted, same X-Request-Id on each retry", async () => {
    const key = (await upstream.createKey()).key
    const retries: Array<{ attempt: number; status: number | null; delayMs: number }> = []
    const c = createClient({ baseUrl: url, apiKey: key, retry: { maxAttempts: 6, baseDelayMs: 5, onRetry: (i) => retries.push(i) } })
    const hashes = Array.from({ length: 500 }, () => randomHash())
    const got: Array<string> = []
    for (let i = 0; i < hashes.length; i += 100) {
      const r = await c.attestBatch({ hashes: hashes.slice(i, i + 100) })
      got.push(...r.attestations.map((a) => a.hash_hex))
    }
    expect(new Set(got)).toEqual(new Set(hashes))
    const injected = seen.filter((s) => s.injected !== null).length
    expect(injected).toBeGreaterThan(0)
    expect(retries.length).toBe(injected)
    expect(retries.every((r) => r.status === 429 || r.status === 503)).toBe(true)
    expect(retries.every((r) => r.delayMs >= 0 && r.delayMs <= 5 * 2 ** (r.attempt - 1))).toBe(true)
    // attempts of one call share one X-Request-Id
    const byRid = new Map<string, number>()
    for (const s of seen) byRid.set(s.rid!, (byRid.get(s.rid!) ?? 0) + 1)
    expect(byRid.size).toBe(5)
    expect([...byRid.values()].reduce((a, b) => a + b, 0)).toBe(seen.length)
    console.log(`retry: ${seen.length} requests for 5 calls, ${injected} injected (429/503), delays ${JSON.stringify(retries.map((r) => r.delayMs))}`)
    // verify them all back through the client
    const v = await c.verifyBatch({ hashes: hashes.slice(0, 100) })
    expect(v.results.every((x) => x.exists)).toBe(true)
  })

  it("bounded attempts: the error carries status, code and the request id; non-JSON gives HTTP <status>", async () => {
    const calls: Array<string | null> = []
    const always503 = (async (_u: string | URL | Request, init?: RequestInit) => {
      calls.push(new Headers(init?.headers).get("x-request-id"))
      return new Response("<html>down</html>", { status: 503, headers: { "retry-after": "0" } })
    }) as typeof fetch
    const c = createClient({ baseUrl: "http://x", fetch: always503, retry: { maxAttempts: 4 }, sleep: async () => {} })
    const e = await c.info().catch((x) => x)
    expect(e).toBeInstanceOf(AttestdError)
    expect(e.status).toBe(503)
    expect(e.message).toBe("HTTP 503")
    expect(calls.length).toBe(4)
    expect(new Set(calls).size).toBe(1)
    expect(e.requestId).toBe(calls[0])
    // 4xx other than 429 is not retried; Retry-After beyond the time budget stops retrying
    calls.length = 0
    const c400 = createClient({
      baseUrl: "http://x",
      fetch: (async (_u: string | URL | Request, init?: RequestInit) => {
        calls.push(new Headers(init?.headers).get("x-request-id"))
        return Response.json({ error: true, code: "VALIDATION_ERROR", message: "bad", details: [{ path: ["hash_hex"] }] }, { status: 400 })
      }) as typeof fetch
    })
    const e4 = await c400.attest({ hash_hex: "zz" }).catch((x) => x)
    expect([e4.status, e4.code, e4.message, calls.length]).toEqual([400, "VALIDATION_ERROR", "bad", 1])
    expect(e4.details).toEqual([{ path: ["hash_hex"] }])
    calls.length = 0
    const slept: Array<number> = []
    const c429 = createClient({
      baseUrl: "http://x",
      fetch: (async () => {
        calls.push("x")
        return new Response("{}", { status: 429, headers: { "retry-after": calls.length === 1 ? "2" : "3600" } })
      }) as typeof fetch,
      retry: { maxAttempts: 10, maxElapsedMs: 60_000 },
      sleep: async (ms) => {
        slept.push(ms)
      }
    })
    const e429 = await c429.stats().catch((x) => x)
    expect(e429.status).toBe(429)
    expect(slept[0]).toBeGreaterThanOrEqual(2000) // Retry-After honoured
    expect(calls.length).toBe(2) // then 3600 s exceeds the budget: stop
  })
})

for (const dialect of await dialects()) {
  describe(`client typed operations (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect)
    })
    afterAll(async () => {
      await server?.close()
    })
    it("attest, lookup, status, evidence, metadata, tags, verify, info, keys, stats", async () => {
      const c = createClient({ baseUrl: server.url, apiKey: (await server.createKey()).key })
      const hash = await hashString(`client ${dialect} ${Math.random()}`)
      const a = await c.attest({ hash_hex: hash, source: "sdk", extra_data: { po: 1 } })
      expect([a.hash_hex, a.status, a.source]).toEqual([hash, "created", "sdk"])
      expect((await c.attest({ hash_hex: hash })).status).toBe("existing")
      expect((await c.lookup(a.id)).hash_hex).toBe(hash)
      expect(await c.status(a.id)).toHaveProperty("level")
      expect(await c.evidence(a.id)).toBeTypeOf("object")
      const m = await c.getMetadata(a.id)
      const p = await c.patchMetadata(a.id, { source: "sdk2" }, String(m.etag))
      expect(p.source).toBe("sdk2")
      await c.putTags(a.id, { tags: [{ key: "env", value: "test" }] })
      expect(JSON.stringify(await c.getTags(a.id))).toContain("env")
      expect((await c.verify({ hash_hex: hash })).exists).toBe(true)
      expect(await c.info()).toHaveProperty("features")
      expect(await c.keys()).toBeTypeOf("object")
      expect(await c.stats()).toBeTypeOf("object")
      const e = await c.lookup(randomHash()).catch((x) => x)
      expect([e instanceof AttestdError, e.status, e.code]).toEqual([true, 404, "NOT_FOUND"])
      expect(e.requestId).toBeTruthy()
    })
  })
}
