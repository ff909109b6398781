/**
 * `attestd stamp` and `attestd upgrade` against a hostile or spoofed server (a node:http
 * proxy in front of a real demo server that rewrites what it answers): no receipt is
 * written or replaced with evidence that does not verify against the instance's published
 * trust, and an upgrade never changes a receipt's id, hash_hex or t0.
 */
import { randomBytes } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { formatMicros, parseMicros } from "../../src/Domain/Time.js"
import { t0Payload } from "../../src/Domain/T0.js"
import { newP256Key, publicJwkOf, signPayload } from "../../src/Platform/Keys/FileKeys.js"
import { stampFiles } from "../../src/Stamp/Stamp.js"
import { upgradeExitCode, upgradeReceipts } from "../../src/Stamp/Upgrade.js"
import { poll } from "../helpers/anchoring.js"
import { cliInProcess } from "../helpers/cli.js"
import { freePort } from "../helpers/server.js"
import { startTestServer, type TestServer } from "../helpers/server.js"

const FAST = {
  sealInterval: Duration.millis(300),
  anchorInterval: Duration.seconds(1),
  otsUpgradeInterval: Duration.millis(300),
  demoConfirmDelay: Duration.seconds(1)
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any

/** What the hostile server does to the genuine answers. */
type Mode =
  | "honest"
  /** t0 re-signed by the hostile server's own key, registeredAt a day earlier; genuine t1/t2; its key added to /v1/keys. */
  | "own-key-published"
  /** the same t0, its key not published: the spoofed server publishes the genuine keys only. */
  | "own-key"
  /** t0.signature replaced by garbage. */
  | "garbage-signature"
  /** the genuine t0, but hash_hex of another document. */
  | "other-hash"

const hostileKey = newP256Key()
const hostileJwk = publicJwkOf(hostileKey)

const forgeT0 = (bundle: Json): Json => {
  const registeredAt = formatMicros(parseMicros(bundle.t0.registeredAt)! - 86_400_000_000n)
  return {
    ...bundle,
    t0: {
      ...bundle.t0,
      registeredAt,
      publicKeyId: hostileJwk.kid,
      publicKey: hostileJwk,
      signature: signPayload(hostileKey, t0Payload(bundle.hash_hex, registeredAt, bundle.t0.formatVersion))
    }
  }
}

const rewrite = (mode: Mode, path: string, body: Json): Json => {
  if (path.endsWith("/v1/keys") && mode === "own-key-published") return { ...body, keys: [...body.keys, hostileJwk] }
  if (!path.endsWith("/evidence")) return body
  switch (mode) {
    case "own-key-published":
    case "own-key":
      return forgeT0(body)
    case "garbage-signature":
      return { ...body, t0: { ...body.t0, signature: randomBytes(71).toString("base64") } }
    case "other-hash":
      return { ...body, hash_hex: randomBytes(32).toString("hex") }
    default:
      return body
  }
}

describe("stamp and upgrade against a hostile server", () => {
  let server: TestServer
  let hostile: Server
  let hostileUrl: string
  let key: string
  let mode: Mode = "honest"
  let dir: string

  beforeAll(async () => {
    server = await startTestServer("sqlite", FAST)
    key = (await server.createKey({ scopes: ["attest"] })).key
    const upstream = new URL(server.url)
    hostile = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Array<Buffer> = []
      for await (const c of req) chunks.push(c as Buffer)
      const body = Buffer.concat(chunks)
      const answer = await fetch(`${upstream.origin}${req.url}`, {
        method: req.method!,
        headers: Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "content-length") as Array<[string, string]>),
        ...(body.length > 0 ? { body } : {})
      })
      const type = answer.headers.get("content-type") ?? "application/octet-stream"
      if (!type.includes("json") || !answer.ok) {
        res.writeHead(answer.status, { "content-type": type })
        return res.end(Buffer.from(await answer.arrayBuffer()))
      }
      const json = rewrite(mode, new URL(req.url!, "http://x").pathname, await answer.json())
      res.writeHead(answer.status, { "content-type": type })
      res.end(JSON.stringify(json))
    })
    await new Promise<void>((r) => hostile.listen(0, "127.0.0.1", () => r()))
    const address = hostile.address()
    hostileUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`
    dir = mkdtempSync(join(tmpdir(), "attestd-hostile-"))
  }, 60_000)

  afterAll(async () => {
    await new Promise((r) => hostile?.close(r))
    await server?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  const newFile = (name: string): string => {
    const f = join(dir, name)
    writeFileSync(f, `${name} ${randomBytes(8).toString("hex")}\n`)
    return f
  }

  /** A genuine receipt at T0, and the moment the server has the attestation at `level`. */
  const genuineReceipt = async (name: string, level: "T1" | "T2"): Promise<{ file: string; receipt: string; before: string }> => {
    mode = "honest"
    const file = newFile(name)
    const s = await stampFiles({ files: [file], server: server.url, apiKey: key })
    expect(s.failed, JSON.stringify(s.files)).toBe(0)
    const receipt = `${file}.attestd.json`
    const before = readFileSync(receipt, "utf8")
    expect(JSON.parse(before).level).toBe("T0")
    const id = JSON.parse(before).id
    await poll(level, async () => {
      const b: Json = await (await fetch(`${server.url}/v1/attestation/${id}/evidence`)).json()
      return b.level === level
    }, 30_000)
    return { file, receipt, before }
  }

  describe("upgrade", () => {
    for (const m of ["own-key-published", "own-key"] as const) {
      it(`refuses a back-dated t0 signed by the server's own key with genuine T1/T2 (${m}); the receipt is unchanged`, async () => {
        const { before, receipt } = await genuineReceipt(`upgrade-${m}.txt`, "T2")
        mode = m
        const summary = await upgradeReceipts({ receipts: [receipt], server: hostileUrl, target: "T2" })
        expect(summary.receipts[0]).toMatchObject({ upgraded: false, level: "T0" })
        expect(summary.receipts[0]!.error).toMatch(/t0 differs from the receipt's/)
        expect(upgradeExitCode(summary)).toBe(1)
        expect(readFileSync(receipt, "utf8")).toBe(before)

        const run = await cliInProcess(["upgrade", receipt, "--server", hostileUrl])
        expect(run.code, run.stderr).toBe(1)
        expect(run.stderr).toMatch(/0 upgraded/)
        expect(run.stderr).toMatch(/refused/)
        expect(readFileSync(receipt, "utf8")).toBe(before)
      })
    }

    it("refuses an answer about another hash", async () => {
      const { before, receipt } = await genuineReceipt("upgrade-other-hash.txt", "T1")
      mode = "other-hash"
      const summary = await upgradeReceipts({ receipts: [receipt], server: hostileUrl, target: "T2" })
      expect(summary.receipts[0]!.error).toMatch(/names/)
      expect(readFileSync(receipt, "utf8")).toBe(before)
    })

    it("refuses new tiers whose math does not hold", async () => {
      const { before, receipt } = await genuineReceipt("upgrade-foreign-tsa.txt", "T1")
      mode = "honest"
      const fetchWith = (edit: (b: Json) => Json): typeof fetch => async (input, init) => {
        const res = await fetch(input, init)
        if (!String(input).endsWith("/evidence")) return res
        return new Response(JSON.stringify(edit(await res.json())), { status: 200, headers: { "content-type": "application/json" } })
      }
      const summary = await upgradeReceipts({
        receipts: [receipt],
        server: server.url,
        target: "T1",
        fetch: fetchWith((b) => ({ ...b, t1: { ...b.t1, merkleRoot: "00".repeat(32) } }))
      })
      expect(summary.receipts[0]!.error).toMatch(/refused the server's T\d evidence/)
      expect(readFileSync(receipt, "utf8")).toBe(before)
    })

    it("a genuine upgrade keeps id, hash_hex and t0, and writes the receipt atomically with mode 0600", async () => {
      const { before, receipt } = await genuineReceipt("upgrade-genuine.txt", "T2")
      mode = "honest"
      const summary = await upgradeReceipts({ receipts: [receipt], server: hostileUrl, target: "T2" })
      expect(summary.receipts[0], JSON.stringify(summary)).toMatchObject({ upgraded: true, level: "T2", error: null })
      const old = JSON.parse(before)
      const now = JSON.parse(readFileSync(receipt, "utf8"))
      expect({ id: now.id, hash_hex: now.hash_hex, t0: now.t0 }).toEqual({ id: old.id, hash_hex: old.hash_hex, t0: old.t0 })
      expect(statSync(receipt).mode & 0o777).toBe(0o600)
      expect(readdirSync(dir).filter((f) => f.endsWith(".tmp"))).toEqual([])
    })
  })

  describe("stamp", () => {
    it("a garbage T0 signature is that file's error: no receipt, exit 1", async () => {
      mode = "garbage-signature"
      const file = newFile("stamp-garbage.txt")
      const summary = await stampFiles({ files: [file], server: hostileUrl, apiKey: key })
      expect(summary).toMatchObject({ stamped: 0, failed: 1 })
      expect(summary.files[0]).toMatchObject({ ok: false })
      expect((summary.files[0] as { error: string }).error).toMatch(/T0 signature does not verify/)
      expect(readdirSync(dir).filter((f) => f.startsWith("stamp-garbage.txt."))).toEqual([])

      const other = newFile("stamp-garbage-cli.txt")
      const good = newFile("stamp-garbage-cli-2.txt")
      const run = await cliInProcess(["stamp", other, good, "--server", hostileUrl], { ATTESTD_API_KEY: key })
      expect(run.code, run.stderr).toBe(1)
      expect(run.stderr).toMatch(/stamped 0 of 2 file\(s\), 2 failed/)
    })

    it("a T0 signed by a key the instance does not publish is refused", async () => {
      mode = "own-key"
      const file = newFile("stamp-own-key.txt")
      const summary = await stampFiles({ files: [file], server: hostileUrl, apiKey: key })
      expect(summary).toMatchObject({ stamped: 0, failed: 1 })
      expect((summary.files[0] as { error: string }).error).toMatch(/not among the \d+ trusted key/)
    })

    it("an honest server's answers are written", async () => {
      mode = "honest"
      const file = newFile("stamp-honest.txt")
      const summary = await stampFiles({ files: [file], server: hostileUrl, apiKey: key })
      expect(summary).toMatchObject({ stamped: 1, failed: 0 })
      expect(statSync(`${file}.attestd.json`).mode & 0o777).toBe(0o600)
    })

    it("a server that is not there fails at once with its address and the reason", async () => {
      const port = await freePort()
      const started = Date.now()
      const run = await cliInProcess(["stamp", newFile("stamp-nowhere.txt"), "--server", `http://127.0.0.1:${port}`])
      expect(Date.now() - started).toBeLessThan(3_000)
      expect(run.code).toBe(1)
      expect(run.stderr.trim().split("\n")).toHaveLength(1)
      expect(run.stderr).toContain(`127.0.0.1:${port}`)
      expect(run.stderr).toMatch(/connection refused/)
    })
  })
})
