/**
 * Bitcoin header sources: production refuses to start without one (config and
 * a real `serve` process), and the Esplora adapter against real HTTP servers
 * (the test calendar server answers the Esplora endpoints of this process's
 * simulated chain): agreement, disagreement, a source down, a bad answer.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ConfigProvider, Effect, Either } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { blockHash, headerBytes } from "../../../src/Domain/BitcoinHeader.js"
import { BitcoinHeaderSources, layerEsplora } from "../../../src/Platform/Bitcoin/HeaderSources.js"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../../helpers/simulatedCalendarServer.js"
import { SimulatedBitcoinChain } from "../../../src/Platform/Calendar/SimulatedCalendar.js"
import { appConfig } from "../../../src/Platform/Config.js"
import { BIN, requireDist } from "../../helpers/process.js"

const load = (env: Record<string, string>) =>
  Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))

const PRODUCTION = { ATTESTD_MODE: "production", ATTESTD_TSA_URL: "http://127.0.0.1:9/tsa", ATTESTD_TSA_CA_FILE: "/nonexistent/tsa-ca.pem", ATTESTD_OTS_CALENDARS: "http://127.0.0.1:9/cal" }

describe("ATTESTD_BITCOIN_SOURCES", () => {
  it("production refuses to start without a source; with sources it loads them; a non-http source is refused", () => {
    const missing = load(PRODUCTION)
    expect(Either.isLeft(missing)).toBe(true)
    expect(String(Either.isLeft(missing) ? missing.left : "")).toMatch(/ATTESTD_BITCOIN_SOURCES/)
    const ok = load({ ...PRODUCTION, ATTESTD_BITCOIN_SOURCES: "https://blockstream.info/api, https://mempool.space/api" })
    expect(Either.isRight(ok) && ok.right.bitcoinSources).toEqual(["https://blockstream.info/api", "https://mempool.space/api"])
    expect(Either.isLeft(load({ ...PRODUCTION, ATTESTD_BITCOIN_SOURCES: "ftp://x" }))).toBe(true)
    const demo = load({})
    expect(Either.isRight(demo) && demo.right.bitcoinSources).toEqual([])
  })

  it("`attestd serve` in production without a source exits non-zero naming the variable", async () => {
    requireDist()
    const bin = BIN
    const dir = mkdtempSync(join(tmpdir(), "attestd-btc-"))
    try {
      const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
        execFile(process.execPath, [bin, "serve"], {
          cwd: dir,
          env: { ...process.env, ...PRODUCTION, ATTESTD_DATA_DIR: dir, PORT: "0", NODE_OPTIONS: "" },
          timeout: 60_000
        }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, out: stdout + stderr }))
      })
      expect(result.code).not.toBe(0)
      expect(result.out).toMatch(/ATTESTD_BITCOIN_SOURCES/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe("Esplora header sources over HTTP", () => {
  let a: SimulatedCalendarServer
  let b: SimulatedCalendarServer
  let height: number
  beforeAll(async () => {
    // two sources serving one chain
    const chain = new SimulatedBitcoinChain()
    ;[a, b] = await Promise.all([startSimulatedCalendarServer({ chain }), startSimulatedCalendarServer({ chain })])
    height = a.mine().height
  })
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()])
  })
  const ask = (sources: ReadonlyArray<string>, h: number) =>
    Effect.runPromise(Effect.either(Effect.flatMap(BitcoinHeaderSources, (s) => s.header(h)).pipe(
      Effect.provide(layerEsplora({ sources, timeout: "2 seconds" }))
    )))

  it("two sources that agree give the header; its hash is the block hash they gave", async () => {
    const r = await ask([a.url, b.url], height)
    if (Either.isLeft(r)) throw new Error(r.left.message)
    expect(r.right.header).toBe(a.blockHeaders().get(height)!.header)
    expect(blockHash(headerBytes(r.right.header))).toBe(r.right.hash)
  })

  it("sources that disagree, a source down, an unknown height: no header", async () => {
    b.setLying(true)
    try {
      const r = await ask([a.url, b.url], height)
      expect(Either.isLeft(r) && r.left).toMatchObject({ disagreement: true, message: expect.stringMatching(/disagree/) })
      // one lying source alone is self-consistent: agreement is what catches it
      expect(Either.isRight(await ask([b.url], height))).toBe(true)
    } finally {
      b.setLying(false)
    }
    b.setDown(true)
    try {
      const r = await ask([a.url, b.url], height)
      expect(Either.isLeft(r) && r.left.disagreement).toBe(false)
    } finally {
      b.setDown(false)
    }
    const unknown = await ask([a.url], height + 100_000)
    expect(Either.isLeft(unknown) && unknown.left.message).toMatch(/HTTP 404/)
    expect(Either.isRight(await ask([a.url, b.url], height))).toBe(true)
  })
})
