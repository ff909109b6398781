/**
 * The Effect client (`attestd/client/effect`): HttpApiClient over src/Api.ts
 * against the real in-process server on both stores (attest, lookup, verify,
 * typed errors), and the client entry points load no server modules.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { gzipSync } from "node:zlib"
import * as esbuild from "esbuild"
import { Effect, Either } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AttestdClient, AuthError, HashHex, NotFound } from "../../src/client-effect.js"
import { PACKAGE_VERSION } from "../../src/Info/Version.js"
import { dialects } from "../helpers/databases.js"
import { REPO_ROOT, requireDist } from "../helpers/process.js"
import { randomHash, startTestServer, type TestServer } from "../helpers/server.js"

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
    const log = join(mkdtempSync(join(tmpdir(), "attestd-modules-")), "resolved.txt")
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
