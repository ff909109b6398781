/**
 * The single executable's native library on disk (issue 42, finding 1): written into
 * the user's own directory ($TMPDIR/attestd-native-<uid>, 0700, owned by the user, not
 * a symlink) and loaded only when its SHA-256 is the one recorded at build time. A
 * planted file, a world-writable directory, a symlinked directory and a directory of
 * another user are refused with an error naming the path.
 */
import { createHash, randomBytes } from "node:crypto"
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { extractNativeAddon, NativeAddonError, nativeDirOf, type NativeAddonSource } from "../../src/Platform/NativeAddon.js"

describe("native library extraction", () => {
  const bases: Array<string> = []
  afterAll(() => {
    for (const b of bases) rmSync(b, { recursive: true, force: true })
  })
  const bytes = new Uint8Array(randomBytes(4096))
  const sha256 = createHash("sha256").update(bytes).digest("hex")
  const uid = process.getuid?.()
  const sourceIn = (baseDir: string): NativeAddonSource => ({ name: "addon", sha256, bytes: () => bytes, baseDir, uid })
  const freshBase = () => {
    const b = mkdtempSync(join(tmpdir(), "attestd-native-test-"))
    bases.push(b)
    return b
  }
  const fileIn = (baseDir: string) => join(nativeDirOf(baseDir, uid), `addon-${sha256.slice(0, 16)}.node`)
  const refused = (baseDir: string, pattern: RegExp) => {
    let error: unknown
    try {
      extractNativeAddon(sourceIn(baseDir))
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(NativeAddonError)
    expect((error as Error).message).toMatch(/refusing to load the native library/)
    expect((error as Error).message).toMatch(pattern)
  }

  it("writes the file into a 0700 directory of its own, whatever the umask, and finds it again", () => {
    const base = freshBase()
    const before = process.umask(0o000)
    try {
      const file = extractNativeAddon(sourceIn(base))
      expect(file).toBe(fileIn(base))
      expect(readFileSync(file)).toEqual(Buffer.from(bytes))
      expect(lstatSync(nativeDirOf(base, uid)).mode & 0o777).toBe(0o700)
      expect(lstatSync(file).mode & 0o022).toBe(0)
      expect(extractNativeAddon(sourceIn(base))).toBe(file)
    } finally {
      process.umask(before)
    }
  })

  it("refuses a planted file whose SHA-256 is not the recorded one", () => {
    const base = freshBase()
    mkdirSync(nativeDirOf(base, uid), { mode: 0o700 })
    writeFileSync(fileIn(base), "planted", { mode: 0o755 })
    refused(base, /SHA-256 [0-9a-f]{64}, not the [0-9a-f]{64} this executable was built with/)
  })

  it("refuses a directory with mode 0777", () => {
    const base = freshBase()
    mkdirSync(nativeDirOf(base, uid))
    chmodSync(nativeDirOf(base, uid), 0o777)
    refused(base, /mode 0777, not 0700/)
  })

  it("refuses a symlinked directory", () => {
    const base = freshBase()
    const elsewhere = join(base, "elsewhere")
    mkdirSync(elsewhere, { mode: 0o700 })
    symlinkSync(elsewhere, nativeDirOf(base, uid))
    refused(base, /is a symbolic link/)
  })

  it.skipIf(uid !== 0)("refuses a directory owned by another uid", () => {
    const base = freshBase()
    mkdirSync(nativeDirOf(base, uid), { mode: 0o700 })
    chmodSync(nativeDirOf(base, uid), 0o700)
    chownSync(nativeDirOf(base, uid), 65534, 65534)
    refused(base, /owned by uid 65534/)
  })
})
