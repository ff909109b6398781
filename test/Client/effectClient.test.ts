/**
 * The Effect client (`attestd/client/effect`): HttpApiClient over src/Api.ts
 * against the real in-process server on both stores (attest, lookup, verify,
 * typed errors), and the client entry points load no server modules.
 */
import { execFile } from "node:child_process"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { gzipSync } from "node:zlib"
import * as esbuild from "esbuild"
import { Duration, Effect, Either } from "effect"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { AttestdClient, AuthError, HashHex, NotFound, ServiceUnavailable } from "../../src/client-effect.js"
import { PACKAGE_VERSION } from "../../src/Domain/Version.js"
import { deriveValues } from "../../src/client.js"
import { poll } from "../helpers/anchoring.js"
import { dialects } from "../helpers/databases.js"
import { REPO_ROOT, requireDist } from "../helpers/process.js"
import { randomHash, startTestServer, type TestServer } from "../helpers/server.js"
import { startReceiver } from "../helpers/webhookReceiver.js"

const SERVER_MODULE = /better-sqlite3|node_modules\/(pg|pg-[a-z-]+)\/|@effect\/sql|@effect\/platform-node|\/src\/main\.|\/dist\/main\.|\/(Http|Repo)\.(ts|js)$|\/Platform\/(Sql|Config|Signer|Backup|Metrics)\./

for (const dialect of await dialects()) {
  describe(`Effect client against the server (${dialect})`, () => {
    let server: TestServer
    let key = ""
    beforeAll(async () => {
      server = await startTestServer(dialect)
      key = (await server.createKey()).key
    })
    afterAll(async () => {
      await server?.close()
    })

    const run = <A, E>(apiKey: string | undefined, f: (c: AttestdClient["Type"]) => Effect.Effect<A, E>) =>
      Effect.runPromise(Effect.flatMap(AttestdClient, f).pipe(Effect.provide(AttestdClient.layer({ baseUrl: `${server.url}/`, apiKey }))))

    it("attest (created, then existing), batch, lookup, status, verify, metadata", async () => {
      const hash = HashHex.make(randomHash())
      const out = await run(key, (c) =>
        Effect.gen(function*() {
          const a = yield* c.attestations.attest({ payload: { hash_hex: hash, source: "effect", extra_data: { n: 1 } } })
          const again = yield* c.attestations.attest({ payload: { hash_hex: hash } })
          const batch = yield* c.attestations.attestBatch({ payload: { hashes: [hash, HashHex.make(randomHash())] } })
          const looked = yield* c.lookup.attestation({ path: { id: a.id } })
          const status = yield* c.lookup.status({ path: { id: a.id } })
          const verified = yield* c.verification.verify({ payload: { hash_hex: hash } })
          const meta = yield* c.claims.getMetadata({ path: { id: a.id } })
          return { a, again, batch, looked, status, verified, meta }
        }))
      expect([out.a.status, out.a.hash_hex, out.a.source, out.a.extra_data]).toEqual(["created", hash, "effect", { n: 1 }])
      expect(out.again.status).toBe("existing")
      expect([out.batch.created, out.batch.existing]).toEqual([1, 1])
      expect(out.looked.hash_hex).toBe(hash)
      expect(out.status).toHaveProperty("level")
      expect([out.verified.exists, out.verified.id]).toEqual([true, out.a.id])
      expect(out.meta).toMatchObject({ source: "effect" })
    })

    it("errors are the typed classes of the contract", async () => {
      const missing = await run(key, (c) => Effect.either(c.lookup.attestation({ path: { id: randomHash() } })))
      expect(Either.isLeft(missing)).toBe(true)
      const e = Either.isLeft(missing) ? missing.left : null
      expect(e).toBeInstanceOf(NotFound)
      expect((e as NotFound)._tag).toBe("NotFound")
      // no key: the bearer middleware's AuthError
      const anon = await run(undefined, (c) => Effect.either(c.attestations.attest({ payload: { hash_hex: HashHex.make(randomHash()) } })))
      expect(Either.isLeft(anon) ? anon.left : null).toBeInstanceOf(AuthError)
      const wrong = await run("atk_live_" + "x".repeat(40), (c) => Effect.either(c.attestations.attest({ payload: { hash_hex: HashHex.make(randomHash()) } })))
      expect(Either.isLeft(wrong) ? (wrong.left as { _tag: string })._tag : "no error").toBe("AuthError")
      // a public operation needs no key
      expect((await run(undefined, (c) => c.verification.verify({ payload: { hash_hex: HashHex.make(randomHash()) } }))).exists).toBe(false)
    })
  })
}

