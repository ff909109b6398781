#!/usr/bin/env node
// Bundle sizes of the client entry points as a browser app would ship them (esbuild,
// minified, ESM, then gzip -9): the whole attestd/client, only createClient from it
// (what tree shaking leaves), all of it but the verifier, and attestd/client/effect.
//   node scripts/client-size.mjs
import { build } from "esbuild"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const cases = [
  ["attestd/client (everything)", `export * from "./src/client.ts"`],
  ["attestd/client (createClient only)", `export { createClient } from "./src/client.ts"`],
  [
    "attestd/client (all but verifyBundle)",
    `export { createClient, hashBlob, hashString, hmacDigest, encryptExtraData, decryptExtraData, verifyWebhook, deriveValues } from "./src/client.ts"`
  ],
  ["attestd/client/effect (everything)", `export * from "./src/client-effect.ts"`],
  // what it adds to an app that already ships effect and @effect/platform
  ["attestd/client/effect (own code only)", `export * from "./src/client-effect.ts"`, ["effect", "@effect/platform"]]
]
for (const [label, contents, external = []] of cases) {
  const out = await build({
    stdin: { contents, resolveDir: ROOT, loader: "ts" },
    bundle: true,
    platform: "browser",
    format: "esm",
    minify: true,
    write: false,
    logLevel: "error",
    external: external.flatMap((p) => [p, `${p}/*`])
  })
  const code = out.outputFiles[0].contents
  console.log(`${label.padEnd(38)} ${(code.length / 1024).toFixed(1).padStart(6)} KiB minified ${(gzipSync(code, { level: 9 }).length / 1024).toFixed(1).padStart(6)} KiB gzipped`)
}
