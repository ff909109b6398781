/**
 * `attestd verify --tsr FILE` (CONTRACT §6) on replies made by `openssl ts -reply`
 * (test/helpers/tsrFixtures.ts), run in-process: a good token verifies against its CA
 * (exit 0), is partial without one (3), fails with a wrong imprint, a tampered
 * signature, the wrong CA or a certificate expired at genTime (1), and is unreadable
 * input when the file holds no token (2): the exit codes of bundle verification.
 *
 * With --server the token's chain and evidence come from the instance. Until the
 * authority's own endpoints exist on this branch, `GET /v1/timestamp/certchain` and
 * `GET /v1/timestamp/{serial}/evidence` are answered by a small front that serves the
 * openssl TSA's chain and the evidence of the token's SHA-256 attested on a real
 * in-process attestd, and passes every other path to it.
 */
import { createHash } from "node:crypto"
import { readFile } from "node:fs/promises"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { tokenOfFile, verifyTimestampToken } from "../../src/Verify/Token.js"
import { poll } from "../helpers/anchoring.js"
import { cliInProcess } from "../helpers/cli.js"
import { client, startTestServer, type TestServer } from "../helpers/server.js"
import { makeTsrFixtures, type TsrFixtures } from "../helpers/tsrFixtures.js"

const sha = (alg: string, b: Uint8Array) => createHash(alg).update(b).digest("hex")

/** A front for `server` that answers the time-stamping paths for the one token it knows. */
export const startTimestampFront = async (server: TestServer, known: { serial: string; attestationId: string; chainPem: string }) => {
  const front: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!
    if (path === "/v1/timestamp/certchain") {
      res.writeHead(200, { "content-type": "application/pem-certificate-chain" }).end(known.chainPem)
      return
    }
    const m = /^\/v1\/timestamp\/([0-9a-f]+)\/evidence$/.exec(path)
    const target = m ? (m[1] === known.serial ? `/v1/attestation/${known.attestationId}/evidence` : null) : req.url ?? "/"
    if (target === null) {
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: true, code: "NOT_FOUND", message: "no such token", details: null }))
      return
    }
    fetch(`${server.url}${target}`).then(async (r) => res.writeHead(r.status, { "content-type": r.headers.get("content-type") ?? "application/json" }).end(await r.text()))
      .catch(() => res.writeHead(502).end())
  })
  await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(front.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => front.close(() => resolve()))
  }
}

