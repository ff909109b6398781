/**
 * `attestd verify BUNDLE.json [--file DATA | --hash HEX] [--keys FILE] [--tsa-ca FILE]
 *  [--ots-headers FILE] [--bitcoin-source URL,…] [--server URL] [--hmac-key HEX]` (CONTRACT §1, §5):
 * a thin shell over the portable verification core (src/Verify/Verifier.ts).
 *
 * `attestd verify --tsr FILE [--file DATA | --hash HEX] [--tsa-ca FILE | --server URL]`
 * (CONTRACT §6): an RFC 3161 time-stamp token (src/Verify/Token.ts). --tsa-ca is then the
 * TSA chain the token is checked against; --server fetches the instance's TSA chain
 * (GET /v1/timestamp/certchain, unless --tsa-ca is given) and the token's own evidence
 * (GET /v1/timestamp/{serial}/evidence), whose tiers are checked against the instance's
 * published trust inputs like a bundle's. Same report shape and exit codes.
 *
 * `attestd verify FILE` (issue 13): when `FILE.attestd.json` (a receipt of `attestd stamp`)
 * lies beside FILE and neither --file nor --hash is given, FILE is the data: it is hashed
 * (and keyed with --hmac-key when the receipt says it was stamped so) and checked against
 * that receipt; --server then defaults to ATTESTD_URL. A receipt wrapper (Stamp/Receipt.ts)
 * is accepted wherever a bundle is.
 *
 * Reads the inputs, fetches the trust inputs an instance publishes when given
 * `--server` (GET /v1/keys, GET /v1/tsa/certificates and, for a demo instance,
 * GET /v1/simulated-chain/headers, each once), prints the report as JSON on
 * stdout and a short summary on stderr. Exit code: 0 verified, 1 failed,
 * 2 unreadable input (stdout is then `{"ok": false, "error": "…"}`),
 * 3 partial (the math holds but a tier is not anchored in a trust input).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Config, Console, Effect, Option } from "effect"
import { createHash } from "node:crypto"
import { createReadStream, readFileSync } from "node:fs"
import { existsSync } from "node:fs"
import { hmacKeyId, hmacOfDigest, parseHmacKey, parseReceipt, RECEIPT_SUFFIX } from "../Stamp/Receipt.js"
import { jsonForTerminal, shown } from "../Verify/Display.js"
import { fetchFailure, originOf, publishedTrust } from "../Stamp/PublishedTrust.js"
import type { ImprintAlgorithm } from "../Verify/Crypto.js"
import { summarizeToken, tokenOfFile, type TokenVerifyOptions, verifyTimestampToken } from "../Verify/Token.js"
import { parseKeysDocument, parseOtsHeaders, summarize, verifyBundle, type VerifyOptions } from "../Verify/Verifier.js"
import { parseTimeStampToken } from "../Platform/Tsa/Rfc3161.js"

/** An input that cannot be read or parsed (exit code 2). */
class InputError extends Error {}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const readText = (path: string, what: string): string => {
  try {
    return readFileSync(path, "utf8")
  } catch (e) {
    throw new InputError(`cannot read ${what} ${path}: ${message(e)}`)
  }
}

const parseJson = (text: string, what: string): unknown => {
  try {
    return JSON.parse(text) as unknown
  } catch (e) {
    throw new InputError(`${what} is not JSON: ${message(e)}`)
  }
}

const readJson = (path: string, what: string): unknown => parseJson(readText(path, what), `${what} ${path}`)

const parsed = <A>(what: string, f: () => A): A => {
  try {
    return f()
  } catch (e) {
    throw new InputError(`${what}: ${message(e)}`)
  }
}

/** SHA-256 of a file, streamed (the data may be large). */
const hashFile = (path: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const h = createHash("sha256")
    createReadStream(path)
      .on("data", (chunk) => h.update(chunk))
      .on("error", (e) => reject(new InputError(`cannot read ${path}: ${e.message}`)))
      .on("end", () => resolve(h.digest("hex")))
  })

