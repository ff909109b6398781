/**
 * `attestd backup` while the service attests, `attestd restore` into a new data
 * dir (issue 14 §4): every attestation acknowledged before the backup started is
 * in the restored store under its id, and its evidence bundle verifies offline
 * against the restored signing keys. Restore refuses a non-empty data dir;
 * `attestd healthcheck` exits 0 on a healthy server and 1 when nothing listens.
 * backup, restore, healthcheck and keys create run once each as processes; the
 * other commands in-process (test/helpers/cli.ts).
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { cliInProcessFor } from "../helpers/cli.js"
import { attestLoad, BIN, createKeyCli, envOf, freePort, newAckLog, requireDist, runCli, type ServeEnv, startServe } from "../helpers/process.js"

describe("backup and restore (sqlite)", () => {
  const dirs: Array<string> = []
  const cleanup: Array<() => Promise<unknown>> = []
  const tmp = () => {
    const d = mkdtempSync(join(tmpdir(), "attestd-backup-"))
    dirs.push(d)
    return d
  }
  afterAll(async () => {
    for (const f of cleanup.reverse()) await f().catch(() => undefined)
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  it("backs up online, restores into an empty dir, keeps every acknowledged attestation verifiable", async () => {
    requireDist()
    const dataDir = tmp()
    const env: ServeEnv = { databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: await freePort(), sealInterval: "300ms" }
    const key = await createKeyCli(env)
    const server = await startServe(env)
    cleanup.push(() => server.kill("SIGKILL"))
    expect((await runCli(env, ["healthcheck"])).code).toBe(0)

    const log = newAckLog()
    let stop = false
    const load = attestLoad({ urls: () => [server.url], key, stop: () => stop, log, concurrency: 3, batchSize: 20 })
    while (log.acked.size < 300) await new Promise((r) => setTimeout(r, 50))
    const before = new Map(log.acked)
    const target = join(tmp(), "backup")
    const backup = await runCli(env, ["backup", "--to", target])
    const during = log.acked.size
    stop = true
    await load
    expect(backup.code, backup.stderr).toBe(0)
    expect(during).toBeGreaterThan(before.size) // attesting went on while the backup ran
    expect(readdirSync(target).sort()).toEqual(expect.arrayContaining(["attestd.db", "demo-tsa", "manifest.json", "signing-keys"]))
    await server.kill("SIGTERM")

    // Restore refuses a non-empty data dir and changes nothing there.
    const busy = tmp()
    writeFileSync(join(busy, "something"), "x")
    const refused = await cliInProcessFor({ ...env, dataDir: busy, databaseUrl: `sqlite:${join(busy, "attestd.db")}` }, ["restore", "--from", target])
    expect(refused.code).toBe(1)
    expect(readdirSync(busy)).toEqual(["something"])

    const restoredDir = tmp() // empty
    const restoredEnv: ServeEnv = { databaseUrl: `sqlite:${join(restoredDir, "attestd.db")}`, dataDir: restoredDir, port: await freePort(), sealInterval: "300ms" }
    const restored = await runCli(restoredEnv, ["restore", "--from", target])
    expect(restored.code, restored.stderr).toBe(0)
    const again = await startServe(restoredEnv)
    cleanup.push(() => again.kill("SIGKILL"))

    const hashes = [...before.keys()]
    for (let i = 0; i < hashes.length; i += 100) {
      const res = await fetch(`${again.url}/v1/verify/batch`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ hashes: hashes.slice(i, i + 100) })
      })
      expect(res.status).toBe(200)
      const body = (await res.json()) as { results: Array<{ hash_hex: string; exists: boolean; id?: string }> }
      for (const r of body.results) expect({ hash: r.hash_hex, exists: r.exists, id: r.id }).toEqual({ hash: r.hash_hex, exists: true, id: before.get(r.hash_hex) })
    }

    // Evidence from the restored service verifies against the keys and TSA anchors the restored
    // instance publishes (--server): the restore brought back the original signing keys.
    const admin = await cliInProcessFor(restoredEnv, ["keys", "create", "--label", "admin"])
    const adminKey = (JSON.parse(admin.stdout.trim().split("\n").pop()!) as { key: string }).key
    for (const hash of [hashes[0]!, hashes[Math.floor(hashes.length / 2)]!, hashes.at(-1)!]) {
      const res = await fetch(`${again.url}/v1/attestation/${before.get(hash)}/evidence`, { headers: { authorization: `Bearer ${adminKey}` } })
      expect(res.status).toBe(200)
      const file = join(restoredDir, `${hash}.json`)
      writeFileSync(file, await res.text())
      const verified = await cliInProcessFor(restoredEnv, ["verify", file, "--hash", hash, "--server", again.url])
      expect(verified.code, verified.stdout + verified.stderr).toBe(0)
      expect(JSON.parse(verified.stdout)).toMatchObject({ verdict: "verified" })
    }
    const manifest = JSON.parse(readFileSync(join(target, "manifest.json"), "utf8")) as { store: string; files: Array<string> }
    expect(manifest.store).toBe("sqlite")
    expect(manifest.files.some((f) => f.startsWith("signing-keys/"))).toBe(true)

    await again.kill("SIGTERM")
    const down = await cliInProcessFor(restoredEnv, ["healthcheck", "--url", again.url])
    expect(down.code).toBe(1)
  }, 240_000)

  it("restore refuses a manifest that is not JSON, of another format or of the wrong shape, with a clear message, and writes nothing", async () => {
    const cases: Array<readonly [string, RegExp]> = [
      ["{ not json", /manifest\.json is not JSON/],
      [JSON.stringify({ format: "attestd-backup/0", files: [] }), /unknown backup format attestd-backup\/0/],
      [JSON.stringify({ format: "attestd-backup/1", version: "1", created_at: "x", store: "sqlite", database_file: null, files: "signing-keys" }), /not an attestd backup manifest[\s\S]*files/],
      [JSON.stringify({ format: "attestd-backup/1", version: "1", created_at: "x", store: "mysql", database_file: null, files: [] }), /not an attestd backup manifest[\s\S]*store/]
    ]
    for (const [text, message] of cases) {
      const from = tmp()
      writeFileSync(join(from, "manifest.json"), text)
      const dataDir = tmp()
      const run = await cliInProcessFor({ databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: 0 }, ["restore", "--from", from])
      expect({ code: run.code, message: message.test(run.stderr) }, run.stderr).toEqual({ code: 1, message: true })
      expect(readdirSync(dataDir)).toEqual([])
    }
  })

  it("a target that cannot be made fails at once with a clear message (no spin): /proc/nope, a file's child", async () => {
    requireDist()
    const dataDir = tmp()
    const env: ServeEnv = { databaseUrl: `sqlite:${join(dataDir, "attestd.db")}`, dataDir, port: await freePort() }
    await createKeyCli(env) // a database and a key to back up
    const file = join(tmp(), "a-file")
    writeFileSync(file, "x")
    for (const [to, why] of [["/proc/nope", /\/proc\/nope.*ENOENT.*is \/proc a writable directory/], [join(file, "backup"), /is not a directory/]] as const) {
      const started = Date.now()
      // Node 20's recursive mkdirSync spins forever on /proc/nope: a hang is killed here, not waited for
      const r = await new Promise<{ code: number | null; signal: string | null; stderr: string }>((resolve) => {
        execFile(process.execPath, [BIN, "backup", "--to", to], { env: envOf(env), cwd: dataDir, encoding: "utf8", timeout: 20_000, killSignal: "SIGKILL" }, (err, _stdout, stderr) =>
          resolve({ code: err ? (typeof err.code === "number" ? err.code : null) : 0, signal: err?.signal ?? null, stderr }))
      })
      expect(r.signal, `${to}: killed after ${Date.now() - started} ms`).toBeNull()
      expect(r.code, r.stderr).not.toBe(0)
      expect(r.stderr).toMatch(why)
    }
  }, 90_000)
})
