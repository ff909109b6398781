/**
 * `attestd signing-keys csr --tsa`: a PKCS#10 request for a TSA key in custody, signed by
 * the key where it lives — a plain key file, an encrypted one, a SoftHSM2 token — that
 * OpenSSL verifies and shows with the subject given and the TSA certificate's extensions
 * requested (critical timeStamping EKU, critical keyUsage digitalSignature and
 * nonRepudiation). And the RFC 4514 subjects it takes and refuses.
 */
import { Either } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { createPublicKey } from "node:crypto"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { parseSubject } from "../../src/Platform/Tsa/CertificationRequest.js"
import { formatName } from "../../src/Platform/Tsa/Rfc3161.js"
import { cliInProcess } from "../helpers/cli.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { freePort, runCli } from "../helpers/process.js"
import { makeSoftToken, softhsmAvailable } from "../helpers/softhsm.js"

const SUBJECT = "CN=attestd test TSA,OU=Time-stamping,O=Example\\, Inc.,L=Berlin,ST=Berlin,C=DE"

/** What `openssl req` says of `pem`: its own verification, and the text form. */
const opensslRead = (pem: string, dir: string) => {
  const file = join(dir, `request-${Math.random().toString(36).slice(2)}.csr`)
  writeFileSync(file, pem)
  // OpenSSL 3 says "verify OK" on stderr, and exits 1 when the signature does not verify
  const check = spawnSync("openssl", ["req", "-in", file, "-noout", "-verify"], { encoding: "utf8" })
  const verified = `exit ${check.status}: ${check.stdout}${check.stderr}`
  const text = execFileSync("openssl", ["req", "-in", file, "-noout", "-text"], { encoding: "utf8" })
  const publicKey = execFileSync("openssl", ["req", "-in", file, "-noout", "-pubkey"], { encoding: "utf8" })
  return { verified, text, x: createPublicKey(publicKey).export({ format: "jwk" }).x }
}

/** The checks every request must pass, whatever holds its key. */
const expectTsaRequest = (pem: string, dir: string, jwkX: string) => {
  expect(pem).toMatch(/^-----BEGIN CERTIFICATE REQUEST-----\n[\s\S]+\n-----END CERTIFICATE REQUEST-----$/)
  const read = opensslRead(pem, dir)
  expect(read.verified).toMatch(/^exit 0: .*verify OK/is)
  expect(read.x).toBe(jwkX)
  expect(read.text).toMatch(/Subject: C = DE, ST = Berlin, L = Berlin, O = "Example, Inc\.", OU = Time-stamping, CN = attestd test TSA/)
  expect(read.text).toMatch(/Signature Algorithm: ecdsa-with-SHA256/)
  expect(read.text).toMatch(/Requested Extensions:/)
  expect(read.text).toMatch(/X509v3 Key Usage: critical\s+Digital Signature, Non Repudiation/)
  expect(read.text).toMatch(/X509v3 Extended Key Usage: critical\s+Time Stamping\s/)
}

const jsonOf = (stdout: string): any => JSON.parse(stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()!)

describe("RFC 4514 subjects", () => {
  it("reads the most specific RDN first, with escapes, and writes one attribute per RDN in ASN.1 order", () => {
    const parsed = parseSubject(SUBJECT)
    expect(Either.isRight(parsed)).toBe(true)
    const name = Either.getOrThrow(parsed)
    expect(name.typesAndValues.map((tv) => tv.type)).toEqual(["2.5.4.6", "2.5.4.8", "2.5.4.7", "2.5.4.10", "2.5.4.11", "2.5.4.3"])
    expect(formatName(name)).toBe(SUBJECT)
    // spaces around separators, case of names, hex escapes (UTF-8), serialNumber and emailAddress
    const loose = Either.getOrThrow(parseSubject(" cn = Zeitstempel M\\C3\\BCnchen , emailAddress=tsa@example.org, SERIALNUMBER=HRB 1234 "))
    expect(formatName(loose)).toBe("CN=Zeitstempel München,emailAddress=tsa@example.org,serialNumber=HRB 1234")
  })

  it("refuses what it does not support, naming the reason", () => {
    const refusal = (text: string) => Either.match(parseSubject(text), { onLeft: (e) => e, onRight: () => "taken" })
    expect(refusal("CN=x,DC=example")).toMatch(/unknown attribute "DC"; known: CN, O, OU, C, L, ST/)
    expect(refusal("CN=x+O=y")).toMatch(/multi-valued RDNs are not supported/)
    expect(refusal("CN=x,C=Germany")).toMatch(/C must be a two-letter country code/)
    expect(refusal("CN=x,C=de")).toMatch(/C must be a two-letter country code/)
    expect(refusal("CN=x,,O=y")).toMatch(/an RDN is empty/)
    expect(refusal("CN=")).toMatch(/CN is empty/)
    expect(refusal("O=only an organization")).toMatch(/names no CN/)
    expect(refusal("CN=#0403616263")).toMatch(/hex-encoded values/)
    expect(refusal(`CN=${"x".repeat(65)}`)).toMatch(/CN is longer than 64/)
    expect(refusal("CN x")).toMatch(/is not NAME=value/)
    expect(refusal("CN=x\\")).toMatch(/lone backslash/)
    expect(refusal("CN=\\FF")).toMatch(/not UTF-8/)
    expect(refusal("CN=x,emailAddress=tsa@exämple.org")).toMatch(/only ASCII/)
  })
})