const TIMEOUT_MS = 15_000

/** The instance's published trust; any failure is unreadable input (exit 2). */
const fromServer = (server: string) => publishedTrust(server).catch((e: unknown) => Promise.reject(new InputError(`--server: ${message(e)}`)))

/** SHA-256, SHA-384 and SHA-512 of a file in one streamed read (a token's imprint may be any of them). */
const hashFileAll = (path: string): Promise<Record<ImprintAlgorithm, string>> =>
  new Promise((resolve, reject) => {
    const hashes = { "SHA-256": createHash("sha256"), "SHA-384": createHash("sha384"), "SHA-512": createHash("sha512") }
    createReadStream(path)
      .on("data", (chunk) => Object.values(hashes).forEach((h) => h.update(chunk)))
      .on("error", (e) => reject(new InputError(`cannot read ${path}: ${e.message}`)))
      .on("end", () => resolve({ "SHA-256": hashes["SHA-256"].digest("hex"), "SHA-384": hashes["SHA-384"].digest("hex"), "SHA-512": hashes["SHA-512"].digest("hex") }))
  })

interface VerifyArgs {
  readonly bundle: Option.Option<string>
  readonly tsr: Option.Option<string>
  readonly file: Option.Option<string>
  readonly hash: Option.Option<string>
  readonly otsHeaders: Option.Option<string>
  readonly tsaCa: Option.Option<string>
  readonly keys: Option.Option<string>
  readonly bitcoinSource: Option.Option<string>
  readonly server: Option.Option<string>
  readonly hmacKey: Option.Option<string>
}

type Labels = { -readonly [K in keyof NonNullable<VerifyOptions["trustLabels"]>]?: string }

const readPem = (path: string): string => {
  const pem = readText(path, "--tsa-ca")
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new InputError(`--tsa-ca ${path} holds no PEM certificate`)
  return pem
}

/** The trust inputs given as files and sources for T0 and T2: --ots-headers, --keys, --bitcoin-source. */
const readTrustFiles = (args: VerifyArgs, labels: Labels): Pick<VerifyOptions, "otsHeaders" | "keys" | "bitcoinSources" | "fetch"> => {
  const options: { -readonly [K in keyof VerifyOptions]?: VerifyOptions[K] } = {}
  if (Option.isSome(args.otsHeaders)) {
    const path = args.otsHeaders.value
    const doc = readJson(path, "--ots-headers")
    options.otsHeaders = parsed(`--ots-headers ${path}`, () => parseOtsHeaders(doc))
    labels.otsHeaders = `--ots-headers ${path}`
  }
  if (Option.isSome(args.keys)) {
    const path = args.keys.value
    const doc = readJson(path, "--keys")
    options.keys = parsed(`--keys ${path}`, () => parseKeysDocument(doc))
    labels.keys = `--keys ${path}`
  }
  if (Option.isSome(args.bitcoinSource)) {
    const sources = args.bitcoinSource.value.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
    for (const s of sources) {
      if (!/^https?:\/\//.test(s)) throw new InputError(`--bitcoin-source ${s} is not an http(s) URL`)
    }
    if (sources.length === 0) throw new InputError("--bitcoin-source names no URL")
    options.bitcoinSources = sources
    options.fetch = (url) => fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) })
  }
  return options
}

/** GET `url` from the instance: its body, or null on 404; anything else unreadable input. */
const getFromServer = async (url: string): Promise<string | null> => {
  let res: Response
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) })
  } catch (e) {
    throw new InputError(`--server: cannot reach ${url}: ${fetchFailure(e)}`)
  }
  const text = await res.text()
  if (res.status === 404) return null
  if (!res.ok) throw new InputError(`--server: GET ${url} answered HTTP ${res.status}`)
  return text
}

