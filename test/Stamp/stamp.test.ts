/**
 * `attestd stamp` / `attestd upgrade` / `attestd verify FILE` (issue 13 §2), the CLI
 * (in-process, test/helpers/cli.ts; each command once as a real `node dist/cli.mjs`
 * process) against a real demo server (in-process, short seal/anchor windows, its own
 * simulated calendar and chain) on both stores: stamp → upgrade --wait T2 → verify;
 * FILE.ots parsed by the `opentimestamps` package, its digest the file's SHA-256; a
 * tampered file fails; HMAC stamps; exit codes. Then 500 files in one stamp through a
 * proxy that injects 429 and 503 (some after the server did the work): every receipt
 * written, no attestation lost or duplicated.
 */
import { execFile } from "node:child_process"
import { createHash, createHmac } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseDurationMs, progressBar } from "../../src/Stamp/Files.js"
import { parseHmacKey } from "../../src/Stamp/Receipt.js"
import { stampFiles } from "../../src/Stamp/Stamp.js"
import { upgradeExitCode, upgradeReceipts } from "../../src/Stamp/Upgrade.js"
import { parseOts } from "../helpers/anchoring.js"
import { dialects } from "../helpers/databases.js"
import { cliInProcess } from "../helpers/cli.js"
import { BIN, requireDist } from "../helpers/process.js"
import { startTestServer, type TestServer } from "../helpers/server.js"

const FAST = {
  sealInterval: Duration.millis(300),
  anchorInterval: Duration.seconds(1),
  otsUpgradeInterval: Duration.millis(300),
  demoConfirmDelay: Duration.seconds(1)
}

const sha256 = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex")

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly json: any
}

const withJson = ({ code, stderr, stdout }: { code: number; stdout: string; stderr: string }): Run => {
  let json: unknown = null
  for (const candidate of [stdout, stdout.trim().split("\n").pop() ?? ""]) {
    try {
      json = JSON.parse(candidate)
      break
    } catch {
      json = null
    }
  }
  return { code, stdout, stderr, json }
}

/** `node dist/cli.mjs …` with only the given ATTESTD_* variables: the smoke test of each command as a process. */
const cliProcess = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> => {
  requireDist()
  const base: NodeJS.ProcessEnv = { ...process.env }
  for (const k of Object.keys(base)) if (k.startsWith("ATTESTD_")) delete base[k]
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...base, ...env }, encoding: "utf8", timeout: 120_000 }, (err, stdout, stderr) => {
      resolve(withJson({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }))
    })
  })
}

/** The same command in-process (test/helpers/cli.ts), seeing only the given ATTESTD_* variables. */
const cli = async (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> => withJson(await cliInProcess(args, env))

const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8"))

const dirs: Array<string> = []
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "attestd-stamp-"))
  dirs.push(d)
  return d
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