describe("attestd verify --tsr", () => {
  let fx: TsrFixtures
  let server: TestServer
  let front: { url: string; close: () => Promise<void> }
  let attestationId: string

  beforeAll(async () => {
    fx = await makeTsrFixtures()
    server = await startTestServer("sqlite", { sealInterval: Duration.millis(300) })
    const { key } = await server.createKey()
    const created = await client(server.url, key).post("/v1/attest", { hash_hex: sha("sha256", fx.goodToken) })
    expect(created.status).toBe(201)
    attestationId = created.body.id
    await poll("the token's T1", async () => (await client(server.url).get(`/v1/attestation/${attestationId}/evidence`)).body?.level === "T1", 15_000)
    front = await startTimestampFront(server, {
      serial: await fx.serialOf(fx.files.good),
      attestationId,
      chainPem: await readFile(fx.files.chain, "utf8")
    })
  }, 60_000)

  afterAll(async () => {
    await front?.close()
    await server?.close()
    await fx?.close()
  })

  const verify = async (args: ReadonlyArray<string>) => {
    const r = await cliInProcess(["verify", ...args], {}, { cwd: fx.dir })
    let report: any
    try {
      report = JSON.parse(r.stdout)
    } catch {
      report = undefined
    }
    return { ...r, report }
  }

  it("a good token with its data and CA: exit 0, every check ok", async () => {
    const r = await verify(["--tsr", "good.tsr", "--file", "data.bin", "--tsa-ca", "ca.pem"])
    expect(r.code, r.stderr).toBe(0)
    expect(r.report).toMatchObject({
      ok: true,
      verdict: "verified",
      id: null,
      hash_hex: sha("sha256", fx.goodToken),
      level: null,
      verified_level: null,
      checks: {
        input: { status: "ok", source: "file", hash_hex: sha("sha256", fx.data) },
        token: {
          status: "ok",
          trust: "--tsa-ca ca.pem",
          chain_verified: true,
          hash_algorithm: "SHA-256",
          hashed_message: sha("sha256", fx.data),
          policy: "1.2.3.4.1",
          accuracy_ms: 1500.1,
          signer: "CN=token verifier tsa,O=token verifier"
        }
      }
    })
    expect(Object.keys(r.report).sort()).toEqual(["checks", "crypto", "hash_hex", "id", "level", "notes", "ok", "verdict", "verified_level"])
    expect(r.report.checks.token.gen_time).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    expect(r.stderr).toMatch(/VERIFIED time-stamp token/)
  })

  it("a SHA-384 imprint is compared with the file's SHA-384; --hash takes it too", async () => {
    const [file, hash] = await Promise.all([
      verify(["--tsr", "sha384.tsr", "--file", "data.bin", "--tsa-ca", "ca.pem"]),
      verify(["--tsr", "sha384.tsr", "--hash", sha("sha384", fx.data), "--tsa-ca", "ca.pem"])
    ])
    expect(file.code, file.stderr).toBe(0)
    expect(file.report.checks.token.hash_algorithm).toBe("SHA-384")
    expect(hash.code, hash.stderr).toBe(0)
    expect(hash.report.checks.input).toMatchObject({ status: "ok", source: "hash" })
  })

  it("without a TSA chain: partial (exit 3), the token unanchored", async () => {
    const r = await verify(["--tsr", "good.tsr", "--file", "data.bin"])
    expect(r.code, r.stderr).toBe(3)
    expect(r.report).toMatchObject({ verdict: "partial", checks: { token: { status: "unanchored", chain_verified: false, trust: null } } })
    expect(r.report.notes.join("\n")).toMatch(/chain was not checked/)
  })

  it("wrong imprint, tampered signature, wrong CA, certificate expired at genTime: exit 1, the failing check says why", async () => {
    const [imprint, tampered, wrongCa, expired] = await Promise.all([
      verify(["--tsr", "good.tsr", "--hash", sha("sha256", Buffer.from("other data")), "--tsa-ca", "ca.pem"]),
      verify(["--tsr", "tampered.tsr", "--file", "data.bin", "--tsa-ca", "ca.pem"]),
      verify(["--tsr", "good.tsr", "--file", "data.bin", "--tsa-ca", "other-ca.pem"]),
      verify(["--tsr", "expired.tsr", "--file", "data.bin", "--tsa-ca", "ca.pem"])
    ])
    expect(imprint.code).toBe(1)
    expect(imprint.report).toMatchObject({ verdict: "failed", checks: { input: { status: "failed", source: "hash" }, token: { status: "ok" } } })
    expect(imprint.report.checks.input.detail).toMatch(/the token time-stamps/)
    expect(tampered.code).toBe(1)
    expect(tampered.report.checks.token).toMatchObject({ status: "failed", detail: /CMS signature does not verify/ })
    expect(wrongCa.code).toBe(1)
    expect(wrongCa.report.checks.token).toMatchObject({ status: "failed", detail: /No valid certificate paths found/ })
    expect(expired.code).toBe(1)
    expect(expired.report.checks.token).toMatchObject({ status: "failed", chain_verified: false, detail: /not yet valid or expired/ })
    // without any chain the expiry still shows: the signer's own validity is checked at genTime
    const expiredAlone = await verify(["--tsr", "expired.tsr"])
    expect(expiredAlone.code).toBe(1)
    expect(expiredAlone.report.checks.token.detail).toMatch(/genTime is outside the signer certificate validity period/)
  })

  it("files that hold no token, a missing file, --file with --hash: unreadable input, exit 2", async () => {
    const [garbage, rejected, missing, both, bundleToo] = await Promise.all([
      verify(["--tsr", "garbage.tsr"]),
      verify(["--tsr", "rejected.tsr"]),
      verify(["--tsr", "missing.tsr"]),
      verify(["--tsr", "good.tsr", "--file", "data.bin", "--hash", sha("sha256", fx.data)]),
      verify(["chain.pem", "--tsr", "good.tsr"])
    ])
    for (const r of [garbage, rejected, missing, both, bundleToo]) {
      expect(r.code, r.stderr).toBe(2)
      expect(r.report).toMatchObject({ ok: false, error: expect.any(String) })
    }
    expect(garbage.stderr).toMatch(/--tsr garbage\.tsr: not a DER TimeStampResp or TimeStampToken/)
    expect(rejected.stderr).toMatch(/status 2 \(badAlg.*\) holds no token/)
    expect(missing.stderr).toMatch(/cannot read --tsr missing\.tsr/)
    expect(both.stderr).toMatch(/either --file or --hash/)
    expect(bundleToo.stderr).toMatch(/either BUNDLE\.json or --tsr/)
  })

  it("--server: the published chain and the token's own evidence (T0 and T1 anchored): exit 0", async () => {
    const r = await verify(["--tsr", "good.tsr", "--file", "data.bin", "--server", front.url])
    expect(r.code, r.stderr).toBe(0)
    expect(r.report).toMatchObject({
      verdict: "verified",
      id: attestationId,
      level: "T1",
      verified_level: "T1",
      checks: {
        token: { status: "ok", trust: `TSA chain published by ${front.url}` },
        evidence: { status: "ok", id: attestationId },
        t0: { status: "ok", key_source: "keys" },
        t1: { status: "ok", tsa: { chain_verified: true } }
      }
    })
    expect(r.stderr).toMatch(/evidence OK/)
  })

  it("--server: a token requested without certReq verifies with the published chain (and fails with the CA alone)", async () => {
    const [served, caOnly] = await Promise.all([
      verify(["--tsr", "no-certs.tsr", "--hash", sha("sha256", fx.data), "--server", front.url]),
      verify(["--tsr", "no-certs.tsr", "--tsa-ca", "ca.pem"])
    ])
    expect(served.report.checks.token).toMatchObject({ status: "ok", chain_verified: true })
    // the instance never registered this token: its evidence is missing, so the verdict fails
    expect(served.code).toBe(1)
    expect(served.report.checks.evidence).toMatchObject({ status: "failed", id: null, detail: /has no time-stamp token with serial/ })
    expect(caOnly.code).toBe(1)
    expect(caOnly.report.checks.token.detail).toMatch(/Unable to find signer certificate/)
  })

  it("the core: another token's evidence fails the evidence check, the token itself still checks", async () => {
    const evidence = (await client(server.url).get(`/v1/attestation/${attestationId}/evidence`)).body
    const token = tokenOfFile(new Uint8Array(await readFile(fx.files.sha384)))
    const r = await verifyTimestampToken(token, { evidence, tsaChainPem: await readFile(fx.files.ca, "utf8") })
    expect(r.verdict).toBe("failed")
    expect(r.verified_level).toBeNull()
    expect(r.checks.token.status).toBe("ok")
    expect(r.checks.evidence).toMatchObject({ status: "failed", id: attestationId, detail: /not the SHA-256 of this token/ })
  })
})
