// Bundles the browser verification page (web/verifier) into one self-contained
// HTML file, dist/verifier/page.html: inline script and style, pinned by hash in
// a restrictive Content-Security-Policy. The server fills {{TRUST}} at serve time.
import { build } from "esbuild"
import { createHash } from "node:crypto"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const src = join(root, "web", "verifier")
const out = join(root, "dist", "verifier", "page.html")

const common = { bundle: true, write: false, minify: true, format: "iife", platform: "browser", target: ["es2022"], legalComments: "none", logLevel: "warning" }

const text = (result) => result.outputFiles[0].text

const worker = text(await build({ ...common, entryPoints: [join(src, "hashWorker.ts")] }))
mkdirSync(join(root, "dist", "verifier"), { recursive: true })
writeFileSync(join(root, "dist", "verifier", "hashWorker.js"), worker)

// The page bundles the verification core of src/Verify (portable: no node:*). Any
// error here (a node:* import creeping back in, a type-only slip) fails the build.
const bundled = await build({ ...common, entryPoints: [join(src, "main.ts")], define: { __HASH_WORKER_SOURCE__: JSON.stringify(worker) } })
const script = text(bundled).replace(/<\/(script)/gi, "<\\/$1").replace(/<!--/g, "<\\!--")
const style = readFileSync(join(src, "style.css"), "utf8").trim()

const sha = (s) => `'sha256-${createHash("sha256").update(s, "utf8").digest("base64")}'`
export const CSP = [
  "default-src 'none'",
  `script-src ${sha(script)}`,
  `style-src ${sha(style)}`,
  "img-src 'self' data: https:",
  // same origin (?id=, ?brand=) and, only on "Check the chain", the Esplora sources the user names
  "connect-src 'self' https: http://127.0.0.1:* http://localhost:*",
  "worker-src blob:",
  "base-uri 'none'",
  "form-action 'none'"
].join("; ")

const template = readFileSync(join(src, "page.html"), "utf8")
const html = template
  .replace("{{CSP}}", () => CSP)
  .replace("{{STYLE}}", () => style)
  .replace("{{SCRIPT}}", () => script)
mkdirSync(dirname(out), { recursive: true })
writeFileSync(out, html)
console.log(`verifier page: ${out} ${html.length} bytes, ${gzipSync(html).length} gzipped`)
