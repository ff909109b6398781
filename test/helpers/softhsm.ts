/**
 * A SoftHSM2 token of its own for a test: a temporary directory with its own
 * SOFTHSM2_CONF and token directory, a token initialised with softhsm2-util, and a
 * PIN file. `remove()` moves the token's directory away while processes use it (its
 * slot is then gone for them), `restore()` puts it back. Under CI=true a missing
 * SoftHSM2 or pkcs11-tool fails the suite instead of skipping it.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

export const SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"
const TOOLS = ["/usr/bin/softhsm2-util", "/usr/bin/pkcs11-tool"]

export const softhsmAvailable = (): boolean => {
  const missing = [SOFTHSM_MODULE, ...TOOLS].filter((f) => !existsSync(f))
  if (missing.length > 0 && process.env.CI === "true") {
    throw new Error(`CI=true but ${missing.join(", ")} is missing (apt-get install softhsm2 opensc)`)
  }
  return missing.length === 0
}

export interface SoftToken {
  readonly label: string
  readonly pin: string
  readonly pinFile: string
  /** SOFTHSM2_CONF and the ATTESTD_SIGNER=pkcs11 settings for a child process. */
  readonly env: Record<string, string>
  /** `pkcs11-tool --list-objects` of the token. */
  readonly listObjects: () => string
  /** Moves the token's directory away: the token is gone for every process using it. */
  readonly remove: () => void
  readonly restore: () => void
  readonly cleanup: () => void
}

export const makeSoftToken = (label = "attestd-test"): SoftToken => {
  const dir = mkdtempSync(join(tmpdir(), "attestd-softhsm-"))
  const tokens = join(dir, "tokens")
  const away = join(dir, "away")
  const conf = join(dir, "softhsm2.conf")
  mkdirSync(tokens)
  writeFileSync(conf, `directories.tokendir = ${tokens}\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n`)
  const pin = "1234"
  const env = { SOFTHSM2_CONF: conf }
  execFileSync("softhsm2-util", ["--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", "5678"], { env: { ...process.env, ...env }, stdio: "ignore" })
  const pinFile = join(dir, "pin")
  writeFileSync(pinFile, `${pin}\n`, { mode: 0o600 })
  let moved: string | undefined
  return {
    label,
    pin,
    pinFile,
    env: {
      ...env,
      ATTESTD_SIGNER: "pkcs11",
      ATTESTD_PKCS11_MODULE: SOFTHSM_MODULE,
      ATTESTD_PKCS11_TOKEN: label,
      ATTESTD_PKCS11_PIN_FILE: pinFile
    },
    listObjects: () =>
      execFileSync("pkcs11-tool", ["--module", SOFTHSM_MODULE, "--token-label", label, "--pin", pin, "--list-objects"], {
        env: { ...process.env, ...env },
        encoding: "utf8"
      }),
    remove: () => {
      moved = readdirSync(tokens)[0]!
      renameSync(join(tokens, moved), away)
    },
    restore: () => {
      if (moved !== undefined) renameSync(away, join(tokens, moved))
      moved = undefined
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true })
  }
}
