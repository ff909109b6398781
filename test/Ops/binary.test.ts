/**
 * The single executable (issue 14 §2): `npm run build:binary` makes dist/attestd,
 * which, copied alone into an empty directory (no node_modules anywhere above
 * it), creates a key, serves on SQLite (healthz 200), attests, and verifies the
 * evidence bundle offline with its own `verify` command. Its native library is
 * loaded only from the user's own directory and only with the SHA-256 recorded
 * at build time (issue 42): a planted file or a world-writable directory is
 * refused, with a non-zero exit. It signs through a PKCS#11 token as well: pkcs11js's
 * addon is embedded and checked the same way, and its signing threads load that file.
 */
import { execFile, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { freePort, randomHex32, REPO_ROOT, sleep } from "../helpers/process.js"
import { makeSoftToken, softhsmAvailable } from "../helpers/softhsm.js"

const runOnce = (file: string, args: ReadonlyArray<string>, options: { cwd: string; env: NodeJS.ProcessEnv }) =>
  new Promise<{ code: number | string; stdout: string; stderr: string }>((resolve) => {
    try {
      execFile(file, args, { ...options, encoding: "utf8", timeout: 300_000, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === "number" ? err.code : (err.code ?? 1)) : 0, stdout, stderr })
      })
    } catch (e) {
      // node throws, rather than reports, a spawn that fails with ETXTBSY
      resolve({ code: (e as NodeJS.ErrnoException).code ?? 1, stdout: "", stderr: String(e) })
    }
  })

/**
 * Runs a file, again while the kernel says ETXTBSY: a child that another test forked while the
 * executable was being copied holds the copy's write descriptor until it execs.
 */
const run = async (file: string, args: ReadonlyArray<string>, options: { cwd: string; env: NodeJS.ProcessEnv }) => {
  for (let tries = 1; ; tries++) {
    const result = await runOnce(file, args, options)
    if (result.code !== "ETXTBSY" || tries === 20) return { ...result, code: typeof result.code === "number" ? result.code : 1 }
    await sleep(100)
  }
}

