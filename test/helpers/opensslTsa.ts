/**
 * A real RFC 3161 TSA for tests: a CA made with the `openssl` CLI in a temp
 * directory, and `openssl ts -reply` served over node:http on 127.0.0.1.
 *
 * Notes (measured): `openssl ts -reply` updates its serial file without a
 * lock, so replies are serialised through a promise queue; `-queryfile -`
 * does not read stdin, so each query goes through a temporary file.
 */
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"

export type TsaMode = "ok" | "http500" | "garbage" | "hang" | "wrongDigest"

export interface OpensslTsa {
  readonly url: string
  readonly dir: string
  readonly caPem: string
  readonly caFile: string
  readonly caKeyFile: string
  readonly tsaCertFile: string
  readonly tsaKeyFile: string
  setMode(m: TsaMode): void
  /** Number of HTTP requests received so far. */
  readonly requests: number
  /** Issue another leaf certificate from this CA (e.g. one without a critical EKU). */
  issueLeaf(opts: { name: string; ekuCritical: boolean; eku?: string }): Promise<{ certFile: string; keyFile: string; certPem: string; keyPem: string }>
  close(): Promise<void>
}

export interface StartOptions {
  readonly failMode?: TsaMode
  /** ESS cert id hash: "sha1" → signingCertificate, "sha256" → signingCertificateV2 (default). */
  readonly essCertIdAlg?: "sha1" | "sha256"
  /** Also embed the CA certificate in tokens (`ess_cert_id_chain`/`certs`). */
  readonly includeChain?: boolean
  readonly commonName?: string
  /** Key type of the CA and the TSA signer (default "ec", P-256). */
  readonly keyType?: "ec" | "rsa"
}

export const TEST_TSA_POLICY = "1.2.3.4.1"

const run = (cmd: string, args: ReadonlyArray<string>, cwd?: string): Promise<{ stdout: string; stderr: string; code: number }> =>
  new Promise((resolve) => {
    execFile(cmd, args, { cwd, encoding: "utf8", timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0
      resolve({ stdout, stderr, code })
    })
  })

const openssl = async (args: ReadonlyArray<string>, cwd?: string): Promise<string> => {
  const r = await run("openssl", args, cwd)
  if (r.code !== 0) throw new Error(`openssl ${args.join(" ")} failed (${r.code}): ${r.stderr}`)
  return r.stdout
}

const config = (dir: string, o: StartOptions): string => `
HOME = ${dir}
[ req ]
distinguished_name = req_dn
prompt = no
[ req_dn ]
CN = unused
[ v3_ca ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ v3_tsa ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = critical, timeStamping
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ v3_leaf_noncrit ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = timeStamping
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ tsa ]
default_tsa = tsa_config1
[ tsa_config1 ]
dir = ${dir}
serial = $dir/tsaserial
crypto_device = builtin
signer_cert = $dir/tsa.pem
${o.includeChain ? "certs = $dir/ca.pem" : ""}
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = ${TEST_TSA_POLICY}
other_policies = 1.2.3.4.5
digests = sha256, sha384, sha512
accuracy = secs:1, millisecs:500, microsecs:100
clock_precision_digits = 3
ordering = no
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = ${o.essCertIdAlg ?? "sha256"}
`

const readBody = (req: IncomingMessage): Promise<Buffer> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

/** Same request with a different hashedMessage (keeps the nonce). */
const rewriteDigest = (query: Uint8Array): Uint8Array => {
  const req = pkijs.TimeStampReq.fromBER(query)
  req.messageImprint = new pkijs.MessageImprint({
    hashAlgorithm: req.messageImprint.hashAlgorithm,
    hashedMessage: new asn1js.OctetString({ valueHex: new Uint8Array(randomBytes(32)) })
  })
  return new Uint8Array(req.toSchema().toBER())
}

