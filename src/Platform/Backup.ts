/**
 * `attestd backup` / `attestd restore` (issue 14 §4). A backup is a directory:
 *
 *   manifest.json     format, service version, time, store, files
 *   attestd.db        SQLite only: a consistent online copy (VACUUM INTO, a read
 *                     transaction: the service keeps running and writing)
 *   signing-keys/     the signing key files (PKCS#8 PEM) from the data dir
 *   demo-tsa/         the embedded demo TSA's key and certificates, if any
 *   …                 anything else in the data dir (never the live database files)
 *
 * Private keys follow the key custody (CONTRACT §8): with ATTESTD_SIGNER=pkcs11 no file
 * holding a private key, plain or encrypted, is copied (the keys live in the token, which
 * is backed up on its own terms); with ATTESTD_KEY_PASSPHRASE_FILE only encrypted ones
 * are; otherwise plain key files are copied as they are. The manifest names the custody
 * and every file left out.
 *
 * On Postgres the database is not copied (use pg_dump; docs/operations.md); the
 * data-dir files still are, they are not in the database.
 *
 * A backup holds signing keys, webhook secrets and claim data: its directories are
 * 0700 and its files 0600, whatever the umask (PrivateFiles.ts), and so is what a
 * restore writes into the data dir.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Option, ParseResult, Schema } from "effect"
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs"
import { basename, dirname, join, relative, resolve } from "node:path"
import { SERVICE_VERSION } from "../Domain/Version.js"
import type { AppConfigShape } from "./Config.js"
import { makeNewPrivateDir, makePrivateDir, PRIVATE_FILE_MODE, restrictFile } from "./PrivateFiles.js"
import { dialectOf, layerFromUrl, sqlitePath } from "./Sql.js"

export const BACKUP_FORMAT = "attestd-backup/1"
const DB_FILE = "attestd.db"

const Manifest = Schema.Struct({
  format: Schema.String,
  version: Schema.String,
  created_at: Schema.String,
  store: Schema.Literal("sqlite", "pg"),
  database_file: Schema.NullOr(Schema.String),
  files: Schema.Array(Schema.String),
  /** How private keys were treated (absent in backups of earlier versions). */
  key_custody: Schema.optional(Schema.Literal("pkcs11", "encrypted-files", "plain-files")),
  /** Data-dir files holding private keys that the custody kept out of the backup. */
  left_out: Schema.optional(Schema.Array(Schema.String))
})
export type Manifest = typeof Manifest.Type

/** A backup's manifest.json, read and checked: a clear error for a file that is not one. */
const readManifest = (path: string) =>
  Effect.try({ try: () => JSON.parse(readFileSync(path, "utf8")) as unknown, catch: (e) => new Error(`${path} is not JSON: ${String(e)}`) }).pipe(
    Effect.flatMap((json) => {
      const format = json !== null && typeof json === "object" && "format" in json ? json.format : undefined
      if (format !== BACKUP_FORMAT) return Effect.fail(new Error(`unknown backup format ${String(format)}`))
      return Effect.mapError(
        Schema.decodeUnknown(Manifest)(json),
        (e) => new Error(`${path} is not an attestd backup manifest: ${ParseResult.TreeFormatter.formatErrorSync(e)}`)
      )
    })
  )

const isEmptyDir = (dir: string) => !existsSync(dir) || (statSync(dir).isDirectory() && readdirSync(dir).length === 0)

/** A synchronous file-system step as an Effect: its Error (a clear message) is the failure. */
const fsStep = <A>(step: () => A) => Effect.try({ try: step, catch: (e) => (e instanceof Error ? e : new Error(String(e))) })

/** Copies one file and makes the copy 0600 (its directory made 0700 if missing). */
const copyPrivate = (from: string, to: string) => {
  makePrivateDir(dirname(to))
  cpSync(from, to, { preserveTimestamps: true })
  restrictFile(to)
}

/** The database file to copy or restore: none for an in-memory database. */
const sqliteFile = (url: string) => {
  const path = sqlitePath(url)
  return path === ":memory:" ? undefined : resolve(path)
}

const PLAIN_PRIVATE_KEY = /-----BEGIN (?!ENCRYPTED )(?:[A-Z0-9]+ )*PRIVATE KEY-----/
const ENCRYPTED_PRIVATE_KEY = "-----BEGIN ENCRYPTED PRIVATE KEY-----"
/** Larger files are not PEM keys (a key file is a few hundred bytes). */
const KEY_FILE_MAX_BYTES = 1 << 20

/** The private key material a file holds: in clear (any plain PEM key), only encrypted, or none. */
const keyMaterialOf = (path: string): "plain" | "encrypted" | undefined => {
  if (statSync(path).size > KEY_FILE_MAX_BYTES) return undefined
  const text = readFileSync(path, "latin1")
  if (PLAIN_PRIVATE_KEY.test(text)) return "plain"
  return text.includes(ENCRYPTED_PRIVATE_KEY) ? "encrypted" : undefined
}

type KeyCustodyKind = NonNullable<Manifest["key_custody"]>

const custodyOf = (config: AppConfigShape): KeyCustodyKind =>
  config.signer._tag === "pkcs11" ? "pkcs11" : Option.isSome(config.signer.passphraseFile) ? "encrypted-files" : "plain-files"

/** Whether the custody lets a file with this key material into a backup. */
const carried = (custody: KeyCustodyKind, material: "plain" | "encrypted" | undefined): boolean =>
  material === undefined || custody === "plain-files" || (custody === "encrypted-files" && material === "encrypted")

