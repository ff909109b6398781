/**
 * The `attestd` command line over a temporary data directory: keys, signing keys,
 * migrate, and `serve` as a real process. Each command runs once as a child process of
 * the built CLI (`node dist/cli.mjs …`, the package's bin and what `npm start` runs; the
 * smoke test: `npm test` builds dist/), every
 * other call in-process (test/helpers/cli.ts, the same Command tree).
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPgDatabase, postgresAvailable, type TestDatabase } from "../helpers/databases.js"
import { cliInProcess } from "../helpers/cli.js"
import { client, expectEnvelope, freePort, randomHash } from "../helpers/server.js"

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..")
const BIN = join(ROOT, "dist", "cli.mjs")
const HAVE_DIST = existsSync(BIN)

interface SqliteDb {
  prepare(source: string): { all(...params: Array<unknown>): Array<Record<string, unknown>> }
  close(): void
}
const Database = createRequire(import.meta.url)("better-sqlite3") as new (
  filename: string,
  options?: { readonly readonly?: boolean; readonly fileMustExist?: boolean }
) => SqliteDb

interface RunResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `node dist/cli.mjs ARGS…` as a child process. */
const cliProcess = (args: ReadonlyArray<string>, env: Record<string, string>): Promise<RunResult> =>
  new Promise((resolveRun) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: env.ATTESTD_DATA_DIR ?? ROOT, env: { ...process.env, ...env, NODE_OPTIONS: "" }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof (error as any).code === "number" ? (error as any).code : 1) : 0
        resolveRun({ code, stdout: String(stdout), stderr: String(stderr) })
      }
    )
  })

/** The same command in-process. */
const cli = (args: ReadonlyArray<string>, env: Record<string, string>): Promise<RunResult> => cliInProcess(args, env)

/** The single JSON object a command prints on stdout. */
const jsonOut = (r: RunResult): any => {
  const lines = r.stdout.split("\n").filter((l) => l.trim().length > 0)
  expect(lines, `stdout: ${r.stdout}\nstderr: ${r.stderr}`).toHaveLength(1)
  return JSON.parse(lines[0]!)
}

const waitForHealth = async (url: string, child: ChildProcess, output: () => string): Promise<void> => {
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`serve exited with ${child.exitCode}:\n${output()}`)
    try {
      const r = await fetch(`${url}/v1/healthz`)
      if (r.status === 200) return
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`serve did not become healthy:\n${output()}`)
}