for (const dialect of await dialects()) {
  describe(`stamp → upgrade → verify (${dialect})`, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer(dialect, FAST)
    }, 60_000)
    afterAll(async () => {
      await server?.close()
    })

    it("stamps files, upgrades the receipts to T2 with FILE.ots, verifies the files; a tampered file fails", async () => {
      // on SQLite, stamp, upgrade and verify run once as real processes (dist/cli.mjs); everything else in-process
      const smoke = dialect === "sqlite" ? cliProcess : cli
      const { key } = await server.createKey({ scopes: ["attest", "batch", "metadata:read"] })
      const env = { ATTESTD_URL: server.url, ATTESTD_API_KEY: key }
      const dir = tmp()
      const files = ["a.txt", "b.bin", "c.txt", "same-as-a.txt"].map((n) => join(dir, n))
      const contents = [`first ${Math.random()}\n`, new Uint8Array(70_000).map((_, i) => (i * 7) % 256), `third ${Math.random()}`]
      files.forEach((f, i) => writeFileSync(f, contents[[0, 1, 2, 0][i]!]!))

      const stamped = await smoke(["stamp", ...files, "--source", "cli-test", "--extra-data", "{\"project\":\"x\"}"], env)
      expect(stamped.code, stamped.stderr).toBe(0)
      expect(stamped.stderr).toMatch(/^stamped 4 of 4 file\(s\) in [\d.]+ s \(\d+ requests, 0 retried\)$/m)
      expect(stamped.json).toMatchObject({ ok: true, stamped: 4, failed: 0 })
      const ids = new Map<string, string>()
      for (const f of files) {
        const receipt = readJson(`${f}.attestd.json`)
        // the bundle exactly as the server serves it
        const served: any = await (await fetch(`${server.url}/v1/attestation/${receipt.id}/evidence`)).json()
        expect(receipt.hash_hex).toBe(sha256(readFileSync(f)))
        expect(receipt.id).toBe(served.id)
        expect(receipt.t0).toEqual(served.t0)
        ids.set(f, receipt.id)
      }
      expect(ids.get(files[0]!)).toBe(ids.get(files[3]!)) // same content, one attestation
      const meta = await (await fetch(`${server.url}/v1/attestation/${ids.get(files[0]!)}/metadata`, { headers: { authorization: `Bearer ${key}` } })).json()
      expect(meta).toMatchObject({ source: "cli-test", extra_data: { project: "x" } })

      const receipts = files.map((f) => `${f}.attestd.json`)
      const upgraded = await smoke(["upgrade", ...receipts, "--wait", "T2", "--timeout", "60s"], env)
      expect(upgraded.code, upgraded.stderr + upgraded.stdout).toBe(0)
      expect(upgraded.json).toMatchObject({ ok: true, reached: 4, pending: 0, failed: 0 })
      for (const f of files) {
        const receipt = readJson(`${f}.attestd.json`)
        expect(receipt.level).toBe("T2")
        expect(receipt.t2.otsProof).toEqual(expect.any(String))
        // FILE.ots: the standard file, parsed by the reference implementation; digest = the file's SHA-256
        const ots = parseOts(new Uint8Array(readFileSync(`${f}.ots`)))
        expect(ots.hashOp).toBe("sha256")
        expect(ots.fileDigest).toBe(sha256(readFileSync(f)))
        expect(ots.attestations.some((a) => a.kind === "bitcoin")).toBe(true)
        expect(readFileSync(`${f}.ots`)).toEqual(Buffer.from(receipt.t2.otsProof, "base64"))
      }
      // Upgrading again changes nothing and exits 0.
      const again = await cli(["upgrade", ...receipts], env)
      expect(again.code).toBe(0)
      expect(again.json.receipts.every((r: { upgraded: boolean; ots: string | null }) => !r.upgraded && r.ots === null)).toBe(true)

      // verify FILE: finds FILE.attestd.json, hashes FILE, --server from ATTESTD_URL → verified to T2
      for (const [i, f] of files.slice(0, 2).entries()) {
        const v = await (i === 0 ? smoke : cli)(["verify", f], env)
        expect(v.code, v.stdout + v.stderr).toBe(0)
        expect(v.json).toMatchObject({ verdict: "verified", verified_level: "T2", checks: { input: { status: "ok", source: "file" } } })
      }
      // the receipt itself is still a bundle `attestd verify BUNDLE` takes
      const asBundle = await cli(["verify", `${files[1]}.attestd.json`, "--file", files[1]!, "--server", server.url])
      expect(asBundle.code, asBundle.stdout).toBe(0)

      // a tampered file fails (exit 1), the receipt untouched
      writeFileSync(files[2]!, `${contents[2]}!`)
      const tampered = await cli(["verify", files[2]!], env)
      expect(tampered.code).toBe(1)
      expect(tampered.json).toMatchObject({ verdict: "failed", checks: { input: { status: "failed" } } })
    }, 120_000)

    it("HMAC stamps: the receipt records the HMAC (never the key or the file's SHA-256); verify redoes it with the key", async () => {
      const { key } = await server.createKey({ scopes: ["attest"] })
      const env = { ATTESTD_URL: server.url, ATTESTD_API_KEY: key }
      const dir = tmp()
      const file = join(dir, "serial.txt")
      writeFileSync(file, "SN-000123")
      const hmacKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
      const stamped = await cli(["stamp", file, "--hmac-key", hmacKey], env)
      expect(stamped.code, stamped.stderr).toBe(0)
      const text = readFileSync(`${file}.attestd.json`, "utf8")
      const receipt = JSON.parse(text)
      const fileSha = sha256(readFileSync(file))
      const hmac = createHmac("sha256", Buffer.from(hmacKey, "hex")).update(fileSha).digest("hex")
      expect(receipt).toMatchObject({ attestd_receipt: 1, digest: { algorithm: "HMAC-SHA256", message: "sha256-hex" }, evidence: { hash_hex: hmac } })
      expect(text).not.toContain(fileSha)
      expect(text).not.toContain(hmacKey)

      expect((await cli(["verify", file, "--hmac-key", hmacKey], env)).json).toMatchObject({ verdict: "verified", checks: { input: { status: "ok" } } })
      // the wrapper is accepted wherever a bundle is: here with the attested HMAC as --hash
      const wrapped = await cli(["verify", `${file}.attestd.json`, "--hash", hmac, "--server", server.url])
      expect(wrapped.code, wrapped.stdout + wrapped.stderr).toBe(0)
      expect(wrapped.json).toMatchObject({ verdict: "verified", checks: { input: { status: "ok", source: "hash" } } })
      const noKey = await cli(["verify", file], env)
      expect(noKey.code).toBe(2)
      expect(noKey.stderr).toMatch(/give the same --hmac-key/)
      const wrongKey = await cli(["verify", file, "--hmac-key", "ff".repeat(32)], env)
      expect(wrongKey.code).toBe(2)
      expect(wrongKey.stderr).toMatch(/not the key this receipt was stamped with/)
      writeFileSync(file, "SN-000124")
      expect((await cli(["verify", file, "--hmac-key", hmacKey], env)).code).toBe(1)

      // upgrade keeps the wrapper, writes no .ots (its digest would be the HMAC, not the file's)
      const up = await cli(["upgrade", `${file}.attestd.json`, "--wait", "T1", "--timeout", "30s"], env)
      expect(up.code, up.stderr).toBe(0)
      expect(readJson(`${file}.attestd.json`)).toMatchObject({ attestd_receipt: 1, evidence: { hash_hex: hmac } })
      expect(existsSync(`${file}.ots`)).toBe(false)
    }, 60_000)

    it("reports each failed file; an unreadable file exits 2 (the others stamped), bad invocations exit 2 and write nothing", async () => {
      const { key } = await server.createKey({ scopes: ["attest"] })
      const env = { ATTESTD_URL: server.url, ATTESTD_API_KEY: key }
      const dir = tmp()
      const good = join(dir, "good.txt")
      writeFileSync(good, "good")
      const missing = join(dir, "missing.txt")
      const r = await cli(["stamp", good, missing], env)
      expect(r.code).toBe(2)
      expect(r.json).toMatchObject({ ok: false, stamped: 1, failed: 1, files: [{ file: good, ok: true }, { file: missing, ok: false }] })
      expect(r.stderr).toMatch(/missing\.txt: cannot read/)
      expect(existsSync(`${good}.attestd.json`)).toBe(true)

      const other = join(dir, "other.txt")
      writeFileSync(other, "other")
      for (const [args, e, msg] of [
        [["stamp", other], { ATTESTD_API_KEY: key }, /no server/],
        [["stamp", other, "--extra-data", "[1]"], env, /must be a JSON object/]
      ] as const) {
        const bad = await cli(args, e)
        expect(bad.code, `${args.join(" ")}: ${bad.stderr}`).toBe(2)
        expect(bad.stderr).toMatch(msg)
        expect(bad.json).toMatchObject({ ok: false, error: expect.stringMatching(msg) })
      }
      expect(existsSync(`${other}.attestd.json`)).toBe(false)
      expect(() => parseHmacKey("abc")).toThrow(/must be hex/)
      expect(() => parseHmacKey("aabb")).toThrow(/at least 16 bytes/)
      expect(parseDurationMs("500ms")).toBe(500)
      expect(parseDurationMs("10m")).toBe(600_000)
      expect(parseDurationMs("soon")).toBeNull()

      // a wrong key: the server's 401 is reported per file, nothing written
      const unauthorized = await stampFiles({ files: [other], server: server.url, apiKey: "atk_test_" + "A".repeat(32) })
      expect(unauthorized).toMatchObject({ stamped: 0, failed: 1, retries: 0, files: [{ ok: false, error: expect.stringMatching(/^attest failed: /) }] })
      expect(existsSync(`${other}.attestd.json`)).toBe(false)

      // an unreadable receipt fails the upgrade (exit 2: unreadable input); the good one is still processed
      const junk = join(dir, "junk.attestd.json")
      writeFileSync(junk, "not json")
      const up = await upgradeReceipts({ receipts: [junk, `${good}.attestd.json`], server: server.url, target: "T0" })
      expect(up.receipts[0]!.error).toMatch(/cannot read receipt/)
      expect(up.receipts[1]).toMatchObject({ error: null, reached: true })
      expect(upgradeExitCode(up)).toBe(2)
      const readable = up.receipts.slice(1)
      expect(upgradeExitCode({ ...up, receipts: readable, failed: 1, pending: 0 })).toBe(1)
      expect(upgradeExitCode({ ...up, receipts: readable, failed: 0, pending: 1 })).toBe(3)
      expect(upgradeExitCode({ ...up, receipts: readable, failed: 0, pending: 0 })).toBe(0)
    }, 60_000)
  })
}

