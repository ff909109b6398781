/**
 * GET /verifier: the self-contained browser verification page (issue 10 §3).
 *
 * The page (dist/verifier/page.html, built by scripts/build-verifier.mjs, or the
 * `verifier.html` asset of a single-executable build) is read once at start and
 * served from memory. At serve time the instance embeds its trust inputs: its
 * signing keys (as GET /v1/keys), its TSA trust anchors (PEM) and, in demo mode,
 * its simulated chain's headers, named "published by <origin>", so the page —
 * and a copy saved to disk — verifies offline.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Option } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { SimulatedChain } from "../Platform/Calendar/SimulatedChain.js"
import { AppConfig, type AppConfigShape } from "../Platform/Config.js"
import { SigningKeys } from "../Platform/SigningKeys.js"
import { envelopeBody } from "../Http/Envelope.js"

export const VERIFIER_PATH = "/verifier"
export const SEA_ASSET = "verifier.html"

/** The page template: the single-executable asset when running as one, else the build output. */
export const loadVerifierPage = (): string | null => {
  try {
    const load = typeof require === "function" ? require : createRequire(import.meta.url)
    const sea = load("node:sea") as { isSea?: () => boolean; getAsset: (k: string, enc: string) => string }
    if (sea.isSea?.() === true) return sea.getAsset(SEA_ASSET, "utf8")
  } catch {
    // not a single executable (or a Node without node:sea)
  }
  try {
    const here = dirname(fileURLToPath(import.meta.url))
    for (const candidate of [join(here, "..", "verifier", "page.html"), join(here, "..", "..", "dist", "verifier", "page.html")]) {
      if (existsSync(candidate)) return readFileSync(candidate, "utf8")
    }
  } catch {
    // bundled without import.meta (the single executable): only the asset applies
  }
  return null
}

/** The trust inputs a served page carries. */
export interface EmbeddedTrust {
  readonly origin: string
  readonly mode: string
  readonly keys: ReadonlyArray<unknown>
  readonly tsaCaPem: ReadonlyArray<string>
  /** Demo mode: the simulated chain, height (decimal) → 80-byte header hex. */
  readonly simulatedHeaders: Readonly<Record<string, string>> | null
  /** How the page names each input in its reports (the core's `trustLabels`). */
  readonly trustLabels: { readonly keys: string; readonly tsa: string; readonly simulated?: string }
}

/** JSON safe inside `<script type="application/json">`. */
const scriptJson = (value: unknown): string =>
  JSON.stringify(value).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029")

export const renderVerifierPage = (template: string, trust: EmbeddedTrust): string =>
  template.replace("{{TRUST}}", () => scriptJson(trust))

/** The CSP of the page itself (its <meta> copy) plus what only a header can say. */
const headerCsp = (html: string): string => {
  const meta = /<meta http-equiv="Content-Security-Policy" content="([^"]*)">/.exec(html)?.[1] ?? "default-src 'none'"
  return `${meta}; frame-ancestors 'none'`
}

const originOf = (req: HttpServerRequest.HttpServerRequest): string => {
  const host = req.headers["host"]
  const proto = req.headers["x-forwarded-proto"] === "https" ? "https" : "http"
  return typeof host === "string" && /^[A-Za-z0-9.\-[\]:]{1,300}$/.test(host) ? `${proto}://${host}` : "this instance"
}

/** The TSA trust anchors this instance uses (PEM certificates): the demo TSA's root, or ATTESTD_TSA_CA_FILE. */
const tsaAnchorsOf = (config: AppConfigShape): ReadonlyArray<string> => {
  const file = config.tsaUrls.length === 0
    ? join(config.dataDir, "demo-tsa", "root.pem")
    : Option.getOrUndefined(config.tsaCaFile)
  if (file === undefined || !existsSync(file)) return []
  return readFileSync(file, "utf8").match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? []
}

/** The route, outside the JSON API (like /docs): an HTML page, not an operation. */
export const VerifierPageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const template = loadVerifierPage()
    const config = yield* AppConfig
    const keys = yield* SigningKeys
    const chain = yield* Effect.serviceOption(SimulatedChain)
    const handler = Effect.gen(function*() {
      if (template === null) {
        return yield* HttpServerResponse.json(
          envelopeBody("NOT_BUILT", "the verifier page is not built (npm run build)"),
          { status: 503 }
        )
      }
      const req = yield* HttpServerRequest.HttpServerRequest
      // Retired keys too: the imported historical attestations they signed verify here as well.
      const jwks = yield* keys.listed
      // In demo mode the simulated chain is the instance's own (read here, not over HTTP).
      const simulatedHeaders = Option.isSome(chain)
        ? Object.fromEntries((yield* chain.value.blocks).map((b) => [String(b.height), b.header]))
        : null
      const origin = originOf(req)
      const by = `published by ${origin}`
      const html = renderVerifierPage(template, {
        origin,
        mode: config.mode,
        keys: jwks,
        tsaCaPem: tsaAnchorsOf(config),
        simulatedHeaders,
        trustLabels: {
          keys: `keys ${by}`,
          tsa: `TSA anchors ${by}`,
          ...(simulatedHeaders !== null ? { simulated: `simulated chain ${by}` } : {})
        }
      })
      return HttpServerResponse.html(html).pipe(
        HttpServerResponse.setHeaders({
          "content-security-policy": headerCsp(html),
          "x-content-type-options": "nosniff",
          "referrer-policy": "no-referrer",
          "cache-control": "no-store"
        })
      )
    })
    yield* router.get(VERIFIER_PATH, handler)
  })
)
