/**
 * Real headless Chromium (Debian's `chromium`) driven by playwright-core. Under
 * CI=true a missing browser is a failure, never a skip: `.ci/run` installs it.
 */
import { existsSync } from "node:fs"
import { chromium, type Browser } from "playwright-core"

export const CHROMIUM = "/usr/bin/chromium"

export const CHROMIUM_FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic"
]

/** Whether the browser suites run here: always under CI (and then Chromium must exist), else when it is installed. */
export const browserAvailable = (): boolean => {
  if (existsSync(CHROMIUM)) return true
  if (process.env.CI === "true") throw new Error(`${CHROMIUM} is missing; under CI=true the browser tests must run (apt-get install chromium)`)
  return false
}

export const launchChromium = (): Promise<Browser> =>
  chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS })
