/**
 * attestd's time-stamping authority as the RFC 3161 clients people use see it
 * (CONTRACT §6), against a built dist/ server on SQLite (and the endpoint and
 * lookup once on Postgres). Each client asks for a token and checks it with its
 * own code: `openssl ts -verify` with the published chain, `osslsigncode
 * verify` of a signed CAB with the TSA CA, `jarsigner -verify` of a signed jar
 * with the TSA root as its only trust, Bouncy Castle's TimeStampToken.validate,
 * and rfc3161ng (which can check only RSA tokens: it gets and parses a granted
 * reply). The clients run concurrently. Under CI=true a missing client fails.
 */
import { execFile } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseTimeStampResponse, parseTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"
import { freePort, type ServeProcess, startServe } from "../helpers/process.js"

const run = promisify(execFile)

const BC_JARS = ["/usr/share/java/bcpkix.jar", "/usr/share/java/bcprov.jar", "/usr/share/java/bcutil.jar"]
const TOOLS: Readonly<Record<string, ReadonlyArray<string>>> = {
  openssl: ["/usr/bin/openssl"],
  osslsigncode: ["/usr/bin/osslsigncode", "/usr/bin/gcab", "/usr/bin/openssl"],
  jarsigner: ["/usr/bin/jarsigner", "/usr/bin/keytool", "/usr/bin/jar"],
  bouncycastle: ["/usr/bin/java", ...BC_JARS],
  rfc3161ng: ["/usr/bin/python3", "/usr/lib/python3/dist-packages/rfc3161ng/__init__.py"]
}

/** Whether a client's programs are installed; under CI=true a missing one fails the suite. */
const have = (client: string): boolean => {
  const missing = TOOLS[client]!.filter((path) => !existsSync(path))
  if (missing.length > 0 && process.env.CI === "true") {
    throw new Error(`CI=true but ${missing.join(", ")} is missing: .ci/run installs the RFC 3161 clients`)
  }
  return missing.length === 0
}

/** Runs a program to completion; its stdout and stderr together (clients print results on either). */
const output = async (file: string, args: ReadonlyArray<string>, cwd: string): Promise<string> => {
  try {
    const { stdout, stderr } = await run(file, [...args], { cwd, timeout: 120_000, maxBuffer: 8 * 1024 * 1024 })
    return `${stdout}\n${stderr}`
  } catch (e) {
    const x = e as { stdout?: string; stderr?: string; message: string }
    throw new Error(`${file} ${args.join(" ")} failed: ${x.message}\n${x.stdout ?? ""}\n${x.stderr ?? ""}`)
  }
}

const sha256Hex = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

const post = async (url: string, body: Uint8Array, headers: Record<string, string> = {}) => {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/timestamp-query", ...headers }, body })
  return { status: res.status, type: res.headers.get("content-type"), body: new Uint8Array(await res.arrayBuffer()) }
}

/** openssl's request for `file` → POST → the reply on disk; what the server answered. */
const opensslRoundTrip = async (base: string, dir: string, name: string) => {
  writeFileSync(join(dir, `${name}.txt`), `attestd ${name} ${Date.now()}\n`)
  await output("openssl", ["ts", "-query", "-data", `${name}.txt`, "-sha256", "-cert", "-out", `${name}.tsq`], dir)
  // jarsigner sends this Accept header; the reply must not depend on it
  const reply = await post(`${base}/v1/timestamp`, readFileSync(join(dir, `${name}.tsq`)), { accept: "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2" })
  writeFileSync(join(dir, `${name}.tsr`), reply.body)
  return reply
}

/** The published chain (GET /v1/timestamp/certchain) as tsa.pem and root.pem in `dir`. */
const saveChain = async (base: string, dir: string) => {
  const res = await fetch(`${base}/v1/timestamp/certchain`)
  expect(res.status).toBe(200)
  expect(res.headers.get("content-type")).toBe("application/pem-certificate-chain")
  const blocks = (await res.text()).match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n/g) ?? []
  expect(blocks).toHaveLength(2)
  writeFileSync(join(dir, "tsa.pem"), blocks[0]!)
  writeFileSync(join(dir, "root.pem"), blocks[1]!)
}

