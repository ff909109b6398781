/**
 * Rotating the time-stamping key in production (ATTESTD_TSA_CERT_CHAIN: the operator's CA,
 * here made with the openssl CLI) without an outage, on two instances over one SQLite
 * database and one data dir, under a steady stream of token requests: `signing-keys rotate
 * --tsa` makes the new key and prints its certification request, and the old key signs on;
 * the CA certifies the request; the new chain is written over the chain file; within a few
 * polls both instances sign with the new key (ESSCertIDv2, `openssl ts -verify`) and the old
 * key's window ends. No request meanwhile is refused. A chain that certifies no key held
 * refuses tokens (systemFailure) and keeps the last good chain published, until it is fixed;
 * an instance does not start on it.
 */
import { Duration, Effect, ManagedRuntime, Option } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { keyWindows } from "../../src/Platform/SigningKeys.js"
import { OID, pemToDers } from "../../src/Platform/Tsa/Rfc3161.js"
import { TimestampAuthority } from "../../src/Timestamping/Authority.js"
import { cliInProcess } from "../helpers/cli.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { sleep, waitFor } from "../helpers/process.js"
import { readReply, timestampRequest } from "../helpers/timestampRequests.js"

const SUBJECT = "CN=attestd test TSA,O=attestd tests,C=DE"
const POLL = Duration.millis(150)
const TSA_EXTENSIONS = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,nonRepudiation\nextendedKeyUsage=critical,timeStamping\n"

const sha256 = (bytes: Uint8Array) => new Uint8Array(createHash("sha256").update(bytes).digest())

/** The ESSCertIDv2 certHash of a token's signingCertificateV2 attribute: which certificate's key signed it. */
const essCertHash = (token: Uint8Array): string => {
  const signed = new pkijs.SignedData({ schema: pkijs.ContentInfo.fromBER(token).content })
  // SigningCertificateV2 ::= SEQUENCE { certs SEQUENCE OF ESSCertIDv2 }; ESSCertIDv2 ::= SEQUENCE { [hashAlgorithm,] certHash OCTET STRING, … }
  const value = signed.signerInfos[0]!.signedAttrs!.attributes.find((a) => a.type === OID.signingCertificateV2)!.values[0] as asn1js.Sequence
  const essCertId = (value.valueBlock.value[0] as asn1js.Sequence).valueBlock.value[0] as asn1js.Sequence
  const certHash = essCertId.valueBlock.value.find((b): b is asn1js.OctetString => b instanceof asn1js.OctetString)!
  return Buffer.from(certHash.valueBlock.valueHexView).toString("hex")
}

interface Answer {
  readonly instance: string
  readonly status: number
  readonly failInfo: ReadonlyArray<string>
  readonly statusText: string | undefined
  /** The ESSCertIDv2 hash of a granted token. */
  readonly cert: string | undefined
}