describe.skipIf(!HAVE_DIST)("attestd CLI (sqlite)", () => {
  let dataDir: string
  let env: Record<string, string>
  let serveProcess: ChildProcess | undefined
  let serveOutput = ""
  let url = ""

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "attestd-cli-"))
    env = { ATTESTD_DATA_DIR: dataDir, DATABASE_URL: `sqlite:${join(dataDir, "attestd.db")}` }
  })
  afterAll(async () => {
    if (serveProcess && serveProcess.exitCode === null) {
      const exited = new Promise((r) => serveProcess!.once("exit", r))
      serveProcess.kill("SIGTERM")
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))])
      if (serveProcess.exitCode === null) serveProcess.kill("SIGKILL")
    }
    rmSync(dataDir, { recursive: true, force: true })
  })

  it("migrate applies the migrations once", async () => {
    const first = await cliProcess(["migrate"], env)
    expect(first.code, first.stderr).toBe(0)
    const out = jsonOut(first)
    expect(Array.isArray(out.applied)).toBe(true)
    expect(out.applied.length).toBeGreaterThanOrEqual(1)
    expect(out.applied.some((m: string) => /foundation/.test(m))).toBe(true)
    const second = await cli(["migrate"], env)
    expect(second.code, second.stderr).toBe(0)
    expect(jsonOut(second).applied).toEqual([])
  })

  let created: any

  it("keys create prints one JSON object with the key shown once; only its SHA-256 is stored", async () => {
    const r = await cliProcess(
      [
        "keys",
        "create",
        "--label",
        "L",
        "--scopes",
        "attest,batch",
        "--org",
        "O",
        "--env",
        "test",
        "--allow-ip",
        "127.0.0.1/32",
        "--rate-limit",
        "10",
        "--monthly-quota",
        "5"
      ],
      env
    )
    expect(r.code, r.stderr).toBe(0)
    created = jsonOut(r)
    expect(created.id).toEqual(expect.any(String))
    expect(created.key).toMatch(/^atk_test_[A-Za-z0-9_-]{32}$/)
    expect(created.scopes).toEqual(["attest", "batch"])
    expect(created.org_id).toBe("O")
    expect(created.env).toBe("test")

    const db = new Database(join(dataDir, "attestd.db"), { readonly: true, fileMustExist: true })
    try {
      const rows = db.prepare("SELECT * FROM api_keys WHERE id = ?").all(created.id)
      expect(rows).toHaveLength(1)
      const row = rows[0]!
      expect(row.key_hash).toBe(createHash("sha256").update(created.key, "utf8").digest("hex"))
      const secretPart = created.key.slice("atk_test_".length)
      for (const [column, value] of Object.entries(row)) {
        expect(String(value), column).not.toContain(secretPart)
      }
      // and nowhere else in the database either
      const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((t) => String(t.name))
      for (const t of tables) {
        for (const other of db.prepare(`SELECT * FROM "${t}"`).all()) {
          expect(JSON.stringify(other), t).not.toContain(secretPart)
        }
      }
    } finally {
      db.close()
    }
  })

  it("keys list never prints a secret", async () => {
    const r = await cli(["keys", "list"], env)
    expect(r.code, r.stderr).toBe(0)
    const listed = jsonOut(r)
    const mine = listed.keys.find((k: any) => k.id === created.id)
    expect(mine).toMatchObject({ id: created.id, label: "L", scopes: ["attest", "batch"], org_id: "O", env: "test", revoked_at: null })
    expect(r.stdout).not.toContain(created.key)
    expect(r.stdout).not.toContain(created.key.slice(9))
    expect(r.stdout).not.toMatch(/atk_(live|test)_/)
    expect(r.stdout).not.toContain(createHash("sha256").update(created.key, "utf8").digest("hex"))
  })

  it("invalid options exit non-zero and create nothing", async () => {
    const before = jsonOut(await cli(["keys", "list"], env)).keys.length
    const runs: Array<Promise<{ args: Array<string>; r: RunResult }>> = []
    for (
      const args of [
        ["keys", "create", "--label", "bad", "--scopes", "attest,bogus"],
        ["keys", "create", "--label", "bad", "--allow-ip", "not-an-ip"],
        ["keys", "create", "--label", "bad", "--env", "staging"],
        ["keys", "create", "--label", "bad", "--rate-limit", "0"]
      ]
    ) {
      runs.push(cli(args, env).then((r) => ({ args, r })))
    }
    for (const { args, r } of await Promise.all(runs)) {
      expect(r.code, args.join(" ")).not.toBe(0)
      expect(r.stdout).not.toMatch(/atk_(live|test)_/)
    }
    expect(jsonOut(await cli(["keys", "list"], env)).keys.length).toBe(before)
  })

  it("serve runs as a process: healthy, signing key file 0600, the created key attests", async () => {
    const port = await freePort()
    url = `http://127.0.0.1:${port}`
    serveProcess = spawn(process.execPath, [BIN, "serve"], {
      cwd: dataDir,
      env: { ...process.env, ...env, PORT: String(port), HOST: "127.0.0.1", NODE_OPTIONS: "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    serveProcess.stdout?.on("data", (d) => (serveOutput += d.toString()))
    serveProcess.stderr?.on("data", (d) => (serveOutput += d.toString()))
    await waitForHealth(url, serveProcess, () => serveOutput)

    const health = await client(url).get("/v1/healthz")
    expect(health.body.status).toBe("ok")

    const keyDir = join(dataDir, "signing-keys")
    const pems = readdirSync(keyDir).filter((f) => f.endsWith(".pem"))
    expect(pems.length).toBeGreaterThanOrEqual(1)
    for (const f of pems) expect((statSync(join(keyDir, f)).mode & 0o777).toString(8), f).toBe("600")

    const r = await client(url, created.key).post("/v1/attest", { hash_hex: randomHash() })
    expect(r.status, r.text).toBe(201)
    // --scopes attest,batch: nothing else (verify/batch detailed needs only a valid key)
    expect(r.headers.get("x-ratelimit-limit")).toBe("10")
  })

  it("keys revoke: the revoked key gets 401 from the running server", async () => {
    expect(url).not.toBe("")
    const r = await cliProcess(["keys", "revoke", created.id], env)
    expect(r.code, r.stderr).toBe(0)
    expect(jsonOut(r)).toMatchObject({ id: created.id, revoked: true })
    const refused = await client(url, created.key).post("/v1/attest", { hash_hex: randomHash() })
    expectEnvelope(refused, 401, "AUTH_ERROR")
    const [list, again, unknown] = await Promise.all([
      cli(["keys", "list"], env),
      cli(["keys", "revoke", created.id], env),
      // a failing command as a process: its error becomes the exit code
      cliProcess(["keys", "revoke", "key_doesnotexist"], env)
    ])
    expect(jsonOut(list).keys.find((k: any) => k.id === created.id).revoked_at).toEqual(expect.any(String))
    expect(again.code).not.toBe(0)
    expect(unknown.code).not.toBe(0)
  })

  it("signing-keys rotate adds a key; GET /v1/keys lists both; the file is 0600", async () => {
    expect(url).not.toBe("")
    const before = (await client(url).get("/v1/keys")).body.keys.map((k: any) => k.kid)
    expect(before).toHaveLength(1)
    const r = await cliProcess(["signing-keys", "rotate"], env)
    expect(r.code, r.stderr).toBe(0)
    const rotated = jsonOut(r)
    expect(rotated.kid).toEqual(expect.any(String))
    expect(before).not.toContain(rotated.kid)
    expect(rotated.jwk).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256", kid: rotated.kid })
    expect(rotated.jwk.d).toBeUndefined()
    const after = (await client(url).get("/v1/keys")).body.keys.map((k: any) => k.kid)
    expect(after.sort()).toEqual([...before, rotated.kid].sort())
    expect((await client(url).get(`/v1/keys/${rotated.kid}`)).status).toBe(200)
    const info = (await client(url).get("/v1/info")).body
    expect(info.signing_key_ids.sort()).toEqual(after.sort())
    const keyDir = join(dataDir, "signing-keys")
    const pems = readdirSync(keyDir).filter((f) => f.endsWith(".pem"))
    expect(pems).toHaveLength(2)
    expect(pems.some((f) => f.includes(rotated.kid))).toBe(true)
    for (const f of pems) expect((statSync(join(keyDir, f)).mode & 0o777).toString(8), f).toBe("600")
  })
})

const PG = HAVE_DIST && (await postgresAvailable())

describe.skipIf(!PG)("attestd CLI (postgres)", () => {
  let db: TestDatabase
  let env: Record<string, string>
  beforeAll(async () => {
    db = await createPgDatabase()
    env = { ATTESTD_DATA_DIR: db.dataDir, DATABASE_URL: db.url }
  })
  afterAll(async () => {
    await db?.drop()
  })

  it("migrate, keys create, keys list, keys revoke", async () => {
    const m = await cli(["migrate"], env)
    expect(m.code, m.stderr).toBe(0)
    expect(jsonOut(m).applied.length).toBeGreaterThanOrEqual(1)
    const c = await cli(["keys", "create", "--label", "pg", "--scopes", "attest", "--env", "production"], env)
    expect(c.code, c.stderr).toBe(0)
    const created = jsonOut(c)
    expect(created.key).toMatch(/^atk_live_[A-Za-z0-9_-]{32}$/)
    expect(created).toMatchObject({ scopes: ["attest"], env: "production", org_id: null })
    const l = await cli(["keys", "list"], env)
    expect(l.stdout).not.toContain(created.key)
    expect(jsonOut(l).keys.map((k: any) => k.id)).toContain(created.id)
    const r = await cli(["keys", "revoke", created.id], env)
    expect(r.code, r.stderr).toBe(0)
  })
})