/** The token of `--tsr FILE` and the options it is verified with. */
const loadTokenInputs = async (args: VerifyArgs, tsrPath: string): Promise<{ token: Uint8Array; options: TokenVerifyOptions }> => {
  if (Option.isSome(args.file) && Option.isSome(args.hash)) throw new InputError("give either --file or --hash, not both")
  if (Option.isSome(args.hmacKey)) throw new InputError("--hmac-key applies to receipts of attestd stamp, not to --tsr")
  let bytes: Uint8Array
  try {
    bytes = new Uint8Array(readFileSync(tsrPath))
  } catch (e) {
    throw new InputError(`cannot read --tsr ${tsrPath}: ${message(e)}`)
  }
  const token = parsed(`--tsr ${tsrPath}`, () => tokenOfFile(bytes))
  const options: { -readonly [K in keyof TokenVerifyOptions]?: TokenVerifyOptions[K] } = {}
  if (Option.isSome(args.hash)) {
    const hash = args.hash.value.trim().toLowerCase()
    if (!/^(?:[0-9a-f]{64}|[0-9a-f]{96}|[0-9a-f]{128})$/.test(hash)) throw new InputError("--hash must be a SHA-256, SHA-384 or SHA-512 in hex (64, 96 or 128 characters)")
    options.hash = hash
  }
  if (Option.isSome(args.file)) options.dataDigests = await hashFileAll(args.file.value)
  if (Option.isSome(args.tsaCa)) {
    options.tsaChainPem = readPem(args.tsaCa.value)
    options.tsaChainLabel = `--tsa-ca ${args.tsaCa.value}`
  }
  const labels: Labels = {}
  const evidenceOptions: { -readonly [K in keyof VerifyOptions]?: VerifyOptions[K] } = {}
  if (Option.isSome(args.server)) {
    const origin = parsed("--server", () => originOf(args.server.pipe(Option.getOrThrow)))
    if (options.tsaChainPem === undefined) {
      const url = `${origin}/v1/timestamp/certchain`
      const chain = await getFromServer(url)
      if (chain === null) throw new InputError(`--server: ${url} answered HTTP 404 (time-stamping is off there)`)
      if (!chain.includes("-----BEGIN CERTIFICATE-----")) throw new InputError(`--server: ${url} holds no PEM certificate`)
      options.tsaChainPem = chain
      options.tsaChainLabel = `TSA chain published by ${origin}`
    }
    const { trustLabels, ...published } = await fromServer(origin)
    Object.assign(labels, trustLabels)
    Object.assign(evidenceOptions, published)
    let serial: string | undefined
    try {
      serial = BigInt(parseTimeStampToken(token).serial_number).toString(16)
    } catch {
      // an unreadable token has no evidence to fetch: its own check says why
    }
    if (serial !== undefined) {
      const url = `${origin}/v1/timestamp/${serial}/evidence`
      const text = await getFromServer(url)
      if (text === null) options.evidenceError = `${origin} has no time-stamp token with serial ${serial} (GET ${url}: HTTP 404)`
      else options.evidence = parseJson(text, `--server: ${url}`)
    }
  }
  Object.assign(evidenceOptions, readTrustFiles(args, labels))
  evidenceOptions.trustLabels = labels
  options.evidenceOptions = evidenceOptions
  return { token, options }
}

