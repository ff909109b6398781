/**
 * What `attestd verify` and the verifier page show a person is escaped: a bundle is
 * untrusted, and raw ESC / CR / LF / OSC / C1 / bidi characters in any of its fields
 * would forge lines under the verdict or drive the terminal.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { jsonForTerminal, shown } from "../../src/Verify/Display.js"
import { summarize, verifyBundle, type VerifyOptions } from "../../src/Verify/Verifier.js"
import { cliInProcess } from "../helpers/cli.js"
import type { Fixtures } from "./cases.js"
import { type LiveFixtures, makeFixtures } from "./fixtures.js"

/** ESC-based CSI and OSC (a hyperlink and a title), CR/LF forging a line, a C1 CSI, DEL, NUL, a bidi override, the separators. */
const HOSTILE = "x\u001b[2K\r\nattestd verify: VERIFIED forged\u001b]8;;https://evil.example\u0007link\u001b]8;;\u0007" +
  "\u001b]0;title\u001b\\\u009b31m\u007f\u0000\u202eevil\u2028\u2029\u2066\u0085"

/** Any character a terminal or a page would act on (a summary's own line breaks are checked separately). */
const RAW = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any

/** Every path to a leaf (string, number, boolean, null) of a JSON value. */
const leaves = (v: Json, at: Array<string | number> = []): Array<Array<string | number>> =>
  v !== null && typeof v === "object"
    ? Object.entries(v).flatMap(([k, c]) => leaves(c, [...at, Array.isArray(v) ? Number(k) : k]))
    : [at]

const setAt = (v: Json, path: ReadonlyArray<string | number>, value: unknown): Json => {
  const copy = structuredClone(v)
  let o = copy
  for (const k of path.slice(0, -1)) o = o[k]
  o[path[path.length - 1]!] = value
  return copy
}

const LINE = /^(attestd verify: (VERIFIED|FAILED|PARTIAL)|  (input |T0 |T1 |T2 |Bitcoin |note: ))/

describe("shown", () => {
  it("escapes C0, DEL, C1, U+2028/2029 and bidi controls; leaves other text alone", () => {
    expect(shown("a\u001b[31mb\r\nc\u007f\u0085\u009b\u2028\u2029\u202e\u2067\u200f")).toBe(
      "a\\x1b[31mb\\x0d\\x0ac\\x7f\\x85\\x9b\\u2028\\u2029\\u202e\\u2067\\u200f"
    )
    expect(shown("plain Ünïcode 日本 ✓ text")).toBe("plain Ünïcode 日本 ✓ text")
    expect(shown(HOSTILE)).not.toMatch(RAW)
    expect(shown(HOSTILE)).not.toContain("\n")
  })

  it("jsonForTerminal escapes what JSON.stringify leaves raw, and parses back to the same value", () => {
    const v = { a: HOSTILE, b: [HOSTILE] }
    const text = jsonForTerminal(v, 2)
    expect(text.split("\n").every((l) => !RAW.test(l))).toBe(true)
    expect(JSON.parse(text)).toEqual(v)
  })
})

describe("the human summary of a hostile bundle", () => {
  let live: LiveFixtures
  let f: Fixtures
  let trust: VerifyOptions
  let dir: string
  beforeAll(async () => {
    live = await makeFixtures()
    f = live.fixtures
    trust = { keys: f.keys as never, tsaCaPem: f.tsaCaPem, otsHeaders: f.otsHeaders }
    dir = mkdtempSync(join(tmpdir(), "attestd-display-"))
  }, 90_000)
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true })
    await live?.close()
  })

  it("t1.batchId with ESC, CR/LF and OSC: the verdict stands, no line is forged, nothing raw is printed", async () => {
    const bundle = setAt(f.t2, ["t1", "batchId"], HOSTILE)
    const report = await verifyBundle(bundle, trust)
    const text = summarize(report)
    expect(text).not.toMatch(RAW)
    expect(text.split("\n").filter((l) => l.includes("VERIFIED forged"))).toHaveLength(1)
    for (const line of text.split("\n")) expect(line).toMatch(LINE)
  })

  it("every field of a T2 bundle, each in turn: the summary holds no raw control character and only its own lines", async () => {
    const paths = leaves(f.t2)
    expect(paths.length).toBeGreaterThan(15)
    for (const path of paths) {
      const bundle = setAt(f.t2, path, HOSTILE)
      const text = summarize(await verifyBundle(bundle, trust))
      expect(text, path.join(".")).not.toMatch(RAW)
      for (const line of text.split("\n")) expect(line, `${path.join(".")}: ${line}`).toMatch(LINE)
    }
  }, 60_000)

  it("every field as an object key or array item too (values shown through JSON.stringify or String)", async () => {
    for (const path of leaves(f.t2)) {
      for (const value of [[HOSTILE], { [HOSTILE]: HOSTILE }]) {
        const text = summarize(await verifyBundle(setAt(f.t2, path, value), trust))
        expect(text, path.join(".")).not.toMatch(RAW)
        for (const line of text.split("\n")) expect(line, `${path.join(".")}: ${line}`).toMatch(LINE)
      }
    }
  }, 60_000)

  it("attestd verify prints the escaped summary on stderr and JSON without raw C1/bidi characters on stdout", async () => {
    const file = join(dir, "hostile.json")
    writeFileSync(file, JSON.stringify(setAt(setAt(f.t2, ["t1", "batchId"], HOSTILE), ["id"], HOSTILE)))
    const keys = join(dir, "keys.json")
    writeFileSync(keys, JSON.stringify({ keys: f.keys }))
    const run = await cliInProcess(["verify", file, "--keys", keys])
    expect(run.stderr).not.toMatch(RAW)
    for (const line of run.stderr.trimEnd().split("\n")) expect(line).toMatch(LINE)
    expect(run.stdout.split("\n").every((l) => !RAW.test(l))).toBe(true)
    expect(JSON.parse(run.stdout).id).toBe(HOSTILE)
  })
})
