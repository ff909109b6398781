/**
 * Key custody (issue 45, CONTRACT §8) with real parts, as processes:
 * - keys that live only in a SoftHSM2 token: created in the token, non-extractable
 *   (pkcs11-tool), attest, seal and verify, RFC 3161 tokens checked by `openssl ts -verify`; no private key in the data dir or a backup;
 *   the token taken away under load gives 503s (never a 500, never an unsigned
 *   attestation) and the service recovers when it is back; a bundle held to a key
 *   window it falls outside fails `attestd verify`;
 * - rotation in the middle of load on two instances sharing a Postgres database and a
 *   token: both switch without a restart and every old and new attestation verifies;
 * - encrypted key files: a group-readable key file stops the start, `signing-keys
 *   encrypt` converts plain files, the service starts with the passphrase, a backup
 *   holds only encrypted keys.
 */
import { execFileSync } from "node:child_process"
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { verifyBundle } from "../../src/Verify/Verifier.js"
import { createPgDatabase, createSqliteDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { type OpensslTsa, startOpensslTsa } from "../helpers/opensslTsa.js"
import {
  createKeyCli,
  freePort,
  randomHex32,
  requireDist,
  runCli,
  type ServeEnv,
  type ServeProcess,
  sleep,
  startServe,
  waitFor,
  withDb
} from "../helpers/process.js"
import { makeSoftToken, type SoftToken, softhsmAvailable } from "../helpers/softhsm.js"

const hasSoftHsm = softhsmAvailable()
const hasPg = (await dialects()).includes("pg")

/** Every file under `dir` (recursively) whose bytes contain a PEM private key, encrypted or not. */
const filesWithPrivateKeys = (dir: string): Array<string> => {
  const out: Array<string> = []
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.isFile() && /PRIVATE KEY-----/.test(readFileSync(p, "latin1"))) out.push(p)
    }
  }
  walk(dir)
  return out
}

const jsonLine = (stdout: string): any => JSON.parse(stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()!)

const attest = async (url: string, key: string): Promise<{ status: number; body: any }> => {
  const res = await fetch(`${url}/v1/attest`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ hash_hex: randomHex32() }),
    signal: AbortSignal.timeout(10_000)
  })
  return { status: res.status, body: await res.json().catch(() => null) }
}

/** Attests with `concurrency` loops over `urls` until `stop()`; every status is recorded. */
const load = async (urls: ReadonlyArray<string>, key: string, stop: () => boolean, statuses: Array<number>, concurrency = 3) => {
  let turn = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (!stop()) {
      // a refused connection is a status 0, and fails the test's status check
      statuses.push(await attest(urls[turn++ % urls.length]!, key).then((r) => r.status, () => 0))
      await sleep(5)
    }
  }))
}

