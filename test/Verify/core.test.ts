/**
 * The portable verification core in Node: the data-driven cases of
 * cases.ts over real bundles from an in-process server; the noble fallback
 * where WebCrypto is missing; the core's portability; and the CLI shell
 * (`attestd verify`, in-process: test/helpers/cli.ts) for its exit codes and `--server`.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { hexToBytes } from "../../src/Domain/Bytes.js"
import { verifyBundle } from "../../src/Verify/Verifier.js"
import { cliInProcess } from "../helpers/cli.js"
import { REPO_ROOT } from "../helpers/process.js"
import { cases, type Fixtures, runCase, type VerifyFn } from "./cases.js"
import { type LiveFixtures, makeFixtures } from "./fixtures.js"

const verify: VerifyFn = (bundle, options) => verifyBundle(bundle, options)

let live: LiveFixtures
let fx: Fixtures

beforeAll(async () => {
  live = await makeFixtures()
  fx = live.fixtures
}, 90_000)

afterAll(async () => {
  await live?.close()
})

describe("verification core (Node, WebCrypto)", () => {
  for (const c of cases) {
    it(c.name, async () => {
      expect(await runCase(verify, fx, c)).toEqual([])
    })
  }

  it("reports WebCrypto as its backend", async () => {
    expect((await verifyBundle(fx.t0, { keys: fx.keys })).crypto).toBe("webcrypto")
  })
})

describe("verification core without crypto.subtle (noble fallback)", () => {
  const t0Cases = cases.filter((c) => c.checks.t1 === "absent" || /high-S|forged/.test(c.name))

  beforeAll(() => {
    const real = globalThis.crypto
    vi.stubGlobal("crypto", { getRandomValues: (a: Uint8Array) => real.getRandomValues(a) })
  })
  afterAll(() => {
    vi.unstubAllGlobals()
  })

  it("T0 verifies with noble, and says so", async () => {
    expect(globalThis.crypto.subtle).toBeUndefined()
    const r = await verifyBundle(fx.t0, { keys: fx.keys })
    expect(r).toMatchObject({ verdict: "verified", crypto: "noble", checks: { t0: { status: "ok" } } })
    const tampered = structuredClone(fx.t0)
    tampered.t0.registeredAt = tampered.t0.registeredAt.replace(/\d(?=\+00:00$)/, (d: string) => String((Number(d) + 1) % 10))
    expect((await verifyBundle(tampered, { keys: fx.keys })).checks.t0.status).toBe("failed")
  })

  it("the T0 cases that need no WebCrypto to prepare give the same results (high-S rejected)", async () => {
    for (const c of t0Cases.filter((c) => !/forged/.test(c.name))) expect(await runCase(verify, fx, c), c.name).toEqual([])
  })

  it("T1 says plainly that the token cannot be checked without WebCrypto", async () => {
    const r = await verifyBundle(fx.t1, { keys: fx.keys, tsaCaPem: fx.tsaCaPem })
    expect(r.checks.t1?.status).toBe("failed")
    expect(r.checks.t1?.detail).toMatch(/WebCrypto/)
  })
})

describe("portability of the core", () => {
  it("src/Verify and src/Domain import no node:* module and use no Buffer", () => {
    const offenders: Array<string> = []
    for (const dir of ["src/Verify", "src/Domain"]) {
      for (const f of readdirSync(join(REPO_ROOT, dir))) {
        const text = readFileSync(join(REPO_ROOT, dir, f), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "")
        if (/from\s+"node:|require\("node:|\bBuffer\b|new Function|from\s+"effect"|@effect\/sql/.test(text) && f !== "HashHex.ts" && f !== "Errors.ts" && f !== "AttestationId.ts" && f !== "Jwk.ts") {
          offenders.push(`${dir}/${f}`)
        }
      }
    }
    expect(offenders).toEqual([])
  })

  it("the modules the verifier reaches import no node:* module", () => {
    const seen = new Set<string>()
    const visit = (file: string): void => {
      if (seen.has(file)) return
      seen.add(file)
      const text = readFileSync(file, "utf8")
      expect(text, file).not.toMatch(/from\s+"node:|\bBuffer\./)
      for (const m of text.matchAll(/from\s+"(\.{1,2}\/[^"]+)\.js"/g)) visit(join(file, "..", `${m[1]}.ts`))
    }
    visit(join(REPO_ROOT, "src/Verify/Verifier.ts"))
    expect(seen.size).toBeGreaterThan(5)
  })
})

describe("attestd verify (the CLI shell over the core)", () => {
  let dir: string
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "attestd-verify-core-"))
    const write = (name: string, v: unknown) => writeFileSync(join(dir, name), typeof v === "string" ? v : JSON.stringify(v))
    write("t1.json", fx.t1)
    write("t2.json", fx.t2)
    write("keys.json", { keys: fx.keys })
    write("root.pem", fx.tsaCaPem)
    write("headers.json", fx.otsHeaders)
    writeFileSync(join(dir, "data.bin"), hexToBytes(fx.dataHex))
    const tampered = structuredClone(fx.t2)
    tampered.t2.bitcoinBlockHeader = tampered.t2.bitcoinBlockHeader.slice(0, 80) + (tampered.t2.bitcoinBlockHeader[80] === "0" ? "1" : "0") + tampered.t2.bitcoinBlockHeader.slice(81)
    write("tampered.json", tampered)
    write("not-json.json", "{")
  })
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  /** The same command in-process (test/helpers/cli.ts), in the fixtures directory. */
  const cli = (args: ReadonlyArray<string>) => cliInProcess(["verify", ...args], {}, { cwd: dir })

  it("exit 0 verified, 3 partial, 1 failed, 2 unreadable input", async () => {
    const [verified, partial, failed, unreadable, missing] = await Promise.all([
      cli(["t2.json", "--file", "data.bin", "--keys", "keys.json", "--tsa-ca", "root.pem", "--ots-headers", "headers.json"]),
      cli(["t2.json"]),
      cli(["tampered.json", "--keys", "keys.json"]),
      cli(["not-json.json"]),
      cli(["t2.json", "--keys", "no-such-file.json"])
    ])
    expect(verified.code, verified.stderr).toBe(0)
    expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true, verdict: "verified", verified_level: "T2", checks: { t0: { trust: "--keys keys.json" }, t1: { trust: "--tsa-ca root.pem" }, t2: { trust: "--ots-headers headers.json" } } })
    expect(verified.stderr).toMatch(/VERIFIED/)
    expect(partial.code, partial.stderr).toBe(3)
    expect(JSON.parse(partial.stdout)).toMatchObject({ ok: false, verdict: "partial", checks: { t0: { status: "unanchored" } } })
    expect(partial.stderr).toMatch(/PARTIAL/)
    expect(partial.stderr).not.toMatch(/: VERIFIED/)
    expect(failed.code, failed.stderr).toBe(1)
    expect(JSON.parse(failed.stdout)).toMatchObject({ verdict: "failed", checks: { t2: { status: "failed" } } })
    expect(unreadable.code).toBe(2)
    expect(JSON.parse(unreadable.stdout)).toMatchObject({ ok: false })
    expect(missing.code).toBe(2)
  })

  it("--server fetches the instance's keys and TSA anchors (T1 verified, named as published by it)", async () => {
    const r = await cli(["t1.json", "--server", live.server.url])
    expect(r.code, r.stderr).toBe(0)
    const report = JSON.parse(r.stdout)
    expect(report.checks.t0.trust).toBe(`keys published by ${live.server.url}`)
    expect(report.checks.t1.trust).toBe(`TSA trust anchors published by ${live.server.url}`)
    // T2 needs its block confirmed too: --server alone leaves it unanchored (exit 3), with headers it verifies
    const t2 = await cli(["t2.json", "--server", live.server.url])
    expect(t2.code, t2.stderr).toBe(3)
    expect(JSON.parse(t2.stdout).checks).toMatchObject({ t0: { status: "ok" }, t1: { status: "ok" }, t2: { status: "unanchored" } })
    const t2h = await cli(["t2.json", "--server", live.server.url, "--ots-headers", "headers.json"])
    expect(t2h.code, t2h.stderr).toBe(0)
  })

  it("--server that does not answer, or --bitcoin-source that is not a URL: unreadable input (2)", async () => {
    const [down, badSource] = await Promise.all([
      cli(["t1.json", "--server", "http://127.0.0.1:9"]),
      cli(["t2.json", "--bitcoin-source", "ftp://x"])
    ])
    expect(down.code).toBe(2)
    expect(badSource.code).toBe(2)
  })

  it("--bitcoin-source asks the Esplora API: an unreachable source leaves T2 unanchored (3)", async () => {
    const r = await cli(["t2.json", "--keys", "keys.json", "--tsa-ca", "root.pem", "--bitcoin-source", "http://127.0.0.1:9"])
    expect(r.code, r.stderr).toBe(3)
    expect(JSON.parse(r.stdout).checks.t2.status).toBe("unanchored")
  })
})
