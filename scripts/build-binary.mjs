#!/usr/bin/env node
// npm run build:binary → dist/attestd: a Node single executable application (issue 14 §2).
// The CommonJS bundle (scripts/bundle.mjs --sea) is the main script; the better-sqlite3 and
// pkcs11js addons and the browser verifier page (dist/verifier/page.html, built by npm run
// build) are assets. Each addon's SHA-256 is compiled into the bundle: at run time the file
// written to disk is loaded only when it has exactly that hash (src/Platform/NativeAddon.ts).
import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const require = createRequire(import.meta.url)
const dist = join(ROOT, "dist")
const work = join(dist, "sea")
mkdirSync(work, { recursive: true })

const addonOf = (pkg, file) => {
  const path = join(dirname(require.resolve(`${pkg}/package.json`)), "build", "Release", file)
  if (!existsSync(path)) throw new Error(`${pkg} addon not found at ${path}: run npm install`)
  return { path, sha256: createHash("sha256").update(readFileSync(path)).digest("hex") }
}
const sqlite = addonOf("better-sqlite3", "better_sqlite3.node")
const pkcs11 = addonOf("pkcs11js", "pkcs11.node")

execFileSync(process.execPath, [
  join(ROOT, "scripts", "bundle.mjs"),
  "--sea",
  `--sqlite-addon-sha256=${sqlite.sha256}`,
  `--pkcs11-addon-sha256=${pkcs11.sha256}`
], { stdio: "inherit" })

const assets = { "better_sqlite3.node": sqlite.path, "pkcs11.node": pkcs11.path }
const page = join(dist, "verifier", "page.html")
if (!existsSync(page)) throw new Error(`${page} is missing: npm run build builds it`)
assets["verifier.html"] = page

const blob = join(work, "attestd.blob")
const config = join(work, "sea-config.json")
writeFileSync(config, JSON.stringify({ main: join(work, "attestd.cjs"), output: blob, disableExperimentalSEAWarning: true, useCodeCache: true, assets }, null, 2))
execFileSync(process.execPath, ["--experimental-sea-config", config], { stdio: "inherit" })

const out = join(dist, "attestd")
rmSync(out, { force: true })
copyFileSync(process.execPath, out)
chmodSync(out, 0o755)
execFileSync(process.execPath, [
  require.resolve("postject/dist/cli.js"),
  out,
  "NODE_SEA_BLOB",
  blob,
  "--sentinel-fuse",
  "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2"
], { stdio: "inherit" })
console.log(`dist/attestd: ${(statSync(out).size / 1e6).toFixed(1)} MB (node ${process.version}, assets: ${Object.keys(assets).join(", ")})`)