const lookup = async (base: string, serial: string) => {
  const res = await fetch(`${base}/v1/timestamp/${serial}`)
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

/** The serial `openssl ts -reply -text` shows, lowercase hex without leading zeros. */
const serialOf = (text: string): string => /Serial number: 0x([0-9A-F]+)/.exec(text)![1]!.toLowerCase().replace(/^0+(?=.)/, "")

describe.concurrent("RFC 3161 clients against attestd (dist, SQLite)", () => {
  let dir = ""
  let serve: ServeProcess | undefined
  let base = ""

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "attestd-tsa-clients-"))
    const dataDir = join(dir, "data")
    mkdirSync(dataDir)
    serve = await startServe({ databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: await freePort() }, 60_000)
    base = serve.url
    await saveChain(base, dir)
  }, 120_000)

  afterAll(async () => {
    await serve?.kill("SIGTERM")
    rmSync(dir, { recursive: true, force: true })
  })

  it.skipIf(!have("openssl"))("openssl ts: -query, -reply -text, -verify with the published chain; the token is registered", async () => {
    const reply = await opensslRoundTrip(base, dir, "openssl")
    expect(reply.status).toBe(200)
    expect(reply.type).toBe("application/timestamp-reply")
    const text = await output("openssl", ["ts", "-reply", "-in", "openssl.tsr", "-text"], dir)
    expect(text).toContain("Status: Granted.")
    expect(text).toContain("Policy OID: 2.999.1")
    expect(text).toContain("Hash Algorithm: sha256")
    expect(text).toMatch(/Time stamp: \w{3} +\d+ \d\d:\d\d:\d\d(\.\d+)? \d{4} GMT/)
    expect(text).toContain("Accuracy: 0x01 seconds")
    expect(text).toContain("Ordering: no")
    expect(text).toMatch(/Nonce: 0x[0-9A-F]+/)
    expect(text).toContain("TSA: DirName:/O=attestd demo (not a qualified trust service)/CN=attestd time-stamping authority (demo, unqualified)")
    const verified = await output(
      "openssl",
      ["ts", "-verify", "-in", "openssl.tsr", "-queryfile", "openssl.tsq", "-CAfile", "root.pem", "-untrusted", "tsa.pem"],
      dir
    )
    expect(verified).toContain("Verification: OK")

    // the lookup serves the very token, registered by its SHA-256 and by the imprint
    const token = parseTimeStampResponse(reply.body).token!
    const found = await lookup(base, serialOf(text))
    expect(found.status).toBe(200)
    expect(found.body.token).toBe(Buffer.from(token).toString("base64"))
    expect(found.body.token_sha256).toBe(sha256Hex(token))
    expect(found.body.hashed_message).toBe(sha256Hex(readFileSync(join(dir, "openssl.txt"))))
    const evidence = await (await fetch(`${base}/v1/timestamp/${serialOf(text)}/evidence`)).json() as { hash_hex: string; id: string }
    expect(evidence.hash_hex).toBe(sha256Hex(token))
    expect(evidence.id).toBe(found.body.token_attestation_id)
    const imprint = await (await fetch(`${base}/v1/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ hash_hex: found.body.hashed_message })
    })).json() as { exists: boolean; id: string }
    expect(imprint).toMatchObject({ exists: true, id: found.body.imprint_attestation_id })
  })

  it.skipIf(!have("osslsigncode"))("osslsigncode: signs a gcab CAB with -ts, verify checks the timestamp against the TSA CA", async () => {
    const cab = join(dir, "cab")
    mkdirSync(cab)
    writeFileSync(join(cab, "payload.txt"), "attestd in a cabinet\n")
    await output("gcab", ["-c", "app.cab", "payload.txt"], cab)
    await output("openssl", [
      "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=attestd code-signing test",
      "-addext", "extendedKeyUsage=codeSigning", "-keyout", "code.key", "-out", "code.pem"
    ], cab)
    const signed = await output("osslsigncode", [
      "sign", "-certs", "code.pem", "-key", "code.key", "-ts", `${base}/v1/timestamp`, "-in", "app.cab", "-out", "signed.cab"
    ], cab)
    expect(signed).toContain("Succeeded")
    const verified = await output("osslsigncode", ["verify", "-in", "signed.cab", "-CAfile", "code.pem", "-TSA-CAfile", join(dir, "root.pem")], cab)
    expect(verified).toContain("Timestamp Server Signature verification: ok")
    expect(verified).toContain("Subject: /O=attestd demo (not a qualified trust service)/CN=attestd time-stamping authority (demo, unqualified)")
    expect(verified).toContain("Signature verification: ok")
    const serial = /Timestamp serial number: ([0-9A-F]+)/.exec(verified)![1]!.toLowerCase().replace(/^0+(?=.)/, "")
    expect((await lookup(base, serial)).status).toBe(200)
  })

  it.skipIf(!have("jarsigner"))("jarsigner -tsa: signs a jar; -verify trusts the timestamp through the TSA root alone", async () => {
    const jarDir = join(dir, "jar")
    mkdirSync(jarDir)
    writeFileSync(join(jarDir, "hello.txt"), "attestd in a jar\n")
    await output("jar", ["cf", "app.jar", "hello.txt"], jarDir)
    const store = ["-storetype", "PKCS12", "-storepass", "changeit"]
    await output("keytool", [
      "-genkeypair", "-keystore", "signer.p12", ...store, "-keypass", "changeit", "-alias", "signer",
      "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=attestd jar test", "-validity", "2"
    ], jarDir)
    await output("keytool", ["-importcert", "-noprompt", "-keystore", "trust.p12", ...store, "-alias", "tsa-root", "-file", join(dir, "root.pem")], jarDir)
    const signed = await output("jarsigner", ["-keystore", "signer.p12", "-storepass", "changeit", "-tsa", `${base}/v1/timestamp`, "app.jar", "signer"], jarDir)
    expect(signed).toContain("jar signed.")
    const verified = await output("jarsigner", ["-verify", "-verbose", "-certs", "-keystore", "trust.p12", "-storepass", "changeit", "app.jar"], jarDir)
    expect(verified).toContain("jar verified.")
    expect(verified).toMatch(/Timestamped by "CN="attestd time-stamping authority \(demo, unqualified\)", O=attestd demo \(not a qualified trust service\)" on \w{3} \w{3} \d+ \d\d:\d\d:\d\d UTC \d{4}/)
    expect(verified).toContain("Timestamp signature algorithm: SHA256withECDSA")
    // the signer's own certificate is self-signed and untrusted; the TSA's chain is trusted
    expect(verified).not.toContain("TSA certificate chain is invalid")
  })

  it.skipIf(!have("bouncycastle") || !have("openssl"))("Bouncy Castle: TimeStampToken.validate with the TSA certificate", async () => {
    await opensslRoundTrip(base, dir, "bc")
    const validated = await output(
      "java",
      ["-cp", BC_JARS.join(":"), join(import.meta.dirname, "Validate.java"), "bc.tsr", "tsa.pem", "bc.txt"],
      dir
    )
    expect(validated).toMatch(/VALID serial=[0-9a-f]+ genTime=\S+ policy=2\.999\.1/)
  })

  it.skipIf(!have("rfc3161ng"))("rfc3161ng: a granted reply it can parse, nonce echoed", async () => {
    const printed = await output("/usr/bin/python3", [join(import.meta.dirname, "rfc3161ng_request.py"), `${base}/v1/timestamp`], dir)
    const m = /status 0 nonce 424242 serial ([0-9a-f]+) policy 2\.999\.1 time \S+/.exec(printed)
    expect(m, printed).not.toBeNull()
    const found = await lookup(base, m![1]!)
    expect(found.status).toBe(200)
    expect(parseTimeStampToken(Buffer.from(found.body.token as string, "base64")).nonce).toBe("424242")
  })
})

const pgUp = await postgresAvailable()

describe("the endpoint and the lookup on Postgres (dist)", () => {
  let db: TestDatabase | undefined
  let serve: ServeProcess | undefined

  beforeAll(async () => {
    if (!pgUp) return
    db = await createPgDatabase()
    serve = await startServe({ databaseUrl: db.url, dataDir: db.dataDir, port: await freePort() }, 60_000)
  }, 120_000)

  afterAll(async () => {
    await serve?.kill("SIGTERM")
    await db?.drop()
  })

  it.skipIf(!pgUp || !have("openssl"))("openssl's request is granted, verified and looked up", async () => {
    const work = db!.dataDir
    await saveChain(serve!.url, work)
    const reply = await opensslRoundTrip(serve!.url, work, "pg")
    expect(reply.status).toBe(200)
    const verified = await output("openssl", ["ts", "-verify", "-in", "pg.tsr", "-queryfile", "pg.tsq", "-CAfile", "root.pem", "-untrusted", "tsa.pem"], work)
    expect(verified).toContain("Verification: OK")
    const token = parseTimeStampResponse(reply.body).token!
    const serial = BigInt(parseTimeStampToken(token).serial_number).toString(16)
    const found = await lookup(serve!.url, `00${serial.toUpperCase()}`)
    expect(found.status).toBe(200)
    expect(found.body).toMatchObject({ serial_number: serial, hash_algorithm: "sha256", policy: "2.999.1", token_sha256: sha256Hex(token) })
    expect((await lookup(serve!.url, "0123456789abcdef")).status).toBe(404)
  })
})