/** `envUrl`: ATTESTD_URL ("" when unset), the server a stamped FILE is checked against by default. */
const loadInputs = async (args: VerifyArgs, bundlePath: string, envUrl: string): Promise<{ bundle: unknown; options: VerifyOptions; notes: Array<string> }> => {
  if (Option.isSome(args.file) && Option.isSome(args.hash)) throw new InputError("give either --file or --hash, not both")
  // `attestd verify FILE`: the receipt of `attestd stamp` beside it names what FILE must match.
  const besideReceipt = `${bundlePath}${RECEIPT_SUFFIX}`
  const fileMode = Option.isNone(args.file) && Option.isNone(args.hash) && !bundlePath.endsWith(RECEIPT_SUFFIX) && existsSync(besideReceipt)
  const dataFile = fileMode ? Option.some(bundlePath) : args.file
  let doc: unknown
  try {
    doc = readJson(fileMode ? besideReceipt : bundlePath, fileMode ? "receipt" : "bundle")
  } catch (e) {
    if (e instanceof InputError && !fileMode && !bundlePath.endsWith(".json")) {
      throw new InputError(`${e.message} (nor is there a receipt ${besideReceipt} beside it)`)
    }
    throw e
  }
  const receipt = parsed(fileMode ? `receipt ${besideReceipt}` : `bundle ${bundlePath}`, () => parseReceipt(doc))
  const bundle = receipt.hmac === null ? doc : receipt.evidence
  const notes: Array<string> = []
  const options: { -readonly [K in keyof VerifyOptions]?: VerifyOptions[K] } = {}
  const labels: { -readonly [K in keyof NonNullable<VerifyOptions["trustLabels"]>]?: string } = {}
  const server = fileMode && Option.isNone(args.server) && envUrl !== ""
    ? Option.some(envUrl)
    : args.server
  if (Option.isSome(server)) {
    const s = await fromServer(server.value)
    const { trustLabels, ...rest } = s
    Object.assign(labels, trustLabels)
    Object.assign(options, rest)
  }
  if (Option.isSome(args.hash)) {
    const hash = args.hash.value.trim().toLowerCase()
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new InputError("--hash must be a SHA-256 as 64 hex characters")
    options.hash = hash
  }
  if (Option.isSome(args.hmacKey) && receipt.hmac === null) throw new InputError("--hmac-key given, but the receipt records no HMAC (a plain stamp)")
  if (Option.isSome(dataFile)) {
    const sha = await hashFile(dataFile.value)
    if (receipt.hmac === null) options.dataSha256 = sha
    else {
      if (Option.isNone(args.hmacKey)) {
        throw new InputError("the receipt was stamped with --hmac-key (it attests HMAC-SHA256 of the file's SHA-256): give the same --hmac-key")
      }
      const key = parsed("--hmac-key", () => parseHmacKey(Option.getOrThrow(args.hmacKey)))
      if ((await hmacKeyId(key)) !== receipt.hmac.key_id) {
        throw new InputError(`--hmac-key is not the key this receipt was stamped with (its key_id is ${receipt.hmac.key_id})`)
      }
      options.hash = await hmacOfDigest(key, sha)
      notes.push(`the file's SHA-256 was keyed with --hmac-key (HMAC-SHA256, key_id ${receipt.hmac.key_id}) as the receipt records; the given hash below is that HMAC`)
    }
  }
  if (Option.isSome(args.tsaCa)) {
    options.tsaCaPem = readPem(args.tsaCa.value)
    labels.tsa = `--tsa-ca ${args.tsaCa.value}`
  }
  Object.assign(options, readTrustFiles(args, labels))
  options.trustLabels = labels
  return { bundle, options, notes }
}

export const exitCodeOf = (verdict: "verified" | "failed" | "partial"): number => (verdict === "verified" ? 0 : verdict === "failed" ? 1 : 3)

/** Reads the inputs (an unreadable one is exit 2), checks, prints the report and its summary, sets the exit code. */
const report = <I, R extends { readonly verdict: "verified" | "failed" | "partial" }>(
  load: () => Promise<I>,
  check: (inputs: I) => Promise<R>,
  summary: (report: R) => string
) =>
  Effect.gen(function*() {
    const inputs = yield* Effect.tryPromise({
      try: load,
      catch: (e) => (e instanceof InputError ? e : new InputError(message(e)))
    }).pipe(Effect.either)
    if (inputs._tag === "Left") {
      yield* Console.error(`attestd verify: ${shown(inputs.left.message)}`)
      yield* Console.log(jsonForTerminal({ ok: false, error: inputs.left.message }))
      return yield* Effect.sync(() => {
        process.exitCode = 2
      })
    }
    const checked = yield* Effect.promise(() => check(inputs.right))
    yield* Console.log(jsonForTerminal(checked, 2))
    yield* Console.error(summary(checked))
    yield* Effect.sync(() => {
      process.exitCode = exitCodeOf(checked.verdict)
    })
  })

