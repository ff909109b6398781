/**
 * Native addons of the single executable (better-sqlite3's, and pkcs11js's for
 * ATTESTD_SIGNER=pkcs11). A `.node` file loads only
 * from disk, so the executable writes its embedded copy (a SEA asset) to
 * `$TMPDIR/attestd-native-<uid>/` and loads it from there. Before loading, the
 * directory must be the user's own — a real directory (lstat: no symlink), owned by
 * this uid, mode exactly 0700 — and the file's SHA-256 must be the one recorded when
 * the executable was built (scripts/build-binary.mjs). Anything else — a file planted
 * by another local user, a directory they made or can write — is refused with an
 * error naming the path; nothing is loaded.
 */
import { createHash } from "node:crypto"
import { chmodSync, lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { getAsset } from "node:sea"

export class NativeAddonError extends Error {
  override readonly name = "NativeAddonError"
}

export interface NativeAddonSource {
  /** The file's stem, e.g. `better_sqlite3`. */
  readonly name: string
  /** Lowercase hex SHA-256 of the addon, recorded at build time. */
  readonly sha256: string
  /** The addon's bytes (read only when the file must be written). */
  readonly bytes: () => Uint8Array
  /** Where the per-user directory goes (the temp dir). */
  readonly baseDir: string
  /** The current uid (undefined where there is none: Windows). */
  readonly uid: number | undefined
}

const codeOf = (e: unknown): string =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : String(e)

const lstatOrUndefined = (path: string) => {
  try {
    return lstatSync(path)
  } catch (e) {
    if (codeOf(e) === "ENOENT") return undefined
    throw new NativeAddonError(`cannot inspect ${path} (${codeOf(e)})`)
  }
}

/** The per-user directory the addons are written to. */
export const nativeDirOf = (baseDir: string, uid: number | undefined): string =>
  join(baseDir, uid === undefined ? "attestd-native" : `attestd-native-${uid}`)

const refuse = (what: string): never => {
  throw new NativeAddonError(`refusing to load the native library: ${what}`)
}

/** Throws unless `dir` is a real directory of `uid` with mode exactly 0700. */
export const checkPrivateDir = (dir: string, uid: number | undefined): void => {
  const st = lstatOrUndefined(dir)
  if (st === undefined) return refuse(`${dir} does not exist`)
  if (st.isSymbolicLink()) return refuse(`${dir} is a symbolic link; remove it`)
  if (!st.isDirectory()) return refuse(`${dir} is not a directory; remove it`)
  if (uid !== undefined && st.uid !== uid) return refuse(`${dir} is owned by uid ${st.uid}, not by this user (uid ${uid}); remove it`)
  if (uid !== undefined && (st.mode & 0o777) !== 0o700) {
    return refuse(`${dir} has mode ${(st.mode & 0o777).toString(8).padStart(4, "0")}, not 0700; remove it`)
  }
}

/**
 * Writes the addon into the user's directory unless it is there, checks directory and
 * file, and returns the file's path; throws a NativeAddonError instead of returning a
 * file that is not exactly the one built in.
 */
export const extractNativeAddon = (source: NativeAddonSource): string => {
  const dir = nativeDirOf(source.baseDir, source.uid)
  try {
    mkdirSync(dir, { mode: 0o700 })
    chmodSync(dir, 0o700) // the umask may have taken bits off
  } catch (e) {
    if (codeOf(e) !== "EEXIST") refuse(`cannot create ${dir} (${codeOf(e)})`)
  }
  checkPrivateDir(dir, source.uid)
  const file = join(dir, `${source.name}-${source.sha256.slice(0, 16)}.node`)
  if (lstatOrUndefined(file) === undefined) {
    // written beside and renamed: a concurrent start never loads a half-written file
    const partial = `${file}.${process.pid}`
    writeFileSync(partial, source.bytes(), { mode: 0o500 })
    renameSync(partial, file)
  }
  const st = lstatOrUndefined(file)
  if (st === undefined || !st.isFile()) return refuse(`${file} is not a regular file; remove it`)
  if (source.uid !== undefined && st.uid !== source.uid) return refuse(`${file} is owned by uid ${st.uid}, not by this user; remove it`)
  const digest = createHash("sha256").update(readFileSync(file)).digest("hex")
  if (digest !== source.sha256) {
    return refuse(`${file} has SHA-256 ${digest}, not the ${source.sha256} this executable was built with; remove it`)
  }
  return file
}

/** The addon's exports, loaded from the checked file (Node's require caches it by path). */
export const loadNativeAddon = (source: NativeAddonSource): unknown => {
  const file = extractNativeAddon(source)
  return createRequire(file)(file)
}

declare const __ATTESTD_SQLITE_ADDON_SHA256__: string | undefined
declare const __ATTESTD_PKCS11_ADDON_SHA256__: string | undefined

/** The addon embedded as the SEA asset `<name>.node`, to be checked against the hash the build recorded. */
const seaSource = (name: string, sha256: string | undefined, what: string): NativeAddonSource => {
  if (sha256 === undefined) throw new NativeAddonError(`this executable was built without the SHA-256 of its ${what} addon`)
  return {
    name,
    sha256,
    bytes: () => new Uint8Array(getAsset(`${name}.node`)),
    baseDir: tmpdir(),
    uid: process.getuid?.()
  }
}

const pkcs11Sha256 = (): string | undefined => typeof __ATTESTD_PKCS11_ADDON_SHA256__ === "string" ? __ATTESTD_PKCS11_ADDON_SHA256__ : undefined

/**
 * better-sqlite3's binding in the single executable: scripts/bundle.mjs --sea makes every
 * Database call this (its `nativeBinding` option) and defines the build-time hash.
 */
export const seaSqliteBinding = (): unknown =>
  loadNativeAddon(seaSource("better_sqlite3", typeof __ATTESTD_SQLITE_ADDON_SHA256__ === "string" ? __ATTESTD_SQLITE_ADDON_SHA256__ : undefined, "SQLite"))

/**
 * pkcs11js's binding in the single executable: scripts/bundle.mjs --sea makes pkcs11js
 * load this in place of its `build/Release/pkcs11.node`, only when the PKCS#11 signer
 * is configured (the module is imported then).
 */
export const seaPkcs11Binding = (): unknown => loadNativeAddon(seaSource("pkcs11", pkcs11Sha256(), "PKCS#11"))

/**
 * The file of pkcs11js's addon, which each signing thread loads (Keys/Pkcs11Threads.ts): in
 * the single executable (scripts/bundle.mjs --sea defines the addon's hash) the copy written
 * out and checked, as the main thread's binding; elsewhere the package's own build.
 */
export const pkcs11AddonFile = (): string =>
  pkcs11Sha256() === undefined
    ? createRequire(import.meta.url).resolve("pkcs11js/build/Release/pkcs11.node")
    : extractNativeAddon(seaSource("pkcs11", pkcs11Sha256(), "PKCS#11"))