for (const dialect of await dialects()) {
  describe(`Effect client decodes every operation's answer (${dialect})`, () => {
    let server: TestServer
    let key = ""
    beforeAll(async () => {
      server = await startTestServer(dialect, {
        sealInterval: Duration.millis(300),
        anchorInterval: Duration.seconds(1),
        otsUpgradeInterval: Duration.millis(300),
        demoConfirmDelay: Duration.seconds(2)
      })
      key = (await server.createKey({ orgId: `org-effect-${dialect}` })).key
    })
    afterAll(async () => {
      await server?.close()
    })

    it("every group, with a T2 attestation", async () => {
      const receiver = await startReceiver()
      const run = <A, E>(apiKey: string | undefined, f: (c: AttestdClient["Type"]) => Effect.Effect<A, E>) =>
        Effect.runPromise(Effect.flatMap(AttestdClient, f).pipe(Effect.provide(AttestdClient.layer({ baseUrl: server.url, apiKey }))))
      try {
        const hash = HashHex.make(randomHash())
        const a = await run(key, (c) => c.attestations.attest({ payload: { hash_hex: hash, source: "sweep" } }))
        await poll("T2", async () => (await run(key, (c) => c.lookup.status({ path: { id: a.id } }))).level === "T2", 30_000, 200)
        const out = await run(key, (c) =>
          Effect.gen(function*() {
            const id = { path: { id: a.id } }
            const info = yield* c.info.info()
            const health = yield* c.info.healthz()
            const keys = yield* c.info.keys()
            const oneKey = yield* c.info.key({ path: { key_id: String(keys.keys[0]!.kid) } })
            yield* c.info.stats()
            const certs = yield* c.info.tsaCertificates()
            yield* c.info.testVectors()
            const batch = yield* c.verification.verifyBatch({ payload: { hashes: [hash], detailed: true } })
            const signature = yield* c.lookup.signature(id)
            const evidence = yield* c.lookup.evidence(id)
            yield* c.proofs.merkle(id)
            yield* c.proofs.tsa(id)
            yield* c.proofs.tsaDetails(id)
            const ots = yield* c.anchors.ots(id)
            const proof = yield* c.anchors.otsProof(id)
            const meta = yield* c.claims.getMetadata(id)
            const patched = yield* c.claims.patchMetadata({ ...id, headers: { "if-match": meta.etag }, payload: { extra_data: { k: 1 } } })
            const stale = yield* Effect.flip(c.claims.patchMetadata({ ...id, headers: { "if-match": meta.etag }, payload: { source: "x" } }))
            yield* c.tags.putTags({ ...id, payload: { tags: [{ key: "env", value: "prod" }] } })
            const tags = yield* c.tags.getTags(id)
            const query = yield* c.tags.queryTags({ payload: { filter: { and: [{ key: "env", value: "prod" }] } } })
            yield* c.tags.deleteTag({ path: { id: a.id, key: "env" } })
            const token = yield* c.shareTokens.create({ payload: { attestation_ids: [a.id], expires_in: 600 } })
            yield* c.shareTokens.list()
            yield* c.shareTokens.get({ path: { token_id: token.id } })
            yield* c.shareTokens.accessLog({ path: { token_id: token.id } })
            const revoked = yield* c.shareTokens.revoke({ path: { token_id: token.id } })
            const hook = yield* c.webhooks.register({ payload: { url: receiver.url, events: ["t1_complete"] } })
            yield* c.webhooks.list()
            yield* c.webhooks.deliveries({ path: { webhook_id: hook.id } })
            yield* c.webhooks.remove({ path: { webhook_id: hook.id } })
            const scan = yield* c.census.scan({ payload: { hashes: [hash] } })
            yield* c.census.inventoryStats()
            const list = yield* c.census.createList({ payload: { hashes: [hash], expires_in_hours: 1 } })
            yield* c.census.lists()
            yield* c.census.getList({ path: { list_id: list.id } })
            const match = yield* c.derivedListsPublic.match({
              path: { list_id: list.id },
              payload: { list_key: list.list_key, values: deriveValues(list.list_key, [hash]).map((v) => HashHex.make(v)) }
            })
            yield* c.derivedListsPublic.signature({ path: { list_id: list.id } })
            yield* c.census.listAccessLog({ path: { list_id: list.id } })
            yield* c.census.revokeList({ path: { list_id: list.id } })
            const chain = yield* c.simulatedChain.headers()
            const last = chain.headers.at(-1)!
            const blockHash = yield* c.simulatedChain.blockHeight({ path: { height: last.height } })
            const header = yield* c.simulatedChain.blockHeader({ path: { hash: last.hash } })
            const brand = yield* Effect.flip(c.brand.brand({ path: { slug: "no-such-brand" } }))
            const deleted = yield* c.claims.deleteMetadata(id)
            return { info, health, oneKey, certs, batch, signature, evidence, ots, proof, patched, stale, tags, query, revoked, scan, match, blockHash, header, last, brand, deleted }
          }))
        expect(out.info).toHaveProperty("features")
        expect(out.health).toHaveProperty("status")
        expect(out.oneKey.kid).toBeTruthy()
        expect(out.certs.certificates.length).toBeGreaterThan(0)
        expect(out.batch.found).toBe(1)
        expect(out.evidence).toMatchObject({ id: expect.any(String), level: "T2" })
        expect(out.proof).toBeInstanceOf(Uint8Array)
        expect(out.patched.extra_data).toEqual({ k: 1 })
        expect((out.stale as { _tag: string })._tag).toBe("PreconditionFailed")
        expect(out.tags.tags).toEqual([{ key: "env", value: "prod" }])
        expect(out.query.attestations.map((x) => x.hash_hex)).toContain(out.evidence.hash_hex)
        expect(out.revoked.revoked).toBe(true)
        expect(out.scan.matched).toBe(1)
        expect(out.match).toEqual({ matched: 1, total: 1 })
        expect([out.blockHash, out.header]).toEqual([out.last.hash, out.last.header])
        expect((out.brand as { _tag: string })._tag).toBe("NotFound")
        expect(out.deleted.deleted).toBe(true)
      } finally {
        await receiver.close()
      }
    })
  })
}

