/**
 * Time-stamp replies made by `openssl ts -reply` with throwaway TSAs (test/helpers/opensslTsa.ts:
 * an ECDSA P-256 CA and TSA certificate with a critical timeStamping EKU), for the token
 * verifier's suites: a good reply over a data file, one without certificates (no certReq),
 * one with a SHA-384 imprint, one whose signature is tampered, one signed by a TSA
 * certificate that had expired at genTime, a rejection (SHA-1 is refused), and a second
 * TSA whose CA is the wrong one.
 */
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type OpensslTsa, startOpensslTsa } from "./opensslTsa.js"

const openssl = (args: ReadonlyArray<string>, cwd: string): Promise<string> =>
  new Promise((resolve, reject) => {
    execFile("openssl", args, { cwd, encoding: "utf8", timeout: 30_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`openssl ${args.join(" ")}: ${stderr}`)) : resolve(stdout))
  })

export interface TsrFixtures {
  readonly dir: string
  readonly data: Buffer
  /** Paths in `dir`. */
  readonly files: {
    readonly data: string
    readonly ca: string
    readonly otherCa: string
    /** The TSA certificate then its CA: what GET /v1/timestamp/certchain serves. */
    readonly chain: string
    readonly good: string
    readonly noCerts: string
    readonly sha384: string
    readonly tampered: string
    readonly expired: string
    readonly rejected: string
    readonly garbage: string
  }
  /** The TimeStampToken (CMS ContentInfo DER) inside the good reply. */
  readonly goodToken: Buffer
  /** Serial number of a reply, lowercase hex without leading zeros. */
  serialOf(tsr: string): Promise<string>
  close(): Promise<void>
}

export const makeTsrFixtures = async (): Promise<TsrFixtures> => {
  const dir = await mkdtemp(join(tmpdir(), "attestd-tsr-"))
  const tsas: Array<OpensslTsa> = [await startOpensslTsa({ commonName: "token verifier" }), await startOpensslTsa({ commonName: "other" })]
  const [tsa, other] = tsas as [OpensslTsa, OpensslTsa]
  const cnf = join(tsa.dir, "openssl.cnf")
  const data = Buffer.concat([Buffer.from("time-stamped data "), randomBytes(16)])
  const at = (name: string) => join(dir, name)
  await writeFile(at("data.bin"), data)
  await writeFile(at("ca.pem"), tsa.caPem)
  await writeFile(at("other-ca.pem"), other.caPem)
  await writeFile(at("chain.pem"), `${await readFile(tsa.tsaCertFile, "utf8")}${tsa.caPem}`)

  const reply = async (out: string, query: ReadonlyArray<string>, signer: ReadonlyArray<string> = []) => {
    const q = at(`${out}.tsq`)
    await openssl(["ts", "-query", "-data", at("data.bin"), ...query, "-out", q], dir)
    await openssl(["ts", "-reply", "-config", cnf, "-section", "tsa_config1", "-queryfile", q, ...signer, "-out", at(out)], dir)
    await rm(q)
  }
  await reply("good.tsr", ["-sha256", "-cert"])
  await reply("no-certs.tsr", ["-sha256"])
  await reply("sha384.tsr", ["-sha384", "-cert"])
  await reply("rejected.tsr", ["-sha1", "-cert"])

  const good = await readFile(at("good.tsr"))
  const tampered = Buffer.from(good)
  tampered[tampered.length - 1] = tampered[tampered.length - 1]! ^ 0x01
  await writeFile(at("tampered.tsr"), tampered)
  await writeFile(at("garbage.tsr"), randomBytes(64))
  await openssl(["ts", "-reply", "-in", at("good.tsr"), "-token_out", "-out", at("good.tok")], dir)

  // A TSA certificate valid in 2020 only, from the same CA: the chain did not hold at genTime.
  await writeFile(join(tsa.dir, "ca.cnf"), [
    "[ ca ]", "default_ca = ca_default", "[ ca_default ]", `dir = ${tsa.dir}`, "database = $dir/index.txt", "new_certs_dir = $dir",
    "serial = $dir/caserial", "default_md = sha256", "policy = policy_any", "[ policy_any ]", "commonName = supplied", "organizationName = optional"
  ].join("\n"))
  await writeFile(join(tsa.dir, "index.txt"), "")
  await writeFile(join(tsa.dir, "caserial"), `${randomBytes(8).toString("hex")}\n`)
  await openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "expired.key", "-out", "expired.csr",
    "-subj", "/O=token verifier/CN=expired TSA"], tsa.dir)
  await openssl(["ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "expired.csr", "-out", "expired.pem",
    "-startdate", "20200101000000Z", "-enddate", "20201231000000Z", "-extfile", "openssl.cnf", "-extensions", "v3_tsa", "-notext"], tsa.dir)
  await reply("expired.tsr", ["-sha256", "-cert"], ["-signer", join(tsa.dir, "expired.pem"), "-inkey", join(tsa.dir, "expired.key")])

  return {
    dir,
    data,
    files: {
      data: at("data.bin"),
      ca: at("ca.pem"),
      otherCa: at("other-ca.pem"),
      chain: at("chain.pem"),
      good: at("good.tsr"),
      noCerts: at("no-certs.tsr"),
      sha384: at("sha384.tsr"),
      tampered: at("tampered.tsr"),
      expired: at("expired.tsr"),
      rejected: at("rejected.tsr"),
      garbage: at("garbage.tsr")
    },
    goodToken: await readFile(at("good.tok")),
    serialOf: async (tsr) => {
      const text = await openssl(["ts", "-reply", "-in", tsr, "-text"], dir)
      const m = /Serial number: (?:0x)?([0-9A-Fa-f]+)/.exec(text)
      if (!m) throw new Error(`no serial in ${text}`)
      return m[1]!.toLowerCase().replace(/^0+(?=.)/, "")
    },
    close: async () => {
      for (const t of tsas) await t.close()
      await rm(dir, { recursive: true, force: true })
    }
  }
}
