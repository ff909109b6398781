#!/usr/bin/env node
// package.json `prepare`: builds dist/ when it is missing or older than its sources, and
// otherwise does nothing. npm runs `prepare` on `npm install` in a clone (which must leave
// a built dist/: the README's set-up relies on it), but also whenever it packs this
// directory, which `npx attestd` in a checkout does on every call: a rebuild there cost
// ~50 s and rewrote dist/ under a running server. So under `npm exec` (npx) an existing
// dist/ is never rebuilt, only reported when stale; `npm test` and `npm run build` build
// on their own.
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync, statSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const OUTPUTS = ["dist/bin.js", "dist/index.js", "dist/cli.mjs", "dist/verifier/page.html"].map((p) => join(ROOT, p))
const INPUTS = ["src", "web", "scripts/bundle.mjs", "scripts/build-verifier.mjs", "tsconfig.build.json", "package.json"].map((p) => join(ROOT, p))

const newest = (path) => {
  if (!existsSync(path)) return 0
  const s = statSync(path)
  if (!s.isDirectory()) return s.mtimeMs
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))))
}

const missing = OUTPUTS.filter((p) => !existsSync(p))
const builtAt = missing.length > 0 ? 0 : Math.min(...OUTPUTS.map((p) => statSync(p).mtimeMs))
const stale = builtAt < Math.max(...INPUTS.map(newest))

if (!stale) process.exit(0)
if (missing.length === 0 && process.env.npm_command === "exec") {
  process.stderr.write("attestd: dist/ is older than src/; not rebuilding under npx (run npm run build)\n")
  process.exit(0)
}
const npm = process.platform === "win32" ? "npm.cmd" : "npm"
const r = spawnSync(npm, ["run", "build"], { cwd: ROOT, stdio: "inherit" })
process.exit(r.status ?? 1)
