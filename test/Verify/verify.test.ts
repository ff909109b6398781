/**
 * `attestd verify` (CONTRACT §1, §5): real evidence bundles from a running
 * server (sqlite, fast windows, the HTTP simulated calendar mined explicitly),
 * verified offline by `verifyBundle`, then tampered field by field; and the
 * built CLI (`node dist/cli.mjs verify …`) end to end for its exit codes.
 */
import { execFile } from "node:child_process"
import { createHash, createPublicKey } from "node:crypto"
import { newP256Key } from "../../src/Platform/Keys/FileKeys.js"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { formatMicros, parseMicros } from "../../src/Domain/Time.js"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { loadOrCreateDemoTsa } from "../../src/Platform/Tsa/DemoTsa.js"
import { parseTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { type Report, verifyBundle, type VerifyOptions } from "../../src/Verify/Verifier.js"
import { poll } from "../helpers/anchoring.js"
import { cliInProcess } from "../helpers/cli.js"
import { BIN, requireDist } from "../helpers/process.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"


const sha256Hex = (b: Uint8Array | string): string => createHash("sha256").update(b).digest("hex")

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Bundle = any

const clone = (b: Bundle): Bundle => structuredClone(b)

/** The hex string with its character at `i` changed. */
const flipHex = (hex: string, i = 0): string => hex.slice(0, i) + (hex[i] === "0" ? "1" : "0") + hex.slice(i + 1)

/** The Base64 string with byte `i` XORed. */
const flipB64 = (b64: string, i: number): string => {
  const bytes = Buffer.from(b64, "base64")
  const at = i < 0 ? bytes.length + i : i
  bytes[at] = bytes[at]! ^ 0x01
  return bytes.toString("base64")
}

const shiftMicros = (wire: string, delta: bigint): string => formatMicros(parseMicros(wire)! + delta)

/** A fresh P-256 public JWK with its RFC 7638 thumbprint as kid. */
const otherJwk = () => {
  const publicKey = createPublicKey(newP256Key())
  const jwk = publicKey.export({ format: "jwk" }) as { x: string; y: string }
  const kid = createHash("sha256").update(JSON.stringify({ crv: "P-256", kty: "EC", x: jwk.x, y: jwk.y })).digest("base64url")
  return { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid, x: jwk.x, y: jwk.y }
}

const FAST = {
  sealInterval: Duration.millis(300),
  anchorInterval: Duration.seconds(1),
  otsUpgradeInterval: Duration.millis(300)
}

describe("attestd verify", () => {
  let cal: SimulatedCalendarServer
  let server: TestServer
  let data: Buffer
  let t0Bundle: Bundle
  let t1Bundle: Bundle
  let t2Bundle: Bundle
  let headers: Record<string, string>
  let keysDoc: { keys: Array<Record<string, unknown>> }
  let rootPem: string
  let full: VerifyOptions

  beforeAll(async () => {
    cal = await startSimulatedCalendarServer()
    server = await startTestServer("sqlite", { ...FAST, otsCalendars: [cal.url] })
    const { key } = await server.createKey()
    const api = client(server.url, key)
    data = Buffer.from(`attestd verify test ${randomHash()}\n`)
    const hashHex = sha256Hex(data)
    // three leaves, so that the batch proof has steps
    const created = await api.post("/v1/attest/batch", { hashes: [hashHex, randomHash(), randomHash()] })
    expect(created.status).toBe(200)
    const id = (created.body.attestations as Array<{ id: string; hash_hex: string }>).find((a) => a.hash_hex === hashHex)!.id
    const pub = client(server.url)
    const evidence = async () => {
      const r = await pub.get(`/v1/attestation/${id}/evidence`)
      expect(r.status).toBe(200)
      return r.body
    }
    t1Bundle = await poll("T1", async () => {
      const b = await evidence()
      return b.level === "T1" ? b : undefined
    }, 15_000)
    await poll("calendar submission", async () => {
      const r = await pub.get(`/v1/attestation/${id}/ots`)
      return r.status === 200 && r.body.ots_available === true
    }, 15_000)
    const block = cal.mine()
    t2Bundle = await poll("T2", async () => {
      const b = await evidence()
      return b.level === "T2" ? b : undefined
    }, 15_000)
    expect(cal.blockHeaders().get(block.height)?.merkleRoot).toBe(block.merkleRoot)
    headers = { [String(block.height)]: block.merkleRoot }
    // A T0 bundle is the same t0 section without the later tiers.
    t0Bundle = { id: t2Bundle.id, hash_hex: t2Bundle.hash_hex, level: "T0", t0: t2Bundle.t0 }
    keysDoc = (await pub.get("/v1/keys")).body
    rootPem = readFileSync(join(server.db.dataDir, "demo-tsa", "root.pem"), "utf8")
    full = { data, otsHeaders: headers, tsaCaPem: rootPem, keys: keysDoc.keys }
  }, 60_000)

  afterAll(async () => {
    await server?.close()
    await cal?.close()
  })

  const expectFailed = (r: Report, tier: "input" | "t0" | "t1" | "t2", detail?: RegExp) => {
    expect(r.ok, JSON.stringify(r.checks, null, 2)).toBe(false)
    expect(r.checks[tier]?.status).toBe("failed")
    if (detail) expect(r.checks[tier]?.detail).toMatch(detail)
  }

  describe("genuine bundles", () => {
    it("the server's bundles have the expected shape", () => {
      expect(t1Bundle.t1.merkleProof.length).toBeGreaterThan(0)
      expect(t2Bundle.t0.publicKey.kid).toBe(t2Bundle.t0.publicKeyId)
      expect(keysDoc.keys.map((k) => k.kid)).toContain(t2Bundle.t0.publicKeyId)
      expect("simulated" in t2Bundle.t2).toBe(false)
    })

    it("T0-only bundle checked with the key it carries is unanchored (partial), never verified", async () => {
      const r = await verifyBundle(t0Bundle)
      expect(r.ok).toBe(false)
      expect(r.verdict).toBe("partial")
      expect(r.verified_level).toBeNull()
      expect(Object.keys(r.checks)).toEqual(["t0"])
      expect(r.checks.t0).toMatchObject({ status: "unanchored", trust: null, key_source: "bundle", thumbprint_ok: true, signature_ok: true })
      expect(r.checks.t0.detail).toMatch(/embedded in the bundle.*not anchored in a trusted key/)
      expect(r.notes.join("\n")).toMatch(/embedded in the bundle/)
    })

    it("T0-only with --keys (GET /v1/keys, or the bare JWK) verifies against the published key", async () => {
      const r = await verifyBundle(t0Bundle, { keys: keysDoc.keys })
      expect(r.ok).toBe(true)
      expect(r.verdict).toBe("verified")
      expect(r.verified_level).toBe("T0")
      expect(r.checks.t0.key_source).toBe("keys")
      expect(r.checks.t0.trust).toBe("the trusted keys given")
      const { publicKey: _omit, ...t0 } = t0Bundle.t0
      const bare = keysDoc.keys.find((k) => k.kid === t0Bundle.t0.publicKeyId)!
      const r2 = await verifyBundle({ ...t0Bundle, t0 }, { keys: [bare] })
      expect(r2.ok).toBe(true)
    })

    it("T1 bundle verifies with --tsa-ca (chain verified); without anchors T1 is unanchored", async () => {
      const withCa = await verifyBundle(t1Bundle, { tsaCaPem: rootPem, keys: keysDoc.keys })
      expect(withCa.ok, JSON.stringify(withCa.checks, null, 2)).toBe(true)
      expect(withCa.verified_level).toBe("T1")
      expect(withCa.checks.t1).toMatchObject({ status: "ok", merkle: { status: "ok" }, tsa: { status: "ok", chain_verified: true } })
      expect(withCa.checks.t1!.tsa.gen_time).toBe(new Date(t1Bundle.t1.tsaTimestamp).toISOString())

      const noCa = await verifyBundle(t1Bundle, { keys: keysDoc.keys })
      expect(noCa.ok).toBe(false)
      expect(noCa.verdict).toBe("partial")
      expect(noCa.verified_level).toBe("T0")
      expect(noCa.checks.t1).toMatchObject({ status: "unanchored", trust: null, merkle: { status: "ok" }, tsa: { status: "unanchored", chain_verified: false } })
      expect(noCa.checks.t1!.tsa.detail).toMatch(/chain was not checked/)
      expect(noCa.notes.join("\n")).toMatch(/chain was not checked/)
    })

    it("T2 bundle verifies with --ots-headers: the Bitcoin check is performed", async () => {
      const r = await verifyBundle(t2Bundle, full)
      expect(r.ok, JSON.stringify(r.checks, null, 2)).toBe(true)
      expect(r.verified_level).toBe("T2")
      expect(r.checks.input).toMatchObject({ status: "ok", source: "file", hash_hex: t2Bundle.hash_hex })
      expect(r.checks.t0.key_source).toBe("keys")
      expect(r.checks.t1!.tsa.chain_verified).toBe(true)
      expect(r.checks.t2).toMatchObject({
        status: "ok",
        merkle: { status: "ok" },
        ots: { status: "ok" },
        bitcoin: { status: "ok", height: t2Bundle.t2.bitcoinBlockHeight, merkle_root: headers[String(t2Bundle.t2.bitcoinBlockHeight)] },
        simulated: false
      })
    })

    it("T2 bundle without a confirmed header: T2 unanchored, the verdict partial", async () => {
      const r = await verifyBundle(t2Bundle, { keys: keysDoc.keys, tsaCaPem: rootPem })
      expect(r.ok).toBe(false)
      expect(r.verdict).toBe("partial")
      expect(r.verified_level).toBe("T1")
      expect(r.checks.t2!.status).toBe("unanchored")
      expect(r.checks.t2!.bitcoin.status).toBe("unanchored")
      expect(r.checks.t2!.bitcoin.merkle_root).toBe(headers[String(t2Bundle.t2.bitcoinBlockHeight)])
      expect(r.checks.t2!.bitcoin.detail).toMatch(/place in the chain was NOT checked/)
      expect(r.notes.join("\n")).toMatch(/place in the chain was not checked/)
      // headers that do not mention the block: unanchored either
      const other = await verifyBundle(t2Bundle, { keys: keysDoc.keys, tsaCaPem: rootPem, otsHeaders: { "1": "00".repeat(32) } })
      expect(other.verdict).toBe("partial")
      expect(other.checks.t2!.bitcoin.status).toBe("unanchored")
    })

    it("a simulated chain is named as such", async () => {
      const b = clone(t2Bundle)
      b.t2.simulated = true
      const r = await verifyBundle(b, { otsHeaders: headers, keys: keysDoc.keys, tsaCaPem: rootPem })
      expect(r.ok).toBe(true)
      expect(r.checks.t2!.simulated).toBe(true)
      expect(r.checks.t2!.detail).toMatch(/simulated chain/)
    })

    it("--file / --hash: the right data passes, other data fails", async () => {
      expect((await verifyBundle(t2Bundle, { data })).checks.input?.status).toBe("ok")
      expect((await verifyBundle(t2Bundle, { otsHeaders: headers, tsaCaPem: rootPem, keys: keysDoc.keys, hash: t2Bundle.hash_hex.toUpperCase() })).ok).toBe(true)
      const wrong = await verifyBundle(t2Bundle, { data: Buffer.concat([data, Buffer.from("x")]) })
      expectFailed(wrong, "input", /SHA-256 of the file/)
      expect(wrong.checks.t0.status).toBe("unanchored")
      expectFailed(await verifyBundle(t2Bundle, { hash: flipHex(t2Bundle.hash_hex) }), "input")
      expectFailed(await verifyBundle(t2Bundle, { hash: "abc" }), "input", /not a SHA-256/)
    })
  })

  describe("tampering fails", () => {
    it("registeredAt ±1 µs", async () => {
      for (const delta of [1n, -1n]) {
        const b = clone(t2Bundle)
        b.t0.registeredAt = shiftMicros(b.t0.registeredAt, delta)
        const r = await verifyBundle(b, full)
        expectFailed(r, "t0", /does not verify/)
        expect(r.checks.t0.signature_ok).toBe(false)
        expect(r.verified_level).toBeNull()
      }
    })

    it("hash_hex (every tier notices)", async () => {
      const b = clone(t2Bundle)
      b.hash_hex = flipHex(b.hash_hex, 5)
      const r = await verifyBundle(b, { otsHeaders: headers, tsaCaPem: rootPem })
      expectFailed(r, "t0")
      expectFailed(r, "t1")
      expect(r.checks.t1!.merkle.status).toBe("failed")
      expectFailed(r, "t2", /digest/)
    })

    it("a signature byte", async () => {
      for (const i of [8, -3]) {
        const b = clone(t0Bundle)
        b.t0.signature = flipB64(b.t0.signature, i)
        expectFailed(await verifyBundle(b), "t0")
      }
    })

    it("formatVersion", async () => {
      const b = clone(t0Bundle)
      b.t0.formatVersion = "2.0.1"
      expectFailed(await verifyBundle(b), "t0")
    })

    it("a Merkle proof step (hash or position), or a missing step", async () => {
      const b = clone(t1Bundle)
      b.t1.merkleProof[0].hash = flipHex(b.t1.merkleProof[0].hash, 10)
      const r = await verifyBundle(b, { tsaCaPem: rootPem, keys: keysDoc.keys })
      expectFailed(r, "t1")
      expect(r.checks.t1!.merkle.status).toBe("failed")
      expect(r.checks.t1!.tsa.status).toBe("ok")
      expect(r.verified_level).toBe("T0")

      // the last step: an earlier one may be an odd node paired with itself, where the position does not matter
      const p = clone(t1Bundle)
      const last = p.t1.merkleProof[p.t1.merkleProof.length - 1]
      last.position = last.position === "left" ? "right" : "left"
      expectFailed(await verifyBundle(p), "t1")
      const m = clone(t1Bundle)
      m.t1.merkleProof.pop()
      expectFailed(await verifyBundle(m), "t1")
    })

    it("the merkleRoot (the token no longer matches either)", async () => {
      const b = clone(t1Bundle)
      b.t1.merkleRoot = flipHex(b.t1.merkleRoot, 3)
      const r = await verifyBundle(b, { tsaCaPem: rootPem })
      expectFailed(r, "t1")
      expect(r.checks.t1!.merkle.status).toBe("failed")
      expect(r.checks.t1!.tsa).toMatchObject({ status: "failed" })
      expect(r.checks.t1!.tsa.detail).toMatch(/imprint/)
    })

    it("a tsaToken byte (anywhere), with or without --tsa-ca", async () => {
      const len = Buffer.from(t1Bundle.t1.tsaToken, "base64").length
      for (const i of [-2, -40, Math.floor(len / 2), Math.floor(len / 3), 60]) {
        const b = clone(t1Bundle)
        b.t1.tsaToken = flipB64(b.t1.tsaToken, i)
        expectFailed(await verifyBundle(b), "t1")
        expectFailed(await verifyBundle(b, { tsaCaPem: rootPem }), "t1")
      }
    })

    it("tsaTimestamp differing from the token's genTime", async () => {
      const b = clone(t1Bundle)
      b.t1.tsaTimestamp = new Date(new Date(b.t1.tsaTimestamp).getTime() + 1000).toISOString()
      expectFailed(await verifyBundle(b), "t1", /genTime/)
    })

    it("a token from another TSA: accepted only while the chain is not checked", async () => {
      const dir = mkdtempSync(join(tmpdir(), "attestd-other-tsa-"))
      try {
        const other = await loadOrCreateDemoTsa(dir)
        const token = await other.stamp(new Uint8Array(Buffer.from(t1Bundle.t1.merkleRoot, "hex")))
        const b = clone(t1Bundle)
        b.t1.tsaToken = Buffer.from(token).toString("base64")
        b.t1.tsaTimestamp = parseTimeStampToken(token).gen_time
        const noCa = await verifyBundle(b)
        expect(noCa.ok).toBe(false)
        expect(noCa.checks.t1!.status).toBe("unanchored")
        expect(noCa.checks.t1!.tsa.chain_verified).toBe(false)
        expectFailed(await verifyBundle(b, { tsaCaPem: rootPem }), "t1")
        // and the genuine token fails against the other TSA's root
        expectFailed(await verifyBundle(t1Bundle, { tsaCaPem: other.rootPem }), "t1")
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    })

    it("a t1ToT2Proof step, or the dailyRoot", async () => {
      const b = clone(t2Bundle)
      if (b.t2.t1ToT2Proof.length > 0) b.t2.t1ToT2Proof[0].hash = flipHex(b.t2.t1ToT2Proof[0].hash, 7)
      else b.t2.t1ToT2Proof.push({ hash: randomHash(), position: "left" })
      const r = await verifyBundle(b, { otsHeaders: headers, keys: keysDoc.keys, tsaCaPem: rootPem })
      expectFailed(r, "t2")
      expect(r.checks.t2!.merkle.status).toBe("failed")
      expect(r.verified_level).toBe("T1")

      const d = clone(t2Bundle)
      d.t2.dailyRoot = flipHex(d.t2.dailyRoot, 1)
      const rd = await verifyBundle(d, { otsHeaders: headers })
      expectFailed(rd, "t2")
      expect(rd.checks.t2!.ots.detail).toMatch(/without passing through t2.dailyRoot/)
    })

    it("an otsProof byte: the file digest, a Merkle op argument, the calendar's last op, the Bitcoin attestation", async () => {
      const ots = Buffer.from(t2Bundle.t2.otsProof, "base64")
      // The file: 31 magic + version + file hash op, the 32-byte digest, then the first op (tag, length,
      // argument: a Merkle step). It ends with the calendar's last step to the block (a 32-byte argument,
      // sha256, sha256), 0x00, then the Bitcoin attestation (8-byte tag, payload: length + height varuint).
      expect(ots.subarray(ots.length - 12, ots.length - 4).toString("hex")).toBe("0588960d73d71901")
      expect([...ots.subarray(ots.length - 15, ots.length - 12)]).toEqual([0x08, 0x08, 0x00])
      const positions = { digest: 33 + 4, firstArg: 33 + 32 + 2 + 4, lastArg: ots.length - 30, bitcoinTag: ots.length - 12 }
      for (const [what, i] of Object.entries(positions)) {
        const b = clone(t2Bundle)
        b.t2.otsProof = flipB64(b.t2.otsProof, i)
        const r = await verifyBundle(b, { otsHeaders: headers })
        expect(r.ok, what).toBe(false)
        expect(r.checks.t2!.status, what).toBe("failed")
      }
      // the calendar's part is only caught with a block header (here none: the bundle carries no t2.bitcoinBlockHeader)
      const late = clone(t2Bundle)
      late.t2.otsProof = flipB64(late.t2.otsProof, positions.lastArg)
      delete late.t2.bitcoinBlockHeader
      const unchecked = await verifyBundle(late)
      expect(unchecked.checks.t2!.bitcoin.status).toBe("unanchored")
      expect(unchecked.verdict).toBe("partial")
      // truncated file
      const t = clone(t2Bundle)
      t.t2.otsProof = ots.subarray(0, ots.length - 5).toString("base64")
      expectFailed(await verifyBundle(t), "t2", /\.ots proof/)
    })

    it("bitcoinBlockHeight", async () => {
      const b = clone(t2Bundle)
      b.t2.bitcoinBlockHeight += 1
      expectFailed(await verifyBundle(b), "t2", /not bitcoinBlockHeight/)
    })

    it("a wrong header merkle root (and the explorer byte order is pointed out)", async () => {
      const height = String(t2Bundle.t2.bitcoinBlockHeight)
      const wrong = await verifyBundle(t2Bundle, { otsHeaders: { [height]: flipHex(headers[height]!, 0) } })
      expectFailed(wrong, "t2")
      expect(wrong.checks.t2!.bitcoin.status).toBe("failed")
      const reversed = Buffer.from(headers[height]!, "hex").reverse().toString("hex")
      const rev = await verifyBundle(t2Bundle, { otsHeaders: { [height]: reversed } })
      expectFailed(rev, "t2", /byte-reversed/)
    })

    it("keys: unknown kid, a different published key under the same kid, a swapped embedded key", async () => {
      const stranger = otherJwk()
      expectFailed(await verifyBundle(t0Bundle, { keys: [stranger] }), "t0", /not among/)
      // --keys names the kid but with other coordinates: the bundle's key differs from the published one
      const impostor = { ...stranger, kid: t0Bundle.t0.publicKeyId }
      expectFailed(await verifyBundle(t0Bundle, { keys: [impostor] }), "t0", /not the trusted key/)
      // embedded key replaced by another one under the same kid
      const b = clone(t0Bundle)
      b.t0.publicKey = { ...stranger, kid: b.t0.publicKeyId }
      const r = await verifyBundle(b)
      expectFailed(r, "t0")
      expect(r.checks.t0.signature_ok).toBe(false)
      // no key at all
      const { publicKey: _omit, ...t0 } = t0Bundle.t0
      expectFailed(await verifyBundle({ ...t0Bundle, t0 }), "t0", /--keys/)
    })

    it("a bundle claiming a tier it does not carry, or not a bundle at all", async () => {
      const { t2: _t2, ...rest } = t2Bundle
      expectFailed(await verifyBundle(rest), "t2", /no t2 section/)
      expectFailed(await verifyBundle({ ...t0Bundle, level: "T1" }), "t1", /no t1 section/)
      expectFailed(await verifyBundle("nope"), "t0", /not a JSON object/)
      expectFailed(await verifyBundle({}), "t0")
    })
  })

  describe("the built CLI", () => {
    let dir: string
    beforeAll(() => {
      requireDist()
      dir = mkdtempSync(join(tmpdir(), "attestd-verify-cli-"))
      writeFileSync(join(dir, "t2.json"), JSON.stringify(t2Bundle))
      const tampered = clone(t2Bundle)
      tampered.t0.registeredAt = shiftMicros(tampered.t0.registeredAt, 1n)
      writeFileSync(join(dir, "tampered.json"), JSON.stringify(tampered))
      writeFileSync(join(dir, "headers.json"), JSON.stringify(headers))
      writeFileSync(join(dir, "keys.json"), JSON.stringify(keysDoc))
      writeFileSync(join(dir, "root.pem"), rootPem)
      writeFileSync(join(dir, "data.bin"), data)
      writeFileSync(join(dir, "not-json.json"), "{")
    })
    afterAll(() => {
      if (dir) rmSync(dir, { recursive: true, force: true })
    })

    /** `node dist/cli.mjs verify ARGS…` in the fixtures directory. */
    const cliProcess = (args: ReadonlyArray<string>): Promise<{ code: number; stdout: string; stderr: string }> =>
      new Promise((done) => {
        execFile(process.execPath, [BIN, "verify", ...args], { cwd: dir, timeout: 120_000, env: { ...process.env, NODE_OPTIONS: "" } }, (error, stdout, stderr) => {
          const code = error ? (typeof (error as { code?: unknown }).code === "number" ? (error as { code: number }).code : -1) : 0
          done({ code, stdout: String(stdout), stderr: String(stderr) })
        })
      })
    /** The same command in-process (test/helpers/cli.ts), in the fixtures directory. */
    const cli = (args: ReadonlyArray<string>) => cliInProcess(["verify", ...args], {}, { cwd: dir })

    it("exit 0 for a genuine T2 bundle (every check anchored), 3 without trust inputs, 1 when tampered, 2 for unreadable input", async () => {
      const [good, noHeaders, tampered, wrongFile, missing, notJson] = await Promise.all([
        // the command once as a real process (dist/cli.mjs), every trust input given
        cliProcess(["t2.json", "--file", "data.bin", "--ots-headers", "headers.json", "--tsa-ca", "root.pem", "--keys", "keys.json"]),
        cli(["t2.json", "--hash", t2Bundle.hash_hex]),
        cli(["tampered.json", "--ots-headers", "headers.json"]),
        cli(["t2.json", "--file", "headers.json"]),
        cli(["missing.json"]),
        cli(["not-json.json"])
      ])
      expect(good.code, good.stderr).toBe(0)
      const report = JSON.parse(good.stdout)
      expect(report).toMatchObject({
        ok: true,
        verified_level: "T2",
        checks: {
          input: { status: "ok" },
          t0: { status: "ok", key_source: "keys" },
          t1: { status: "ok", tsa: { chain_verified: true } },
          t2: { status: "ok", bitcoin: { status: "ok" } }
        }
      })
      expect(good.stderr).toMatch(/VERIFIED/)

      expect(noHeaders.code, noHeaders.stderr).toBe(3)
      expect(JSON.parse(noHeaders.stdout)).toMatchObject({ ok: false, verdict: "partial", checks: { t2: { bitcoin: { status: "unanchored" } } } })
      expect(noHeaders.stderr).toMatch(/Bitcoin UNANCHORED/)

      expect(tampered.code).toBe(1)
      expect(JSON.parse(tampered.stdout)).toMatchObject({ ok: false, checks: { t0: { status: "failed" } } })
      expect(wrongFile.code).toBe(1)
      expect(JSON.parse(wrongFile.stdout).checks.input.status).toBe("failed")

      expect(missing.code).toBe(2)
      expect(JSON.parse(missing.stdout)).toMatchObject({ ok: false })
      expect(missing.stderr).toMatch(/cannot read bundle/)
      expect(notJson.code).toBe(2)
    })
  })
})