export const startOpensslTsa = async (opts: StartOptions = {}): Promise<OpensslTsa> => {
  const dir = await mkdtemp(join(tmpdir(), "attestd-openssl-tsa-"))
  const cnf = join(dir, "openssl.cnf")
  await writeFile(cnf, config(dir, opts))
  await writeFile(join(dir, "tsaserial"), "01\n")
  const cn = opts.commonName ?? "attestd test"
  const ec =
    opts.keyType === "rsa"
      ? ["-newkey", "rsa:2048", "-nodes"]
      : ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]

  await openssl(["req", "-config", cnf, "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3650",
    "-subj", `/O=${cn}/CN=${cn} root CA`, "-extensions", "v3_ca", "-sha256"], dir)

  const issueLeaf = async (o: { name: string; ekuCritical: boolean; eku?: string }) => {
    const key = `${o.name}.key`
    const csr = `${o.name}.csr`
    const crt = `${o.name}.pem`
    await openssl(["req", "-config", cnf, "-new", ...ec, "-keyout", key, "-out", csr, "-subj", `/O=${cn}/CN=${cn} ${o.name}`], dir)
    let section = o.ekuCritical ? "v3_tsa" : "v3_leaf_noncrit"
    if (o.eku !== undefined) {
      section = `v3_custom_${o.name}`
      await writeFile(cnf, `${await readFile(cnf, "utf8")}\n[ ${section} ]\nbasicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = ${o.ekuCritical ? "critical, " : ""}${o.eku}\n`)
    }
    await openssl(["x509", "-req", "-in", csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial",
      `0x${randomBytes(8).toString("hex")}`, "-days", "3650", "-sha256", "-extfile", cnf, "-extensions", section, "-out", crt], dir)
    return {
      certFile: join(dir, crt),
      keyFile: join(dir, key),
      certPem: await readFile(join(dir, crt), "utf8"),
      keyPem: await readFile(join(dir, key), "utf8")
    }
  }
  // The TSA signer itself: files tsa.pem / tsa.key referenced by openssl.cnf.
  await issueLeaf({ name: "tsa", ekuCritical: true })

  let mode: TsaMode = opts.failMode ?? "ok"
  let requests = 0
  let queue: Promise<unknown> = Promise.resolve()
  let counter = 0

  const reply = (query: Uint8Array): Promise<Buffer> => {
    const job = queue.then(async () => {
      const n = ++counter
      const q = join(dir, `q${n}.tsq`)
      const r = join(dir, `r${n}.tsr`)
      await writeFile(q, query)
      try {
        await openssl(["ts", "-reply", "-config", cnf, "-section", "tsa_config1", "-queryfile", q, "-out", r])
        return await readFile(r)
      } finally {
        await rm(q, { force: true })
        await rm(r, { force: true })
      }
    })
    queue = job.catch(() => undefined)
    return job
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    requests++
    const body = await readBody(req)
    const m = mode
    if (m === "hang") return // never answer; close() destroys the socket
    if (m === "http500") {
      res.writeHead(500, { "content-type": "text/plain" }).end("internal error")
      return
    }
    if (m === "garbage") {
      res.writeHead(200, { "content-type": "application/timestamp-reply" }).end(randomBytes(200))
      return
    }
    try {
      const query = m === "wrongDigest" ? rewriteDigest(new Uint8Array(body)) : new Uint8Array(body)
      const out = await reply(query)
      res.writeHead(200, { "content-type": "application/timestamp-reply", "content-length": out.length }).end(out)
    } catch (e) {
      res.writeHead(500, { "content-type": "text/plain" }).end(String(e))
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) res.writeHead(500).end(String(e))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}/tsa`,
    dir,
    caPem: await readFile(join(dir, "ca.pem"), "utf8"),
    caFile: join(dir, "ca.pem"),
    caKeyFile: join(dir, "ca.key"),
    tsaCertFile: join(dir, "tsa.pem"),
    tsaKeyFile: join(dir, "tsa.key"),
    setMode: (m) => {
      mode = m
    },
    get requests() {
      return requests
    },
    issueLeaf,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await queue
      await rm(dir, { recursive: true, force: true })
    }
  }
}

/** `openssl ts -verify -digest <hex> -token_in -in <token> -CAfile <ca> [-untrusted <file>]`. */
export const opensslVerify = async (
  tokenDer: Uint8Array,
  digestHex: string,
  caFile: string,
  untrustedFile?: string
): Promise<{ ok: boolean; output: string }> => {
  const dir = await mkdtemp(join(tmpdir(), "attestd-tsverify-"))
  try {
    const tok = join(dir, "token.der")
    await writeFile(tok, tokenDer)
    const args = ["ts", "-verify", "-digest", digestHex, "-token_in", "-in", tok, "-CAfile", caFile]
    if (untrustedFile !== undefined) args.push("-untrusted", untrustedFile)
    const r = await run("openssl", args)
    const output = `${r.stdout}${r.stderr}`
    return { ok: r.code === 0 && /Verification: OK/.test(output), output }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}