describe("Effect client retries against an injecting server", () => {
  let upstream: TestServer
  let proxy: Server
  let url = ""
  const seen: Array<{ method: string; path: string; rid: string | undefined; injected: number | null }> = []
  let inject: (n: number, method: string, path: string) => number | null = () => null
  beforeAll(async () => {
    upstream = await startTestServer("sqlite")
    let counter = 0
    proxy = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Array<Buffer> = []
      for await (const c of req) chunks.push(c as Buffer)
      const injected = inject(++counter, req.method!, req.url!)
      seen.push({ method: req.method!, path: req.url!, rid: req.headers["x-request-id"] as string | undefined, injected })
      if (injected === 429) {
        res.writeHead(429, { "content-type": "application/json", "retry-after": "0" })
        return res.end(JSON.stringify({ error: true, code: "RATE_LIMITED", message: "slow down", details: [] }))
      }
      if (injected !== null) {
        res.writeHead(injected, { "content-type": "text/html" })
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

  it("attest batches survive 429/503 (same X-Request-Id per call); a share-token creation is not repeated", async () => {
    const key = (await upstream.createKey()).key
    const retries: Array<{ attempt: number; status: number | null; delayMs: number; requestId: string }> = []
    const layer = AttestdClient.layer({ baseUrl: url, apiKey: key, retry: { maxAttempts: 6, baseDelayMs: 5, onRetry: (i) => retries.push(i) } })
    const run = <A, E>(f: (c: AttestdClient["Type"]) => Effect.Effect<A, E>) => Effect.runPromise(Effect.flatMap(AttestdClient, f).pipe(Effect.provide(layer)))
    // every 3rd request 429 (Retry-After 0), every 5th 503 with an HTML body
    inject = (n) => (n % 3 === 0 ? 429 : n % 5 === 0 ? 503 : null)
    const hashes = Array.from({ length: 500 }, () => HashHex.make(randomHash()))
    const got = await run((c) =>
      Effect.forEach([0, 100, 200, 300, 400], (i) => c.attestations.attestBatch({ payload: { hashes: hashes.slice(i, i + 100) } })))
    expect(new Set(got.flatMap((r) => r.attestations.map((a) => a.hash_hex)))).toEqual(new Set(hashes))
    const injected = seen.filter((x) => x.injected !== null).length
    expect(injected).toBeGreaterThan(0)
    expect(retries.length).toBe(injected)
    expect(retries.every((r) => r.delayMs >= 0 && r.delayMs <= 5 * 2 ** (r.attempt - 1))).toBe(true)
    const byRid = new Map<string, number>()
    for (const x of seen) byRid.set(x.rid!, (byRid.get(x.rid!) ?? 0) + 1)
    expect([byRid.size, [...byRid.values()].reduce((a, b) => a + b, 0)]).toEqual([5, seen.length])
    console.log(`Effect client retry: ${seen.length} requests for 5 calls, ${injected} injected (429/503), delays ${JSON.stringify(retries.map((r) => r.delayMs))}`)

    // not repeatable: the 503 reaches the caller after one request
    seen.length = 0
    inject = (_n, method, path) => (method === "POST" && path === "/v1/share-tokens" ? 503 : null)
    const e = await run((c) => Effect.flip(c.shareTokens.create({ payload: { attestation_ids: [got[0]!.attestations[0]!.id], expires_in: 60 } })))
    expect(seen.length).toBe(1)
    // the contract declares 503, so an HTML body (a proxy's page, not the envelope) fails to decode: a ParseError
    expect(e instanceof ServiceUnavailable || (e as { _tag: string })._tag === "ParseError").toBe(true)
    // repeatable, but attempts are bounded: 3 attempts, then the failure
    seen.length = 0
    inject = () => 503
    const bounded = await Effect.runPromise(
      Effect.flatMap(AttestdClient, (c) => Effect.flip(c.info.info())).pipe(
        Effect.provide(AttestdClient.layer({ baseUrl: url, retry: { maxAttempts: 3, baseDelayMs: 1 } }))
      )
    )
    expect(bounded).toBeTruthy()
    expect([seen.length, new Set(seen.map((x) => x.rid)).size]).toEqual([3, 1])
    // retry: false sends once
    seen.length = 0
    await Effect.runPromise(
      Effect.flatMap(AttestdClient, (c) => Effect.flip(c.info.info())).pipe(Effect.provide(AttestdClient.layer({ baseUrl: url, retry: false })))
    )
    expect(seen.length).toBe(1)
    inject = () => null
  })
})

describe("client entry points load no server code", () => {
  it("PACKAGE_VERSION is package.json's version", () => {
    expect(PACKAGE_VERSION).toBe(JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")).version)
  })

  for (const entry of ["src/client.ts", "src/client-effect.ts"]) {
    it(`${entry} bundles for the browser: no node:*, no server module; size stated`, async () => {
      const out = await esbuild.build({
        entryPoints: [join(REPO_ROOT, entry)],
        bundle: true,
        platform: "browser",
        format: "esm",
        minify: true,
        write: false,
        metafile: true,
        logLevel: "silent"
      })
      const inputs = Object.keys(out.metafile.inputs)
      expect(inputs.filter((f) => SERVER_MODULE.test(f) || f.startsWith("node:"))).toEqual([])
      const code = out.outputFiles[0]!.contents
      expect(new TextDecoder().decode(code)).not.toMatch(/from\s*"node:|require\("node:/)
      console.log(`${entry}: ${code.length} bytes minified, ${gzipSync(code).length} bytes gzipped`)
    })
  }

  it("a Node process importing attestd/client and attestd/client/effect resolves no server module", async () => {
    requireDist()
    const dir = mkdtempSync(join(tmpdir(), "attestd-modules-"))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const log = join(dir, "resolved.txt")
    const hooks = `
      import { appendFileSync } from "node:fs"
      export async function resolve(specifier, context, next) {
        const r = await next(specifier, context)
        appendFileSync(process.env.RESOLVE_LOG, r.url + " " + context.parentURL + "\\n")
        return r
      }`
    const main = `
      import { register } from "node:module"
      register("data:text/javascript,${encodeURIComponent(hooks)}")
      const c = await import("attestd/client")
      const e = await import("attestd/client/effect")
      if (typeof c.createClient !== "function" || typeof c.verifyBundle !== "function" || typeof c.verifyWebhook !== "function" || typeof c.deriveValues !== "function") throw new Error("attestd/client exports")
      if (typeof e.makeEffectClient !== "function" || e.AttestdClient === undefined) throw new Error("attestd/client/effect exports")
      process.stdout.write("ok")`
    const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", main], {
      cwd: REPO_ROOT,
      env: { ...process.env, RESOLVE_LOG: log }
    })
    expect(stdout).toBe("ok")
    const resolved = readFileSync(log, "utf8").trim().split("\n").map((l) => l.split(" ")[0]!)
    expect(resolved.some((u) => u.endsWith("/dist/client-effect.js"))).toBe(true)
    expect(resolved.some((u) => u.endsWith("/dist/Api.js"))).toBe(true)
    expect(resolved.filter((u) => SERVER_MODULE.test(u) || /^node:(http|https|net|dns|fs|child_process)/.test(u))).toEqual([])
  })
})