/** A temporary directory for files beside a data dir (bundles, keys, backups, a passphrase), removed by `cleanup`. */
const scratch = (cleanup: Array<() => void>): string => {
  const dir = mkdtempSync(join(tmpdir(), "attestd-custody-"))
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const getJson = async (url: string): Promise<any> => (await fetch(url)).json()

interface StoredT0 {
  readonly hash_hex: string
  readonly registered_at: string
  readonly signature: string
  readonly signing_key_id: string
  readonly format_version: string
}

/** Every stored attestation as a T0 bundle, checked by the verifier against the published keys (windows included). */
const verifyAllStored = async (databaseUrl: string, keys: ReadonlyArray<unknown>) => {
  const rows = await withDb(databaseUrl, (q) =>
    q("SELECT hash_hex, registered_at, signature, signing_key_id, format_version FROM attestations")) as unknown as Array<StoredT0>
  const failed: Array<string> = []
  for (const r of rows) {
    const report = await verifyBundle({
      hash_hex: r.hash_hex,
      t0: { signature: r.signature, algorithm: "ECDSA-P256-SHA256", publicKeyId: r.signing_key_id, registeredAt: r.registered_at, formatVersion: r.format_version }
    }, { keys: keys as never })
    if (report.checks.t0.status !== "ok") failed.push(`${r.hash_hex}: ${report.checks.t0.detail}`)
  }
  return { rows, failed }
}

describe.skipIf(!hasSoftHsm)("signing keys in a PKCS#11 token (SoftHSM2)", () => {
  const cleanup: Array<() => Promise<void> | void> = []
  afterAll(async () => {
    for (const f of cleanup.reverse()) await f()
  })

  it("keys only in the token: attest, seal, verify; no private key on disk or in a backup; the token gone gives 503s, then recovery", async () => {
    requireDist()
    const token: SoftToken = makeSoftToken()
    cleanup.push(token.cleanup)
    const db: TestDatabase = await createSqliteDatabase()
    cleanup.push(db.drop)
    const tsa: OpensslTsa = await startOpensslTsa()
    cleanup.push(() => tsa.close())
    const env: ServeEnv = {
      databaseUrl: db.url,
      dataDir: db.dataDir,
      port: await freePort(),
      // an external TSA: the embedded demo TSA would keep its own key in the data dir
      extra: { ...token.env, ATTESTD_TSA_URL: tsa.url, ATTESTD_TSA_CA_FILE: tsa.caFile }
    }

    const created = await runCli(env, ["signing-keys", "create", "--pkcs11"])
    expect(created.code, created.stderr).toBe(0)
    const { kid, activated_at } = jsonLine(created.stdout)
    const objects = token.listObjects()
    expect(objects).toContain(`attestd-t0-${kid}`)
    expect(objects).toContain(Buffer.from(kid, "utf8").toString("hex"))
    expect(objects).toMatch(/Private Key Object; EC[\s\S]*Access:\s+sensitive, always sensitive, never extractable, local/)

    const key = await createKeyCli(env)
    const server: ServeProcess = await startServe(env)
    cleanup.push(() => server.kill("SIGKILL").then(() => undefined))
    expect((await getJson(`${server.url}/v1/info`)).current_signing_key_id).toBe(kid)
    expect((await getJson(`${server.url}/v1/keys/${kid}`)).attestd_activated_at).toBe(activated_at)

    const first = await attest(server.url, key)
    expect(first.status).toBe(201)
    expect(first.body.signing_key_id).toBe(kid)
    await waitFor("T1", async () => (await getJson(`${server.url}/v1/attestation/${first.body.id}/evidence`)).level === "T1" || undefined)
    const side = scratch(cleanup)
    const bundleFile = join(side, "bundle.json")
    const bundle = await getJson(`${server.url}/v1/attestation/${first.body.id}/evidence`)
    writeFileSync(bundleFile, JSON.stringify(bundle))
    const verified = await runCli(env, ["verify", bundleFile, "--server", server.url])
    expect(verified.code, verified.stdout + verified.stderr).toBe(0)

    // The time-stamping authority's key is in the token too; its tokens verify with openssl ts.
    expect(token.listObjects()).toMatch(/label:\s+attestd-tsa-/)
    writeFileSync(join(side, "data.txt"), "time-stamped by a key in a token\n")
    execFileSync("openssl", ["ts", "-query", "-data", "data.txt", "-sha256", "-cert", "-out", "q.tsq"], { cwd: side })
    const reply = await fetch(`${server.url}/v1/timestamp`, {
      method: "POST",
      headers: { "content-type": "application/timestamp-query" },
      body: readFileSync(join(side, "q.tsq"))
    })
    expect(reply.status).toBe(200)
    writeFileSync(join(side, "r.tsr"), Buffer.from(await reply.arrayBuffer()))
    const tsaDir = join(db.dataDir, "tsa")
    execFileSync("openssl", ["ts", "-verify", "-in", "r.tsr", "-queryfile", "q.tsq", "-CAfile", join(tsaDir, "root.pem"), "-untrusted", join(tsaDir, "tsa.pem")], { cwd: side, stdio: "pipe" })

    // A key window that excludes registeredAt fails T0 in the CLI.
    const keys = (await getJson(`${server.url}/v1/keys`)).keys
    const shifted = keys.map((k: any) => k.kid === kid ? { ...k, attestd_activated_at: "2999-01-01T00:00:00.000000+00:00" } : k)
    const keysFile = join(side, "keys.json")
    writeFileSync(keysFile, JSON.stringify({ keys: shifted }))
    const outside = await runCli(env, ["verify", bundleFile, "--keys", keysFile])
    expect(outside.code, outside.stdout).toBe(1)
    expect(outside.stdout).toMatch(/validity window/)

    // No private key in the data dir or in a backup.
    const backupDir = join(side, "backup")
    const backedUp = await runCli(env, ["backup", "--to", backupDir])
    expect(backedUp.code, backedUp.stderr).toBe(0)
    expect(jsonLine(backedUp.stdout).key_custody).toBe("pkcs11")
    expect(filesWithPrivateKeys(db.dataDir)).toEqual([])
    expect(filesWithPrivateKeys(backupDir)).toEqual([])

    // The token taken away under load: 503s and an unhealthy signer; back: recovery.
    const statuses: Array<number> = []
    let stopped = false
    const running = load([server.url], key, () => stopped, statuses)
    await waitFor("attests under load", () => statuses.filter((s) => s === 201).length >= 5 || undefined)
    token.remove()
    const health = await waitFor("signer unhealthy", async () => {
      const res = await fetch(`${server.url}/v1/healthz`)
      const body = (await res.json()) as any
      return res.status === 503 && body.checks.signer === "unhealthy" ? body : undefined
    })
    expect(health.checks.database).toBe("ok")
    const gone = statuses.length
    await waitFor("503s while the token is gone", () => statuses.slice(gone).filter((s) => s === 503).length >= 5 || undefined)
    token.restore()
    await waitFor("healthy again", async () => (await fetch(`${server.url}/v1/healthz`)).status === 200 || undefined)
    const back = statuses.length
    await waitFor("201s after recovery", () => statuses.slice(back).filter((s) => s === 201).length >= 5 || undefined)
    stopped = true
    await running
    expect(new Set(statuses)).toEqual(new Set([201, 503]))

    // Every stored attestation is signed, by the token's key, and verifies.
    const { rows, failed } = await verifyAllStored(db.url, (await getJson(`${server.url}/v1/keys`)).keys)
    expect(rows.length).toBeGreaterThan(10)
    expect(failed).toEqual([])
    expect(new Set(rows.map((r) => r.signing_key_id))).toEqual(new Set([kid]))
  }, 180_000)

  it.skipIf(!hasPg)("rotation in the middle of load on two instances (Postgres, one token): both switch, every attestation verifies", async () => {
    requireDist()
    const token = makeSoftToken()
    cleanup.push(token.cleanup)
    const db = await createPgDatabase()
    cleanup.push(db.drop)
    const envs: Array<ServeEnv> = []
    for (const i of [0, 1]) {
      const dataDir = join(db.dataDir, `instance-${i}`)
      mkdirSync(dataDir, { recursive: true })
      envs.push({ databaseUrl: db.url, dataDir, port: await freePort(), extra: token.env })
    }
    const first = await startServe(envs[0]!)
    cleanup.push(() => first.kill("SIGKILL").then(() => undefined))
    const second = await startServe(envs[1]!)
    cleanup.push(() => second.kill("SIGKILL").then(() => undefined))
    const urls = [first.url, second.url]
    const oldKid = (await getJson(`${first.url}/v1/info`)).current_signing_key_id
    expect((await getJson(`${second.url}/v1/info`)).current_signing_key_id).toBe(oldKid)
    const key = await createKeyCli(envs[0]!)

    const statuses: Array<number> = []
    let stopped = false
    const running = load(urls, key, () => stopped, statuses, 4)
    await waitFor("attests before the rotation", () => statuses.length >= 20 || undefined)
    const rotated = await runCli(envs[1]!, ["signing-keys", "rotate"])
    expect(rotated.code, rotated.stderr).toBe(0)
    const { kid: newKid, activated_at } = jsonLine(rotated.stdout)
    expect(activated_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/)
    expect(token.listObjects()).toContain(`attestd-t0-${newKid}`)
    for (const url of urls) {
      await waitFor(`${url} signs with the new key`, async () => (await getJson(`${url}/v1/info`)).current_signing_key_id === newKid || undefined, 10_000)
    }
    const switched = statuses.length
    await waitFor("attests after the switch", () => statuses.length >= switched + 20 || undefined)
    stopped = true
    await running
    expect(new Set(statuses)).toEqual(new Set([201]))

    const keys = (await getJson(`${first.url}/v1/keys`)).keys
    const old = keys.find((k: any) => k.kid === oldKid)
    expect(old.attestd_retired_at > activated_at).toBe(true)
    expect(keys.find((k: any) => k.kid === newKid).attestd_retired_at).toBeUndefined()
    const { rows, failed } = await verifyAllStored(db.url, keys)
    expect(failed).toEqual([])
    const byKid = new Set(rows.map((r) => r.signing_key_id))
    expect(byKid).toEqual(new Set([oldKid, newKid]))
  }, 180_000)
})

describe("encrypted key files", () => {
  const cleanup: Array<() => Promise<void> | void> = []
  afterAll(async () => {
    for (const f of cleanup.reverse()) await f()
  })

  it("a group-readable key file stops the start; signing-keys encrypt converts it; the service starts with the passphrase; a backup holds it encrypted", async () => {
    requireDist()
    const db = await createSqliteDatabase()
    cleanup.push(db.drop)
    const plain: ServeEnv = { databaseUrl: db.url, dataDir: db.dataDir, port: await freePort() }
    const side = scratch(cleanup)
    const passphraseFile = join(side, "passphrase")
    writeFileSync(passphraseFile, "correct horse battery staple\n", { mode: 0o600 })
    const encrypted: ServeEnv = { ...plain, extra: { ATTESTD_KEY_PASSPHRASE_FILE: passphraseFile } }

    const created = await runCli(plain, ["signing-keys", "create"])
    expect(created.code, created.stderr).toBe(0)
    const { kid } = jsonLine(created.stdout)
    const keyDir = join(db.dataDir, "signing-keys")
    const [file] = readdirSync(keyDir)
    const path = join(keyDir, file!)
    expect(readFileSync(path, "utf8")).toContain("-----BEGIN PRIVATE KEY-----")

    chmodSync(path, 0o640)
    const refused = await runCli(plain, ["serve"])
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toContain(path)
    expect(refused.stderr).toMatch(/open to group or others/)
    chmodSync(path, 0o600)

    const unconverted = await runCli(encrypted, ["serve"])
    expect(unconverted.code).not.toBe(0)
    expect(unconverted.stderr).toMatch(/signing-keys encrypt/)

    const converted = await runCli(encrypted, ["signing-keys", "encrypt"])
    expect(converted.code, converted.stderr).toBe(0)
    expect(jsonLine(converted.stdout).encrypted).toEqual([path])
    expect(readFileSync(path, "utf8")).toMatch(/^-----BEGIN ENCRYPTED PRIVATE KEY-----/)
    expect((statSync(path).mode & 0o777).toString(8)).toBe("600")

    const server = await startServe(encrypted)
    cleanup.push(() => server.kill("SIGKILL").then(() => undefined))
    expect((await getJson(`${server.url}/v1/info`)).current_signing_key_id).toBe(kid)
    const key = await createKeyCli(encrypted)
    const a = await attest(server.url, key)
    expect(a.status).toBe(201)
    expect(a.body.signing_key_id).toBe(kid)

    const backupDir = join(side, "backup")
    const backedUp = await runCli(encrypted, ["backup", "--to", backupDir])
    expect(backedUp.code, backedUp.stderr).toBe(0)
    const manifest = jsonLine(backedUp.stdout)
    expect(manifest.key_custody).toBe("encrypted-files")
    expect(manifest.files).toContain(join("signing-keys", file!))
    for (const f of filesWithPrivateKeys(backupDir)) expect(readFileSync(f, "latin1"), f).not.toMatch(/BEGIN (?!ENCRYPTED )[A-Z ]*PRIVATE KEY/)
  })
})