const run = (args: VerifyArgs) =>
  Effect.gen(function*() {
    const envUrl = yield* Config.string("ATTESTD_URL").pipe(Config.withDefault(""), Effect.orDie)
    if (Option.isSome(args.tsr)) {
      const tsr = args.tsr.value
      return yield* report(
        () => Option.isSome(args.bundle) ? Promise.reject(new InputError("give either BUNDLE.json or --tsr FILE, not both")) : loadTokenInputs(args, tsr),
        ({ token, options }) => verifyTimestampToken(token, options),
        summarizeToken
      )
    }
    return yield* report(
      () => Option.match(args.bundle, {
        onNone: () => Promise.reject(new InputError("Missing argument BUNDLE.json (or --tsr FILE for a time-stamp token)")),
        onSome: (bundle) => loadInputs(args, bundle, envUrl)
      }),
      async (inputs) => {
        const checked = await verifyBundle(inputs.bundle, inputs.options)
        return inputs.notes.length === 0 ? checked : { ...checked, notes: [...inputs.notes, ...checked.notes] }
      },
      summarize
    )
  })

export const verifyCommand = Command.make(
  "verify",
  {
    bundle: Args.file({ name: "BUNDLE.json" }).pipe(
      Args.withDescription(
        "evidence bundle (GET /v1/attestation/{id}/evidence) or receipt of attestd stamp; or a stamped FILE whose FILE.attestd.json lies beside it"
      ),
      Args.optional
    ),
    tsr: Options.file("tsr").pipe(
      Options.withDescription(
        "an RFC 3161 time-stamp reply or token (DER) to verify instead of a bundle: CMS signature, ESSCertIDv2, the chain at genTime " +
          "(--tsa-ca, or the chain --server publishes), the imprint (--file or --hash) and, with --server, the token's own evidence"
      ),
      Options.optional
    ),
    file: Options.file("file").pipe(
      Options.withDescription("the attested data: its SHA-256 must equal the bundle's hash_hex (with --tsr: its hash, the token's imprint)"),
      Options.optional
    ),
    hash: Options.text("hash").pipe(
      Options.withDescription("a SHA-256 (64 hex) that must equal the bundle's hash_hex (with --tsr: the token's imprint, SHA-256/384/512)"),
      Options.optional
    ),
    otsHeaders: Options.file("ots-headers").pipe(
      Options.withDescription(
        "JSON object: block height (string) → block header merkle root hex, in the byte order the OTS operations produce; " +
          "a trust input for T2"
      ),
      Options.optional
    ),
    tsaCa: Options.file("tsa-ca").pipe(
      Options.withDescription("PEM trust anchors of the TSA (the trust input for T1; with --tsr, the token's TSA chain); the chain is validated at genTime"),
      Options.optional
    ),
    keys: Options.file("keys").pipe(
      Options.withDescription("trusted signing keys (JSON of GET /v1/keys, or one JWK): the trust input for T0"),
      Options.optional
    ),
    bitcoinSource: Options.text("bitcoin-source").pipe(
      Options.withDescription("Esplora-compatible API base URL(s), comma-separated: confirm the block header's place in the chain; all must agree"),
      Options.optional
    ),
    server: Options.text("server").pipe(
      Options.withDescription(
        "an attestd instance: fetch its published keys, TSA anchors (and, in demo mode, simulated chain headers) once; for a stamped FILE it defaults to ATTESTD_URL"
      ),
      Options.optional
    ),
    hmacKey: Options.text("hmac-key").pipe(
      Options.withDescription("the hex key a receipt was stamped with (attestd stamp --hmac-key): the file's SHA-256 is keyed with it before comparing"),
      Options.optional
    )
  },
  run
).pipe(Command.withDescription("verify an evidence bundle or (--tsr) an RFC 3161 time-stamp token; exit 0 verified, 1 failed, 2 unreadable input, 3 partial (a tier not anchored in a trust input)"))
