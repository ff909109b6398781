/** The service's semver, from package.json at build time. */
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)

/** Set by scripts/bundle.mjs (esbuild define) in the bundled CLI and the single executable. */
declare const __ATTESTD_VERSION__: string | undefined

const readVersion = (): string => {
  if (typeof __ATTESTD_VERSION__ === "string") return __ATTESTD_VERSION__
  for (const path of ["../../package.json", "../package.json"]) {
    try {
      return (require(path) as { version: string }).version
    } catch {
      // try the next location (src/ vs dist/)
    }
  }
  return "0.0.0"
}

export const SERVICE_VERSION = readVersion()