describe("single executable", () => {
  const cleanup: Array<() => void> = []
  afterAll(() => {
    for (const f of cleanup.reverse()) f()
  })

  /** `exe serve` in `dir` on env.HOST:env.PORT, killed at the end; resolves once healthz answers 200. */
  const serve = async (exe: string, dir: string, env: NodeJS.ProcessEnv) => {
    const server = spawn(exe, ["serve"], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    server.stdout.on("data", (c: Buffer) => (output += c.toString()))
    server.stderr.on("data", (c: Buffer) => (output += c.toString()))
    const exited = new Promise<number | null>((r) => server.once("exit", (code) => r(code)))
    cleanup.push(() => server.kill("SIGKILL"))
    const url = `http://127.0.0.1:${env.PORT}`
    let health = 0
    for (let i = 0; i < 300 && health !== 200; i++) {
      health = await fetch(`${url}/v1/healthz`).then((r) => r.status, () => 0)
      if (health !== 200) await sleep(100)
    }
    expect(health, output).toBe(200)
    return { server, url, output: () => output, exited }
  }

  it("builds, then runs alone in an empty directory: keys, serve, attest, verify", async () => {
    const built = await run(process.execPath, [join(REPO_ROOT, "scripts", "build-binary.mjs")], { cwd: REPO_ROOT, env: process.env })
    expect(built.code, built.stdout + built.stderr).toBe(0)

    const dir = mkdtempSync(join(tmpdir(), "attestd-exe-"))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const exe = join(dir, "attestd")
    copyFileSync(join(REPO_ROOT, "dist", "attestd"), exe)
    const env: NodeJS.ProcessEnv = { PATH: "/usr/bin:/bin", HOME: dir, TMPDIR: dir, ATTESTD_DATA_DIR: join(dir, "data"), PORT: String(await freePort()), HOST: "127.0.0.1", ATTESTD_SEAL_INTERVAL: "1s" }

    const created = await run(exe, ["keys", "create", "--label", "exe"], { cwd: dir, env })
    expect(created.code, created.stderr).toBe(0)
    const key = (JSON.parse(created.stdout.trim().split("\n").pop()!) as { key: string }).key

    const { server, url, output, exited } = await serve(exe, dir, env)

    const attest = (hash_hex: string) =>
      fetch(`${url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex })
      })
    const hash = randomHex32()
    const attested = await attest(hash)
    expect(attested.status).toBe(201)
    const { id } = (await attested.json()) as { id: string }
    const evidence = await fetch(`${url}/v1/attestation/${id}/evidence`, { headers: { authorization: `Bearer ${key}` } })
    expect(evidence.status).toBe(200)
    writeFileSync(join(dir, "bundle.json"), await evidence.text())
    // without trust inputs the math holds against nothing trusted: partial, exit 3
    const untrusted = await run(exe, ["verify", "bundle.json", "--hash", hash], { cwd: dir, env })
    expect(untrusted.code, untrusted.stdout + untrusted.stderr).toBe(3)
    expect(JSON.parse(untrusted.stdout)).toMatchObject({ verdict: "partial", id, hash_hex: hash })
    // with the instance's published keys, offline: verified, exit 0
    writeFileSync(join(dir, "keys.json"), await fetch(`${url}/v1/keys`).then((r) => r.text()))
    const verified = await run(exe, ["verify", "bundle.json", "--hash", hash, "--keys", "keys.json"], { cwd: dir, env })
    expect(verified.code, verified.stdout + verified.stderr).toBe(0)
    expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true, verdict: "verified", id, hash_hex: hash })

    // concurrent attests, signed together in group commits: the last of them verifies offline as the first did
    const later = await Promise.all(Array.from({ length: 20 }, async () => {
      const h = randomHex32()
      const res = await attest(h)
      expect(res.status).toBe(201)
      return { h, id: ((await res.json()) as { id: string }).id }
    }))
    const last = later[later.length - 1]!
    writeFileSync(join(dir, "later.json"), await fetch(`${url}/v1/attestation/${last.id}/evidence`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.text()))
    const laterVerified = await run(exe, ["verify", "later.json", "--hash", last.h, "--keys", "keys.json"], { cwd: dir, env })
    expect(laterVerified.code, laterVerified.stdout + laterVerified.stderr).toBe(0)

    server.kill("SIGTERM")
    expect(await exited).toBe(0)
    expect(output()).not.toContain("only supports loading built-in modules")
  }, 300_000)

  it("refuses a planted native library and a world-writable directory (exit non-zero, nothing loaded)", async () => {
    const require = createRequire(import.meta.url)
    const addon = join(dirname(require.resolve("better-sqlite3/package.json")), "build", "Release", "better_sqlite3.node")
    const prefix = createHash("sha256").update(readFileSync(addon)).digest("hex").slice(0, 16)
    const uid = process.getuid?.() ?? 0
    const attempt = async (prepare: (tmp: string) => void) => {
      const dir = mkdtempSync(join(tmpdir(), "attestd-exe-planted-"))
      cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
      const exe = join(dir, "attestd")
      copyFileSync(join(REPO_ROOT, "dist", "attestd"), exe)
      prepare(dir)
      const env: NodeJS.ProcessEnv = { PATH: "/usr/bin:/bin", HOME: dir, TMPDIR: dir, ATTESTD_DATA_DIR: join(dir, "data") }
      return run(exe, ["keys", "create", "--label", "planted"], { cwd: dir, env })
    }
    // where another local user could put a file: the directory this version uses and the one before it
    const plant = (dir: string) => {
      mkdirSync(dir, { mode: 0o700 })
      chmodSync(dir, 0o700)
      writeFileSync(join(dir, `better_sqlite3-${prefix}.node`), "not the library this executable was built with", { mode: 0o755 })
    }
    const planted = await attempt((tmp) => {
      plant(join(tmp, `attestd-native-${uid}`))
      plant(join(tmp, "attestd-native"))
    })
    expect(planted.code, planted.stdout + planted.stderr).not.toBe(0)
    expect(planted.stdout + planted.stderr).toMatch(/refusing to load the native library: .*has SHA-256 [0-9a-f]{64}, not the/)

    const open = await attempt((tmp) => {
      mkdirSync(join(tmp, `attestd-native-${uid}`))
      chmodSync(join(tmp, `attestd-native-${uid}`), 0o777)
    })
    expect(open.code, open.stdout + open.stderr).not.toBe(0)
    expect(open.stdout + open.stderr).toMatch(/refusing to load the native library: .*has mode 0777, not 0700/)
  }, 120_000)

  it.skipIf(!softhsmAvailable())("generates a key in a PKCS#11 token through its embedded, checked pkcs11js addon, and signs with it in threads", async () => {
    const require = createRequire(import.meta.url)
    const addon = join(dirname(require.resolve("pkcs11js/package.json")), "build", "Release", "pkcs11.node")
    const prefix = createHash("sha256").update(readFileSync(addon)).digest("hex").slice(0, 16)
    const token = makeSoftToken("attestd-exe")
    cleanup.push(token.cleanup)
    const dir = mkdtempSync(join(tmpdir(), "attestd-exe-pkcs11-"))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const exe = join(dir, "attestd")
    copyFileSync(join(REPO_ROOT, "dist", "attestd"), exe)
    const env: NodeJS.ProcessEnv = { PATH: "/usr/bin:/bin", HOME: dir, TMPDIR: dir, ATTESTD_DATA_DIR: join(dir, "data"), ...token.env }
    const created = await run(exe, ["signing-keys", "create"], { cwd: dir, env })
    expect(created.code, created.stdout + created.stderr).toBe(0)
    const { kid } = JSON.parse(created.stdout.trim().split("\n").pop()!) as { kid: string }
    expect(token.listObjects()).toContain(`attestd-t0-${kid}`)
    expect(readFileSync(join(dir, `attestd-native-${process.getuid?.() ?? 0}`, `pkcs11-${prefix}.node`)).equals(readFileSync(addon))).toBe(true)

    // signatures are made in worker threads, which load the same checked addon file
    const keyed = await run(exe, ["keys", "create", "--label", "exe-pkcs11"], { cwd: dir, env })
    expect(keyed.code, keyed.stderr).toBe(0)
    const apiKey = (JSON.parse(keyed.stdout.trim().split("\n").pop()!) as { key: string }).key
    const serving = { ...env, PORT: String(await freePort()), HOST: "127.0.0.1" }
    const { server, url, output, exited } = await serve(exe, dir, serving)
    const attested = await Promise.all(Array.from({ length: 20 }, () =>
      fetch(`${url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ hash_hex: randomHex32() })
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as { signing_key_id?: string } }))))
    expect(attested.map((a) => a.status), output()).toEqual(attested.map(() => 201))
    expect(new Set(attested.map((a) => a.body.signing_key_id))).toEqual(new Set([kid]))
    server.kill("SIGTERM")
    expect(await exited, output()).toBe(0)
  }, 120_000)
})
