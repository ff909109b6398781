/**
 * Files at rest (issue 42, finding 3): the SQLite database holds webhook secrets and
 * claim data. Under umask 000 the data dir (and each parent attestd makes) is 0700, the
 * database and its -wal and -shm 0600; a backup's directories are 0700 and its files
 * 0600, and so is what a restore writes. A database made 0644 by an older version is
 * set to 0600 when opened. Directories are made one level at a time: a path that
 * cannot be made fails at once (/proc/nope) instead of spinning.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { backup, restore } from "../../src/Platform/Backup.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { makePrivateDir } from "../../src/Platform/PrivateFiles.js"
import { layerFromUrl } from "../../src/Platform/Sql.js"

const modeOf = (path: string) => statSync(path).mode & 0o777

/** Every directory and file under `root` with its mode. */
const modesUnder = (root: string): Array<{ path: string; dir: boolean; mode: number }> => {
  const out: Array<{ path: string; dir: boolean; mode: number }> = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name)
      out.push({ path: relative(root, full), dir: entry.isDirectory(), mode: modeOf(full) })
      if (entry.isDirectory()) walk(full)
    }
  }
  walk(root)
  return out
}

/** Runs `f` with umask 000 (what a careless service manager leaves), restoring it after. */
const withOpenUmask = async <A>(f: () => Promise<A>): Promise<A> => {
  const before = process.umask(0o000)
  try {
    return await f()
  } finally {
    process.umask(before)
  }
}

/** Writes through a SQLite database at `url` (WAL mode: leaves -wal and -shm), returns its file. */
const write = (url: string) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe("CREATE TABLE IF NOT EXISTS secrets (v TEXT)")
    yield* sql.unsafe("INSERT INTO secrets (v) VALUES ('webhook-secret')")
  }).pipe(Effect.provide(layerFromUrl(url)))))

describe("files at rest are the service user's only", () => {
  const roots: Array<string> = []
  afterAll(() => {
    for (const r of roots) rmSync(r, { recursive: true, force: true })
  })
  const root = () => {
    const r = mkdtempSync(join(tmpdir(), "attestd-private-"))
    roots.push(r)
    return r
  }

  it("under umask 000: data dir 0700 (each level made), database, -wal and -shm 0600", async () => {
    const base = root()
    const dataDir = join(base, "srv", "data")
    const db = join(dataDir, "attestd.db")
    await withOpenUmask(async () => {
      // kept open while the modes are read: -wal and -shm exist while a connection does
      await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe("PRAGMA journal_mode = WAL")
        yield* sql.unsafe("CREATE TABLE secrets (v TEXT)")
        yield* sql.unsafe("INSERT INTO secrets (v) VALUES ('webhook-secret')")
        expect(existsSync(`${db}-wal`)).toBe(true)
        expect(existsSync(`${db}-shm`)).toBe(true)
        expect({ srv: modeOf(join(base, "srv")), data: modeOf(dataDir) }).toEqual({ srv: 0o700, data: 0o700 })
        expect({ db: modeOf(db), wal: modeOf(`${db}-wal`), shm: modeOf(`${db}-shm`) }).toEqual({ db: 0o600, wal: 0o600, shm: 0o600 })
      }).pipe(Effect.provide(layerFromUrl(`sqlite:${db}`)))))
    })
  })

  it("a database an older version left 0644 (and its -wal) is 0600 once opened", async () => {
    const dataDir = root()
    const db = join(dataDir, "attestd.db")
    await write(`sqlite:${db}`)
    chmodSync(db, 0o644)
    writeFileSync(`${db}-wal`, "")
    chmodSync(`${db}-wal`, 0o644)
    await write(`sqlite:${db}`)
    expect(modeOf(db)).toBe(0o600)
    if (existsSync(`${db}-wal`)) expect(modeOf(`${db}-wal`)).toBe(0o600)
  })

  it("under umask 000: a backup (and a restore) is 0700 directories and 0600 files", async () => {
    const dataDir = root()
    const db = join(dataDir, "attestd.db")
    await write(`sqlite:${db}`)
    mkdirSync(join(dataDir, "signing-keys"))
    writeFileSync(join(dataDir, "signing-keys", "k.pem"), "-----BEGIN PRIVATE KEY-----\n", { mode: 0o644 })
    const config = AppConfig.make({ databaseUrl: `sqlite:${db}`, dataDir })
    const target = join(root(), "backups", "nightly", "b1")
    await withOpenUmask(() => Effect.runPromise(backup(config, target)))
    const backedUp = modesUnder(join(target, ".."))
    expect(backedUp.map((e) => e.path).sort()).toEqual(["b1", "b1/attestd.db", "b1/manifest.json", "b1/signing-keys", "b1/signing-keys/k.pem"])
    for (const e of backedUp) expect({ path: e.path, mode: e.mode.toString(8) }).toEqual({ path: e.path, mode: e.dir ? "700" : "600" })
    expect(modeOf(join(target, "..", ".."))).toBe(0o700) // "backups", made by the backup

    const restoredDir = join(root(), "restored")
    const restoredConfig = AppConfig.make({ databaseUrl: `sqlite:${join(restoredDir, "attestd.db")}`, dataDir: restoredDir })
    await withOpenUmask(() => Effect.runPromise(restore(restoredConfig, target)))
    expect(modeOf(restoredDir)).toBe(0o700)
    for (const e of modesUnder(restoredDir)) expect({ path: e.path, mode: e.mode.toString(8) }).toEqual({ path: e.path, mode: e.dir ? "700" : "600" })
  })

  it("a directory that cannot be made fails at once, naming it (no recursive mkdir spin)", () => {
    expect(() => makePrivateDir("/proc/nope/deeper")).toThrow(/cannot create directory \/proc\/nope \(ENOENT\)/)
    const base = root()
    writeFileSync(join(base, "file"), "x")
    expect(() => makePrivateDir(join(base, "file", "sub"))).toThrow(/is not a directory/)
  })
})
