#!/usr/bin/env node
// Bundles the CLI with esbuild (issue 14 §2), so a command loads one file instead of
// ~2,000 modules:
//   node scripts/bundle.mjs          dist/cli.mjs  (ESM; better-sqlite3 and pkcs11js stay packages: npx attestd)
//   node scripts/bundle.mjs --sea --sqlite-addon-sha256=HEX --pkcs11-addon-sha256=HEX
//                                    dist/sea/attestd.cjs (CommonJS, for the single executable;
//                                    the better-sqlite3 and pkcs11js addons come from SEA assets whose
//                                    SHA-256 scripts/build-binary.mjs passes in, see src/Platform/NativeAddon.ts)
import { build } from "esbuild"
import { readFileSync, rmSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const version = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version
const sea = process.argv.includes("--sea")
const hashArg = (name) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const sqliteAddonSha256 = hashArg("sqlite-addon-sha256")
const pkcs11AddonSha256 = hashArg("pkcs11-addon-sha256")
if (sea && !/^[0-9a-f]{64}$/.test(sqliteAddonSha256 ?? "")) {
  throw new Error("--sea needs --sqlite-addon-sha256=<hex SHA-256 of the embedded better_sqlite3.node> (scripts/build-binary.mjs passes it)")
}
if (sea && !/^[0-9a-f]{64}$/.test(pkcs11AddonSha256 ?? "")) {
  throw new Error("--sea needs --pkcs11-addon-sha256=<hex SHA-256 of the embedded pkcs11.node> (scripts/build-binary.mjs passes it)")
}

const common = {
  entryPoints: [join(ROOT, "src", "bin.ts")],
  bundle: true,
  platform: "node",
  target: "node20",
  minify: true,
  keepNames: false,
  legalComments: "none",
  logLevel: "warning",
  // optional speed-ups of ws, never installed here
  external: ["bufferutil", "utf-8-validate"],
  define: { __ATTESTD_VERSION__: JSON.stringify(version) }
}

// In the single executable, better-sqlite3's addon is the SEA asset "better_sqlite3.node":
// src/Platform/NativeAddon.ts writes it to the user's own directory, checks it against the
// SHA-256 recorded here, loads it, and every Database gets it through better-sqlite3's own
// nativeBinding option.
const SEA_BANNER = `
const __attestd_import_meta_url = require("node:url").pathToFileURL(process.execPath).href;`

const NATIVE_ADDON = join(ROOT, "src", "Platform", "NativeAddon.ts")

const nativeBindingFromSea = {
  name: "better-sqlite3-native-binding-from-sea",
  setup(b) {
    b.onLoad({ filter: /better-sqlite3[\\/]lib[\\/]database\.js$/ }, (args) => {
      const source = readFileSync(args.path, "utf8")
      const from = "const nativeBinding = 'nativeBinding' in options ? options.nativeBinding : null;"
      if (!source.includes(from)) throw new Error("better-sqlite3/lib/database.js changed: update scripts/bundle.mjs")
      return {
        contents: source.replace(
          from,
          `const nativeBinding = 'nativeBinding' in options ? options.nativeBinding : require(${JSON.stringify(NATIVE_ADDON)}).seaSqliteBinding();`
        ),
        resolveDir: dirname(args.path),
        loader: "js"
      }
    })
  }
}

// pkcs11js requires its addon from its own build directory; in the executable that is the SEA
// asset "pkcs11.node", written out and checked the same way.
const pkcs11BindingFromSea = {
  name: "pkcs11js-binding-from-sea",
  setup(b) {
    b.onLoad({ filter: /pkcs11js[\\/]index\.js$/ }, (args) => {
      const source = readFileSync(args.path, "utf8")
      const from = 'const pkcs11 = require("./build/Release/pkcs11.node");'
      if (!source.includes(from)) throw new Error("pkcs11js/index.js changed: update scripts/bundle.mjs")
      return {
        contents: source.replace(from, `const pkcs11 = require(${JSON.stringify(NATIVE_ADDON)}).seaPkcs11Binding();`),
        resolveDir: dirname(args.path),
        loader: "js"
      }
    })
  }
}

// ws and msgpackr try-require these optional native speed-ups (msgpackr-extract loads its addon
// from disk through node-gyp-build, which the executable's require refuses with a warning); in the
// executable they are absent by design and both packages fall back to JavaScript.
const noOptionalNative = {
  name: "no-optional-native",
  setup(b) {
    b.onResolve({ filter: /^(bufferutil|utf-8-validate|msgpackr-extract)$/ }, (args) => ({ path: args.path, namespace: "absent" }))
    b.onLoad({ filter: /.*/, namespace: "absent" }, (args) => ({ contents: `throw new Error("${args.path} is not in the executable")`, loader: "js" }))
  }
}

if (sea) {
  await build({
    ...common,
    format: "cjs",
    outfile: join(ROOT, "dist", "sea", "attestd.cjs"),
    define: {
      ...common.define,
      "import.meta.url": "__attestd_import_meta_url",
      __ATTESTD_SQLITE_ADDON_SHA256__: JSON.stringify(sqliteAddonSha256),
      __ATTESTD_PKCS11_ADDON_SHA256__: JSON.stringify(pkcs11AddonSha256)
    },
    banner: { js: SEA_BANNER },
    external: [],
    plugins: [nativeBindingFromSea, pkcs11BindingFromSea, noOptionalNative]
  })
} else {
  // chunk names carry a content hash: each build would otherwise leave the last one's beside it
  rmSync(join(ROOT, "dist", "cli-chunks"), { recursive: true, force: true })
  await build({
    ...common,
    format: "esm",
    // split: the server (src/main.ts, imported lazily by serve and worker) is a chunk of its own,
    // so the other commands never evaluate the HTTP stack
    splitting: true,
    outdir: join(ROOT, "dist"),
    entryNames: "cli",
    chunkNames: "cli-chunks/[name]-[hash]",
    outExtension: { ".js": ".mjs" },
    external: [...common.external, "better-sqlite3", "pkcs11js"],
    banner: { js: `import { createRequire as __attestdCreateRequire } from "node:module";\nconst require = __attestdCreateRequire(import.meta.url);` }
  })
}