describe("signing-keys csr --tsa", () => {
  const cleanup: Array<() => Promise<void> | void> = []
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c()
  })
  const database = async (): Promise<TestDatabase> => {
    const db = await createSqliteDatabase()
    cleanup.push(db.drop)
    return db
  }

  it("a plain key file: the request verifies, names the subject and asks for the TSA extensions", async () => {
    const db = await database()
    const env = { DATABASE_URL: db.url, ATTESTD_DATA_DIR: db.dataDir }
    const created = await cliInProcess(["signing-keys", "create", "--tsa"], env)
    expect(created.code, created.stderr).toBe(0)
    const key = jsonOf(created.stdout)
    const r = await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", SUBJECT], env)
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toMatch(new RegExp(`certification request of the TSA key ${key.kid}, subject CN=attestd test TSA`))
    expectTsaRequest(r.stdout.trim(), db.dataDir, key.jwk.x)
    // by kid, the same key
    const byKid = await cliInProcess(["signing-keys", "csr", "--tsa", "--kid", key.kid, "--subject", SUBJECT], env)
    expect(byKid.code, byKid.stderr).toBe(0)
    expect(opensslRead(byKid.stdout, db.dataDir).x).toBe(key.jwk.x)
  })

  it("an encrypted key file: the key signs its request without being written out", async () => {
    const db = await database()
    const passphraseFile = join(db.dataDir, "passphrase")
    writeFileSync(passphraseFile, "correct horse battery staple\n", { mode: 0o600 })
    const env = { DATABASE_URL: db.url, ATTESTD_DATA_DIR: db.dataDir, ATTESTD_KEY_PASSPHRASE_FILE: passphraseFile }
    const created = await cliInProcess(["signing-keys", "create", "--tsa"], env)
    expect(created.code, created.stderr).toBe(0)
    const r = await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", SUBJECT], env)
    expect(r.code, r.stderr).toBe(0)
    expectTsaRequest(r.stdout.trim(), db.dataDir, jsonOf(created.stdout).jwk.x)
  })

  it("refuses without --tsa, with a subject it cannot encode, without a subject or a chain to take it from, for a key it does not hold; rotate makes no key it cannot ask for", async () => {
    const db = await database()
    const env = { DATABASE_URL: db.url, ATTESTD_DATA_DIR: db.dataDir }
    expect(await cliInProcess(["signing-keys", "csr", "--subject", SUBJECT], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/needs --tsa/) })
    expect(await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", "CN=x,DC=example"], env)).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--subject: unknown attribute "DC"/)
    })
    expect(await cliInProcess(["signing-keys", "csr", "--tsa"], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/--subject is needed/) })
    expect(await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", SUBJECT], env)).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/no TSA key that is not retired in .*signing-keys create --tsa/)
    })
    expect(await cliInProcess(["signing-keys", "csr", "--tsa", "--kid", "nope", "--subject", SUBJECT], env)).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/no TSA key nope in/)
    })
    // rotate in production: no key is made that the CA cannot be asked to certify
    const production = { ...env, ATTESTD_TSA_CERT_CHAIN: join(db.dataDir, "missing-chain.pem") }
    expect(await cliInProcess(["signing-keys", "rotate", "--tsa"], production)).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--subject is needed: the TSA's name cannot be taken from its chain \(ATTESTD_TSA_CERT_CHAIN .*missing-chain.pem: cannot read it/)
    })
    expect(await cliInProcess(["signing-keys", "rotate", "--subject", SUBJECT], production)).toMatchObject({ code: 2, stderr: expect.stringMatching(/it needs --tsa/) })
    expect(await cliInProcess(["signing-keys", "rotate", "--tsa", "--subject", SUBJECT], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/it needs --tsa and ATTESTD_TSA_CERT_CHAIN/) })
    expect((await cliInProcess(["signing-keys", "csr", "--tsa", "--subject", SUBJECT], env)).code).toBe(1)
  })

  it.skipIf(!softhsmAvailable())("a key in a SoftHSM2 token: the token signs the request (the built CLI, as an operator runs it)", async () => {
    const db = await database()
    const token = makeSoftToken("attestd-csr")
    cleanup.push(token.cleanup)
    const e = { databaseUrl: db.url, dataDir: db.dataDir, port: await freePort(), extra: token.env }
    const created = await runCli(e, ["signing-keys", "create", "--tsa", "--pkcs11"])
    expect(created.code, created.stderr).toBe(0)
    const key = jsonOf(created.stdout)
    expect(token.listObjects()).toContain(`attestd-tsa-${key.kid}`)
    const r = await runCli(e, ["signing-keys", "csr", "--tsa", "--subject", SUBJECT])
    expect(r.code, r.stderr).toBe(0)
    expectTsaRequest(r.stdout.trim(), db.dataDir, key.jwk.x)
  })
})

