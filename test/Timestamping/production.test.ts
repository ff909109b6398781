/**
 * What a production time-stamping authority refuses to start with (CONTRACT §6):
 * ATTESTD_TIMESTAMPING=on without its chain, policy or NTP servers; a chain
 * (ATTESTD_TSA_CERT_CHAIN) whose TSA certificate certifies another key or lacks
 * the critical timeStamping EKU. A chain that fits is taken, and a token embeds
 * it without its self-signed root. Certificates here are made by the openssl CLI,
 * as an operator's CA would.
 */
import { ConfigProvider, Effect, Either, Option } from "effect"
import { execFileSync } from "node:child_process"
import { createPublicKey } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { appConfig } from "../../src/Platform/Config.js"
import { ephemeralKey, heldFileKey } from "../../src/Platform/Keys/FileKeys.js"
import { readChainFile } from "../../src/Timestamping/Certificates.js"
import { certifiedOf } from "../../src/Timestamping/TsaSigning.js"

const configFrom = (env: Record<string, string>) =>
  Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))

const PRODUCTION = {
  ATTESTD_MODE: "production",
  ATTESTD_TSA_URL: "https://tsa.example/",
  ATTESTD_TSA_CA_FILE: "/dev/null",
  ATTESTD_OTS_CALENDARS: "https://calendar.example/",
  ATTESTD_BITCOIN_SOURCES: "https://esplora.example/api"
}

describe("production configuration of the TSA", () => {
  it("is off by default in production, on by default in demo", () => {
    const production = configFrom(PRODUCTION)
    expect(Either.isRight(production) && production.right.timestamping.enabled).toBe(false)
    const demo = configFrom({})
    expect(Either.isRight(demo) && demo.right.timestamping).toMatchObject({ enabled: true, access: "public", policy: "2.999.1", clockToleranceMs: 1000 })
  })

  it("refuses ATTESTD_TIMESTAMPING=on without the chain, the policy and NTP servers, naming each missing one", () => {
    const refused = configFrom({ ...PRODUCTION, ATTESTD_TIMESTAMPING: "on", ATTESTD_TSA_POLICY: "1.3.6.1.4.1.99999.1" })
    expect(Either.isLeft(refused) && String(refused.left)).toMatch(/ATTESTD_TSA_CERT_CHAIN, ATTESTD_NTP_SERVERS/)
    const taken = configFrom({
      ...PRODUCTION,
      ATTESTD_TIMESTAMPING: "on",
      ATTESTD_TSA_POLICY: "1.3.6.1.4.1.99999.1",
      ATTESTD_TSA_CERT_CHAIN: "/etc/attestd/tsa-chain.pem",
      ATTESTD_NTP_SERVERS: "ntp1.example,ntp2.example:123,ntp3.example",
      ATTESTD_TSA_ACCESS: "key"
    })
    expect(Either.isRight(taken) && taken.right.timestamping).toMatchObject({
      enabled: true,
      access: "key",
      policy: "1.3.6.1.4.1.99999.1",
      certChainFile: Option.some("/etc/attestd/tsa-chain.pem"),
      ntpServers: [{ host: "ntp1.example", port: 123 }, { host: "ntp2.example", port: 123 }, { host: "ntp3.example", port: 123 }]
    })
    expect(Either.isLeft(configFrom({ ATTESTD_TSA_POLICY: "not.an.oid" }))).toBe(true)
    expect(Either.isLeft(configFrom({ ATTESTD_TSA_POLICIES: "1.2.3,x" }))).toBe(true)
  })
})

describe("ATTESTD_TSA_CERT_CHAIN", () => {
  let dir = ""
  const tsaKey = ephemeralKey()
  const held = heldFileKey("tsa", tsaKey)
  const openssl = (...args: Array<string>) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" })

  /** A leaf for `keyFile`'s key under the CA, with these extensions; the chain file (leaf, CA) it makes. */
  const chainFor = (name: string, keyFile: string, extensions: string): string => {
    writeFileSync(join(dir, `${name}.ext`), extensions)
    openssl("req", "-new", "-key", keyFile, "-subj", `/CN=${name}`, "-out", `${name}.csr`)
    openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30", "-extfile", `${name}.ext`, "-out", `${name}.pem`)
    const file = join(dir, `${name}-chain.pem`)
    writeFileSync(file, readFileSync(join(dir, `${name}.pem`), "utf8") + readFileSync(join(dir, "ca.pem"), "utf8"))
    return file
  }

  /** The chain the authority signs under with `file` while it holds only the TSA key, as it reads it (TsaSigning). */
  const load = (file: string) => Either.map(certifiedOf(file, readChainFile(file), [held]), (c) => c.chain!)

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "attestd-tsa-chain-"))
    writeFileSync(join(dir, "tsa.key"), tsaKey.privateKey.export({ type: "pkcs8", format: "pem" }))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=operator CA")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key")
  })

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true })
  })

  const TSA_EXTENSIONS = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,nonRepudiation\nextendedKeyUsage=critical,timeStamping\n"

  it("takes a chain that certifies the TSA key with the critical timeStamping EKU; tokens embed it without the root", async () => {
    const loaded = load(chainFor("good", "tsa.key", TSA_EXTENSIONS))
    expect(Either.isRight(loaded)).toBe(true)
    if (Either.isRight(loaded)) {
      expect(loaded.right.embedded).toHaveLength(1)
      expect(loaded.right.pem.match(/BEGIN CERTIFICATE/g)).toHaveLength(2)
      // the chain's first certificate is the TSA's, for the TSA key
      expect(createPublicKey(loaded.right.pem).export({ format: "jwk" }).x).toBe(tsaKey.jwk.x)
    }
  })

  it("refuses a chain whose TSA certificate certifies another key", async () => {
    const refused = load(chainFor("otherkey", "other.key", TSA_EXTENSIONS))
    expect(Either.isLeft(refused) && refused.left).toMatch(/certifies the key \S+, which is no TSA key this instance holds valid now \(it holds [^)]+\).*signing-keys csr --tsa --kid/)
  })

  it("refuses a TSA certificate without the critical timeStamping EKU, or with more purposes", async () => {
    const lax = load(chainFor("noncritical", "tsa.key", "extendedKeyUsage=timeStamping\n"))
    expect(Either.isLeft(lax) && lax.left).toMatch(/not critical/)
    const none = load(chainFor("noeku", "tsa.key", "keyUsage=critical,digitalSignature\n"))
    expect(Either.isLeft(none) && none.left).toMatch(/no extendedKeyUsage/)
    const more = load(chainFor("more", "tsa.key", "extendedKeyUsage=critical,timeStamping,codeSigning\n"))
    expect(Either.isLeft(more) && more.left).toMatch(/exactly id-kp-timeStamping/)
    const empty = join(dir, "empty.pem")
    writeFileSync(empty, "")
    expect(Either.isLeft(load(empty))).toBe(true)
  })
})
