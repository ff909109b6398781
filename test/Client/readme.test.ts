/**
 * The README's "Use it from code" examples run as written: each code block is
 * taken from README.md, its types stripped, and run by a Node process that
 * imports the package by its own name (`attestd/client`, `attestd/client/effect`,
 * from dist/) against a real server on both stores.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { promisify } from "node:util"
import * as esbuild from "esbuild"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { REPO_ROOT, requireDist } from "../helpers/process.js"
import { startTestServer, type TestServer } from "../helpers/server.js"

const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8")

/** The first ```ts block after the heading. */
const example = (heading: string): string => {
  const at = readme.indexOf(`\n${heading}\n`)
  if (at < 0) throw new Error(`README has no "${heading}"`)
  const m = /```ts\n([\s\S]*?)\n```/.exec(readme.slice(at))
  if (!m) throw new Error(`no ts block after "${heading}"`)
  return m[1]!
}

const runExample = async (code: string, env: Record<string, string>): Promise<Array<string>> => {
  const js = (await esbuild.transform(code, { loader: "ts", format: "esm", target: "node20" })).code
  // inside the package directory, so `attestd/...` resolves to this package (self-reference)
  const dir = mkdtempSync(join(REPO_ROOT, ".readme-example-"))
  try {
    writeFileSync(join(dir, "example.mjs"), js)
    const { stdout } = await promisify(execFile)(process.execPath, [join(dir, "example.mjs")], { env: { ...process.env, ...env } })
    return stdout.trim().split("\n")
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

for (const dialect of await dialects()) {
  describe(`README examples (${dialect})`, () => {
    let server: TestServer
    let env: Record<string, string>
    beforeAll(async () => {
      requireDist()
      server = await startTestServer(dialect)
      env = { ATTESTD_URL: server.url, ATTESTD_API_KEY: (await server.createKey()).key }
    })
    afterAll(async () => {
      await server?.close()
    })

    it("### Promise client", async () => {
      const first = await runExample(example("### Promise client"), env)
      expect(first).toEqual(["created", "T0 verified", "404 NOT_FOUND"])
      // attesting again is idempotent
      expect((await runExample(example("### Promise client"), env))[0]).toBe("existing")
    })

    it("### Effect client", async () => {
      const out = await runExample(example("### Effect client"), env)
      expect(out).toHaveLength(1)
      expect(out[0]).toMatch(/^att_[A-Za-z0-9_-]+ T0 NotFound: /)
    })
  })
}