describe("progress bar", () => {
  it("draws on the stream it is given, throttled, and ends with the full bar and a newline", () => {
    const out: Array<string> = []
    const bar = progressBar({ write: (chunk: string) => out.push(chunk) } as unknown as NodeJS.WriteStream, "stamping")
    bar.update(1, 500)
    bar.update(2, 500) // within 100 ms of the last draw: skipped
    bar.finish(500, 500)
    expect(out).toEqual([`\rstamping [${"-".repeat(30)}] 1/500`, `\rstamping [${"#".repeat(30)}] 500/500`, "\n"])
  })
})

describe("500 files in one stamp through a server that injects 429 and 503", () => {
  let server: TestServer
  let proxy: Server
  afterAll(async () => {
    await new Promise((r) => proxy?.close(r))
    await server?.close()
  })

  it("writes all 500 receipts; no attestation lost or duplicated", async () => {
    server = await startTestServer("sqlite")
    const { key } = await server.createKey({ scopes: ["attest"] })
    const target = new URL(server.url)
    let n = 0
    const injected = { "429": 0, "503": 0, "503-after-work": 0 }
    const batchCalls: Array<number> = []
    proxy = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const i = ++n
      const chunks: Array<Buffer> = []
      for await (const c of req) chunks.push(c as Buffer)
      const body = Buffer.concat(chunks)
      const isBatch = req.url?.endsWith("/attest/batch") === true
      if (isBatch) batchCalls.push(i)
      // the first batch call loses its reply after the work was done, the second is refused with 429
      const lostReply = isBatch && batchCalls.length === 1
      if ((isBatch && batchCalls.length === 2) || i % 9 === 0) {
        injected["429"]++
        res.writeHead(429, { "content-type": "application/json", "retry-after": "0" })
        return res.end(JSON.stringify({ error: true, code: "RATE_LIMIT", message: "slow down", details: [] }))
      }
      if (!lostReply && i % 13 === 0) {
        injected["503"]++
        res.writeHead(503, { "content-type": "text/html" })
        return res.end("<html>busy</html>")
      }
      const upstream = await fetch(`${target.origin}${req.url}`, {
        method: req.method!,
        headers: Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "content-length") as Array<[string, string]>),
        ...(body.length > 0 ? { body } : {})
      })
      const text = await upstream.text()
      if (lostReply || i % 17 === 0) {
        // the server did the work, the reply is lost: the retry must not duplicate anything
        injected["503-after-work"]++
        res.writeHead(503, { "content-type": "application/json" })
        return res.end(JSON.stringify({ error: true, code: "SERVICE_UNAVAILABLE", message: "try again", details: [] }))
      }
      res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" })
      res.end(text)
    })
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", () => r()))
    const address = proxy.address()
    const proxyUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`

    const dir = tmp()
    const files = Array.from({ length: 500 }, (_, i) => {
      const f = join(dir, `f${String(i).padStart(3, "0")}.dat`)
      writeFileSync(f, `file ${i} ${Math.random()}`)
      return f
    })
    const progress: Array<number> = []
    const summary = await stampFiles({
      files,
      server: proxyUrl,
      apiKey: key,
      retry: { baseDelayMs: 5, maxDelayMs: 50 },
      onProgress: (done, total) => {
        expect(total).toBe(500)
        progress.push(done)
      }
    })
    expect(summary.failed, JSON.stringify(summary.files.filter((f) => !f.ok).slice(0, 3))).toBe(0)
    expect(summary.stamped).toBe(500)
    expect(progress).toEqual(Array.from({ length: 500 }, (_, i) => i + 1))
    // every injected failure was retried: 429, 503 and 503 after the work
    expect(summary.retriedStatuses["429"]).toBe(injected["429"])
    expect(summary.retriedStatuses["503"]).toBe(injected["503"] + injected["503-after-work"])
    expect(summary.retries).toBe(injected["429"] + injected["503"] + injected["503-after-work"])
    expect(summary.requests).toBe(n)
    expect(batchCalls.length).toBeGreaterThanOrEqual(7) // 5 batches of 100, two of them retried at least once

    const ids = new Set<string>()
    for (const f of files) {
      const receipt = readJson(`${f}.attestd.json`)
      expect(receipt.hash_hex).toBe(sha256(readFileSync(f)))
      ids.add(receipt.id)
    }
    expect(ids.size).toBe(500)
    const stats: any = await (await fetch(`${server.url}/v1/stats`)).json()
    expect(stats.total_attestations).toBe(500)

    // This server seals once a day: receipts stay at T0, so asking for T1 ends pending (exit 3), after polling with backoff.
    // (The wait leaves room for three passes on a loaded machine, where one pass through this
    // server's injected failures and retries took over 150 ms and 400 ms allowed only two.)
    const pending = await upgradeReceipts({
      receipts: files.slice(0, 3).map((f) => `${f}.attestd.json`),
      server: server.url,
      target: "T1",
      waitMs: 2_000,
      pollMs: { first: 50, max: 100 }
    })
    expect(pending).toMatchObject({ reached: 0, pending: 3, failed: 0 })
    expect(pending.passes).toBeGreaterThan(2)
    expect(upgradeExitCode(pending)).toBe(3)
    const viaCli = await cli(["upgrade", `${files[0]}.attestd.json`, "--wait", "T1", "--timeout", "1s"], { ATTESTD_URL: server.url })
    expect(viaCli.code, viaCli.stderr).toBe(3)
    expect(viaCli.json).toMatchObject({ ok: false, target: "T1", reached: 0, pending: 1, failed: 0 })
    expect(viaCli.stderr).toMatch(/0 of 1 receipt\(s\) at T1, 0 upgraded, 1 pending, 0 failed/)

    // A server whose evidence names another attestation, or does not verify, never replaces a receipt.
    const receiptPath = `${files[1]}.attestd.json`
    const before = readFileSync(receiptPath, "utf8")
    const original = JSON.parse(before)
    const serving = (edit: (b: any) => any): typeof fetch => async (input, init) => {
      const res = await fetch(input, init)
      if (!String(input).endsWith("/evidence")) return res
      return new Response(JSON.stringify(edit(await res.json())), { status: 200, headers: { "content-type": "application/json" } })
    }
    const other = await upgradeReceipts({
      receipts: [receiptPath],
      server: server.url,
      target: "T1",
      fetch: serving((b) => ({ ...b, id: "att_AAAAAAAAAAAAAAAAAAAAAAAA", level: "T1" }))
    })
    expect(other.receipts[0]!.error).toMatch(/names att_AAAAAAAAAAAAAAAAAAAAAAAA/)
    const forged = await upgradeReceipts({
      receipts: [receiptPath],
      server: server.url,
      target: "T1",
      fetch: serving((b) => ({
        ...b,
        level: "T1",
        t1: { batchId: 1, merkleRoot: "00".repeat(32), merkleProof: [], tsaProvider: "forged", tsaTimestamp: original.t0.registeredAt, tsaToken: "AAAA" }
      }))
    })
    expect(forged.receipts[0]!.error).toMatch(/T1 evidence does not verify/)
    expect(upgradeExitCode(forged)).toBe(1)
    expect(readFileSync(receiptPath, "utf8")).toBe(before)
    process.stderr.write(`${JSON.stringify({ stamp500: { requests: summary.requests, retries: summary.retries, retriedStatuses: summary.retriedStatuses, injected, batchCalls: batchCalls.length, elapsedMs: summary.elapsedMs } })}\n`)
  }, 120_000)
})