describe("rotating the TSA key in production: no outage while the CA certifies the new key", () => {
  let db: TestDatabase | undefined
  let ca = ""
  let chainFile = ""
  const runtimes: Array<ReturnType<typeof makeRuntime>> = []
  let env: Record<string, string> = {}

  const openssl = (...args: Array<string>) => execFileSync("openssl", args, { cwd: ca, stdio: "pipe" })

  /** The CA's certificate for the key of the request `csrPem`, with the TSA extensions; its DER. */
  const certify = (name: string, csrPem: string): Uint8Array => {
    writeFileSync(join(ca, `${name}.csr`), csrPem)
    writeFileSync(join(ca, "tsa.ext"), TSA_EXTENSIONS)
    const verified = spawnSync("openssl", ["req", "-in", `${name}.csr`, "-noout", "-verify"], { cwd: ca, encoding: "utf8" })
    expect(verified.status, verified.stderr).toBe(0)
    openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30", "-extfile", "tsa.ext", "-out", `${name}.pem`)
    return pemToDers(readFileSync(join(ca, `${name}.pem`), "utf8"))[0]!
  }
  const chainText = (name: string) => readFileSync(join(ca, `${name}.pem`), "utf8") + readFileSync(join(ca, "ca.pem"), "utf8")

  const makeRuntime = (database: TestDatabase, chain = chainFile) =>
    ManagedRuntime.make(AppLive(
      AppConfig.make({
        databaseUrl: database.url,
        dataDir: database.dataDir,
        sealInterval: Duration.hours(24),
        signingKeyPoll: POLL,
        timestamping: { ...AppConfig.make().timestamping, certChainFile: Option.some(chain) }
      }),
      { workers: false }
    ))

  const ask = async (instance: string, rt: ReturnType<typeof makeRuntime>, request = timestampRequest({ certReq: true })) => {
    const reply = readReply(await rt.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.respond(request, null))))
    const answer: Answer = {
      instance,
      status: reply.status,
      failInfo: reply.failInfo ?? [],
      statusText: reply.statusText,
      cert: reply.token === undefined ? undefined : essCertHash(reply.token)
    }
    return { answer, reply }
  }
  const chainOf = (rt: ReturnType<typeof makeRuntime>) => rt.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.certificateChain))

  /** Requests tokens from every instance, one after another, until stopped: every answer is kept. */
  const load = () => {
    const answers: Array<Answer> = []
    let running = true
    const done = (async () => {
      while (running) {
        for (const [i, rt] of runtimes.entries()) answers.push((await ask(["A", "B"][i]!, rt)).answer)
        await sleep(10)
      }
    })()
    return { answers, stop: async () => {
      running = false
      await done
    } }
  }

  let oldCert = ""
  let oldKid = ""

  beforeAll(async () => {
    db = await createSqliteDatabase()
    ca = mkdtempSync(join(tmpdir(), "attestd-tsa-ca-"))
    chainFile = join(ca, "tsa-chain.pem")
    env = { DATABASE_URL: db.url, ATTESTD_DATA_DIR: db.dataDir, ATTESTD_TSA_CERT_CHAIN: chainFile }
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=operator CA")
    // the first key, certified before the first start (a start refuses a chain that certifies no key)
    const created = await cliInProcess(["signing-keys", "create", "--tsa"], env)
    expect(created.code, created.stderr).toBe(0)
    oldKid = JSON.parse(created.stdout).kid
    const csr = await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", SUBJECT], env)
    expect(csr.code, csr.stderr).toBe(0)
    oldCert = Buffer.from(sha256(certify("tsa-1", csr.stdout))).toString("hex")
    writeFileSync(chainFile, chainText("tsa-1"))
    runtimes.push(makeRuntime(db), makeRuntime(db))
  }, 60_000)

  afterAll(async () => {
    for (const rt of runtimes) await rt.dispose()
    await db?.drop()
    if (ca !== "") rmSync(ca, { recursive: true, force: true })
  })

  it("the old key signs until the new chain is in place, then every instance switches and the old key retires; nothing is refused", async () => {
    const [a, b] = runtimes as [ReturnType<typeof makeRuntime>, ReturnType<typeof makeRuntime>]
    const chainBefore = await chainOf(a)
    const traffic = load()
    await waitFor("tokens from both instances", () => traffic.answers.length >= 10)

    const rotated = await cliInProcess(["signing-keys", "rotate", "--tsa"], env)
    expect(rotated.code, rotated.stderr).toBe(0)
    // stdout stays one JSON object; the request is its csr member
    const out = JSON.parse(rotated.stdout)
    expect(out).toMatchObject({ kid: expect.any(String), activated_at: expect.any(String), csr: expect.stringMatching(/^-----BEGIN CERTIFICATE REQUEST-----/) })
    expect(out.kid).not.toBe(oldKid)
    expect(rotated.stderr).toMatch(/the previous TSA key signs on until ATTESTD_TSA_CERT_CHAIN certifies/)

    // the CA takes its time: several polls later, tokens still come from the old key and nothing retired
    const rotatedAt = traffic.answers.length
    await sleep(6 * Duration.toMillis(POLL))
    await waitFor("tokens after the rotation from both instances", () => traffic.answers.length - rotatedAt >= 6)
    const meanwhile = traffic.answers.slice(rotatedAt)
    expect(new Set(meanwhile.map((r) => r.cert)), JSON.stringify(meanwhile)).toEqual(new Set([oldCert]))
    expect((await a.runPromise(keyWindows("tsa"))).map((w) => [w.kid, w.retiredAt]).sort()).toEqual([[out.kid, null], [oldKid, null]].sort())
    expect(await chainOf(b)).toBe(chainBefore)

    // the new chain written over the old file, in place
    const newCert = Buffer.from(sha256(certify("tsa-2", out.csr))).toString("hex")
    writeFileSync(chainFile, chainText("tsa-2"))
    await waitFor("both instances to sign with the new key", () => {
      const latest = (instance: string) => traffic.answers.filter((r) => r.instance === instance).at(-1)?.cert
      return latest("A") === newCert && latest("B") === newCert
    }, 10_000)
    await sleep(3 * Duration.toMillis(POLL))
    await traffic.stop()

    // no request refused, before, during or after; once an instance signs with the new key it stays with it
    expect(traffic.answers.filter((r) => r.status !== 0)).toEqual([])
    for (const instance of ["A", "B"]) {
      const certs = traffic.answers.filter((r) => r.instance === instance).map((r) => r.cert === oldCert ? "old" : r.cert === newCert ? "new" : r.cert)
      const first = certs.indexOf("new")
      expect(first, certs.join(" ")).toBeGreaterThan(0)
      expect(certs.slice(first).every((c) => c === "new"), certs.join(" ")).toBe(true)
      expect(certs.slice(0, first).every((c) => c === "old"), certs.join(" ")).toBe(true)
    }

    // the old key's window ends (at the switch plus the overlap); the new key's is open
    const windows = await b.runPromise(keyWindows("tsa"))
    expect(windows.find((w) => w.kid === out.kid)?.retiredAt).toBeNull()
    const retiredAt = windows.find((w) => w.kid === oldKid)?.retiredAt
    expect(retiredAt).toEqual(expect.any(String))
    expect(retiredAt! > out.activated_at).toBe(true)

    // both publish the new chain; a token of the new key verifies with openssl against the operator's CA
    for (const rt of [a, b]) expect(await chainOf(rt)).toBe(chainText("tsa-2"))
    const request = timestampRequest({ certReq: true })
    const { reply } = await ask("A", a, request)
    writeFileSync(join(ca, "request.tsq"), request)
    writeFileSync(join(ca, "token.der"), reply.token!)
    const verified = spawnSync("openssl", ["ts", "-verify", "-in", "token.der", "-token_in", "-queryfile", "request.tsq", "-CAfile", "ca.pem"], { cwd: ca, encoding: "utf8" })
    expect(`${verified.status} ${verified.stdout}${verified.stderr}`).toMatch(/^0 Verification: OK/)
  }, 60_000)

  it("a chain that certifies no key held refuses tokens (systemFailure) and keeps the last good chain published, until it is fixed; no instance starts on it", async () => {
    const [a, b] = runtimes as [ReturnType<typeof makeRuntime>, ReturnType<typeof makeRuntime>]
    const good = readFileSync(chainFile, "utf8")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key")
    openssl("req", "-new", "-key", "other.key", "-subj", "/CN=someone else", "-out", "other.csr")
    certify("other", readFileSync(join(ca, "other.csr"), "utf8"))
    writeFileSync(chainFile, chainText("other"))
    await waitFor("A to refuse tokens", async () => (await ask("A", a)).answer.failInfo.includes("systemFailure"), 10_000)
    await waitFor("B to refuse tokens", async () => (await ask("B", b)).answer.failInfo.includes("systemFailure"), 10_000)
    for (const rt of [a, b]) expect(await chainOf(rt)).toBe(good)

    writeFileSync(chainFile, good)
    for (const [name, rt] of [["A", a], ["B", b]] as const) {
      await waitFor(`${name} to grant tokens again`, async () => (await ask(name, rt)).answer.status === 0, 10_000)
    }

    // an instance does not start on such a chain, and says which key to certify and how
    const otherChain = join(ca, "other-chain.pem")
    writeFileSync(otherChain, chainText("other"))
    const refused = makeRuntime(db!, otherChain)
    const started = await refused.runPromise(Effect.flatMap(TimestampAuthority, (x) => x.certificateChain)).then(() => "started", (e: unknown) => String(e))
    await refused.dispose()
    expect(started).toMatch(/its TSA certificate certifies the key \S+, which is no TSA key this instance holds valid now \(it holds .*\); certify the TSA key \S+: `attestd signing-keys csr --tsa --kid/)
  }, 60_000)
})
