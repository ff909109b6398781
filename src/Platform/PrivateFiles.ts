/**
 * Files at rest that only the service's user may read — the data dir, the SQLite
 * database (webhook secrets, claim data) with its -wal and -shm, backups:
 * directories 0700, files 0600, whatever the umask.
 *
 * Directories are made one level at a time from the nearest existing ancestor, not
 * with mkdirSync's recursive mode: on Node 20 that spins forever where mkdir answers
 * ENOENT under an existing parent (/proc/nope), and it leaves the umask's mode on
 * every parent it makes. Failures are Errors naming the path and the reason.
 */
import { chmodSync, closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { dirname, resolve } from "node:path"

export const PRIVATE_DIR_MODE = 0o700
export const PRIVATE_FILE_MODE = 0o600

const codeOf = (e: unknown): string =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : e instanceof Error ? e.message : String(e)

const ownedByMe = (path: string): boolean => {
  const uid = process.getuid?.()
  return uid === undefined || statSync(path).uid === uid
}

/**
 * Makes `dir` and each missing parent (mode 0700); existing directories are left as they
 * are. Throws when the nearest existing ancestor is not a directory or a level cannot be
 * made (not writable, a read-only or pseudo file system).
 */
export const makePrivateDir = (dir: string): void => {
  const target = resolve(dir)
  const missing: Array<string> = []
  let existing = target
  while (!existsSync(existing)) {
    missing.push(existing)
    const parent = dirname(existing)
    if (parent === existing) break
    existing = parent
  }
  if (existsSync(existing) && !statSync(existing).isDirectory()) {
    throw new Error(`cannot create ${target}: ${existing} is not a directory`)
  }
  for (const level of missing.reverse()) {
    try {
      mkdirSync(level, { mode: PRIVATE_DIR_MODE })
    } catch (e) {
      // made by a concurrent start: theirs, as it is
      if (codeOf(e) === "EEXIST" && statSync(level).isDirectory()) continue
      throw new Error(`cannot create directory ${level} (${codeOf(e)}): is ${dirname(level)} a writable directory?`)
    }
    chmodSync(level, PRIVATE_DIR_MODE) // the umask may have taken bits off
  }
}

/** Makes one new directory 0700 in an existing parent; throws (clearly) when it exists or cannot be made. */
export const makeNewPrivateDir = (dir: string): void => {
  try {
    mkdirSync(dir, { mode: PRIVATE_DIR_MODE })
  } catch (e) {
    throw new Error(`cannot create directory ${dir} (${codeOf(e)}): is ${dirname(dir)} a writable directory?`)
  }
  chmodSync(dir, PRIVATE_DIR_MODE)
}

/** Sets an existing file of ours to 0600 (a file of another user is left alone). */
export const restrictFile = (path: string): void => {
  if (!existsSync(path) || lstatSync(path).isSymbolicLink() || !ownedByMe(path)) return
  if ((statSync(path).mode & 0o777) !== PRIVATE_FILE_MODE) chmodSync(path, PRIVATE_FILE_MODE)
}

/** Creates the file (empty) with mode 0600 when missing, and sets it to 0600 when it is ours. */
export const makePrivateFile = (path: string): void => {
  closeSync(openSync(path, "a", PRIVATE_FILE_MODE))
  restrictFile(path)
}

/** The companions SQLite keeps beside a database file. */
export const SQLITE_COMPANIONS = ["-wal", "-shm", "-journal"] as const

/**
 * Before SQLite opens `file`: its directory made 0700 if missing, the file created 0600
 * (SQLite gives its -wal and -shm the database file's mode) and, for a database made by
 * an older version, the file and its companions set to 0600.
 */
export const prepareSqliteFile = (file: string): void => {
  makePrivateDir(dirname(file))
  makePrivateFile(file)
  for (const suffix of SQLITE_COMPANIONS) restrictFile(file + suffix)
}

/**
 * Throws, naming the file, when `path` can be read or written by group or others:
 * a key, PIN or passphrase file the umask or a copy left open is refused, not used.
 */
export const requireOwnerOnly = (path: string, what: string): void => {
  const mode = statSync(path).mode & 0o777
  if ((mode & 0o077) !== 0) {
    throw new Error(
      `${what} ${path} has mode ${mode.toString(8).padStart(4, "0")}: it is open to group or others; make it 0600 (chmod 600 ${path})`
    )
  }
}

/** A secret held in a file (a PIN, a passphrase): owner-only, its trailing newline dropped, never empty. */
export const readSecretFile = (path: string, what: string): string => {
  let text: string
  try {
    requireOwnerOnly(path, what)
    text = readFileSync(path, "utf8").replace(/\r?\n$/, "")
  } catch (e) {
    if (codeOf(e) === "ENOENT") throw new Error(`${what} ${path} does not exist`)
    throw e instanceof Error ? e : new Error(String(e))
  }
  if (text.length === 0) throw new Error(`${what} ${path} is empty`)
  return text
}

/** Writes `data` to `path` as a new 0600 file beside it, renamed over it: readers see the old or the new file, whole. */
export const writePrivateFileAtomic = (path: string, data: string | Uint8Array): void => {
  const partial = `${path}.partial-${process.pid}`
  rmSync(partial, { force: true }) // left by a crash of an earlier process with this pid
  writeFileSync(partial, data, { mode: PRIVATE_FILE_MODE, flag: "wx" })
  chmodSync(partial, PRIVATE_FILE_MODE)
  renameSync(partial, path)
}