/** Files of the data dir to carry (relative paths), never the live SQLite files. */
const dataDirFiles = (dataDir: string, dbFile: string | undefined): Array<string> => {
  if (!existsSync(dataDir)) return []
  // the database, its WAL companions and the API-key cache's marker (Auth/KeyCache.ts)
  const skip = dbFile === undefined ? new Set<string>() : new Set(["", "-wal", "-shm", "-journal", "-keys"].map((s) => dbFile + s))
  const out: Array<string> = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (entry.isFile() && !skip.has(resolve(full))) out.push(relative(dataDir, full))
    }
  }
  walk(dataDir)
  return out.sort()
}

export const backup = (config: AppConfigShape, to: string) =>
  Effect.gen(function*() {
    const target = resolve(to)
    if (!isEmptyDir(target)) return yield* Effect.fail(new Error(`backup target ${target} exists and is not an empty directory`))
    // Its parents made first (0700), so a target that cannot be written is refused before any work.
    yield* fsStep(() => makePrivateDir(dirname(target))).pipe(
      Effect.mapError((e) => new Error(`backup target ${target}: ${e.message}`))
    )
    const store = dialectOf(config.databaseUrl)
    const dbFile = store === "sqlite" ? sqliteFile(config.databaseUrl) : undefined
    if (store === "sqlite" && dbFile === undefined) return yield* Effect.fail(new Error("an in-memory database has nothing to back up"))
    if (dbFile !== undefined && !existsSync(dbFile)) return yield* Effect.fail(new Error(`no database at ${dbFile}`))
    // Written beside the target and renamed at the end: a target that exists is a complete backup.
    const partial = join(dirname(target), `.${basename(target)}.partial-${process.pid}`)
    yield* fsStep(() => makeNewPrivateDir(partial)).pipe(Effect.mapError((e) => new Error(`backup target ${target}: ${e.message}`)))
    if (dbFile !== undefined) {
      yield* Effect.logInfo(`backup: copying the database ${dbFile} (online, VACUUM INTO)`)
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe("PRAGMA busy_timeout = 10000")
        yield* sql.unsafe("VACUUM INTO ?", [join(partial, DB_FILE)])
      }).pipe(Effect.provide(layerFromUrl(config.databaseUrl)))
      yield* fsStep(() => restrictFile(join(partial, DB_FILE)))
    }
    const custody = custodyOf(config)
    const all = dataDirFiles(resolve(config.dataDir), dbFile)
    const leftOut = yield* fsStep(() => all.filter((f) => !carried(custody, keyMaterialOf(join(config.dataDir, f)))))
    const files = all.filter((f) => !leftOut.includes(f))
    if (leftOut.length > 0) {
      yield* Effect.logWarning(`backup: ${leftOut.length} file(s) holding private keys left out (key custody ${custody}): ${leftOut.join(", ")}`)
    }
    yield* fsStep(() => {
      for (const f of files) copyPrivate(join(config.dataDir, f), join(partial, f))
    })
    const manifest: Manifest = {
      format: BACKUP_FORMAT,
      version: SERVICE_VERSION,
      created_at: new Date().toISOString(),
      store,
      database_file: dbFile === undefined ? null : DB_FILE,
      files,
      key_custody: custody,
      left_out: leftOut
    }
    yield* fsStep(() => {
      writeFileSync(join(partial, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n", { mode: PRIVATE_FILE_MODE })
      restrictFile(join(partial, "manifest.json"))
      if (existsSync(target)) renameSync(target, `${partial}.empty`) // an empty target dir: replace it
      renameSync(partial, target)
    })
    yield* Effect.logInfo(`backup: ${files.length} data-dir file(s)${dbFile === undefined ? "" : " and the database"} written to ${target}`)
    return { to: target, ...manifest }
  })

export const restore = (config: AppConfigShape, from: string) =>
  Effect.gen(function*() {
    const source = resolve(from)
    const manifestPath = join(source, "manifest.json")
    if (!existsSync(manifestPath)) return yield* Effect.fail(new Error(`${source} is not an attestd backup (no manifest.json)`))
    const manifest = yield* readManifest(manifestPath)
    const dataDir = resolve(config.dataDir)
    if (!isEmptyDir(dataDir)) return yield* Effect.fail(new Error(`data dir ${dataDir} is not empty; restore only into an empty one`))
    const store = dialectOf(config.databaseUrl)
    if (manifest.store !== store) {
      return yield* Effect.fail(new Error(`the backup is of a ${manifest.store} store, DATABASE_URL is ${store}`))
    }
    const dbFile = store === "sqlite" ? sqliteFile(config.databaseUrl) : undefined
    if (dbFile !== undefined && existsSync(dbFile)) return yield* Effect.fail(new Error(`a database already exists at ${dbFile}`))
    for (const f of manifest.files) {
      if (f.startsWith("..") || resolve(dataDir, f) !== join(dataDir, f)) return yield* Effect.fail(new Error(`bad path in manifest: ${f}`))
    }
    yield* fsStep(() => {
      makePrivateDir(dataDir)
      for (const f of manifest.files) copyPrivate(join(source, f), join(dataDir, f))
      if (dbFile !== undefined && manifest.database_file !== null) copyPrivate(join(source, manifest.database_file), dbFile)
    })
    yield* Effect.logInfo(`restore: ${manifest.files.length} data-dir file(s)${dbFile === undefined ? "" : " and the database"} restored from ${source}`)
    return { from: source, data_dir: dataDir, database: dbFile ?? null, files: manifest.files.length }
  })
