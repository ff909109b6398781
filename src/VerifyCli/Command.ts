/**
 * `attestd verify BUNDLE.json [--file DATA | --hash HEX] [--keys FILE] [--tsa-ca FILE]
 *  [--ots-headers FILE] [--bitcoin-source URL,…] [--server URL] [--hmac-key HEX]` (CONTRACT §1, §5):
 * a thin shell over the portable verification core (src/Verify/Verifier.ts).
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
import { Args, Command, Options } from "@effect/cli"
import { Config, Console, Effect, Option } from "effect"
import { createHash } from "node:crypto"
import { createReadStream, readFileSync } from "node:fs"
import { existsSync } from "node:fs"
import { hmacKeyId, hmacOfDigest, parseHmacKey, parseReceipt, RECEIPT_SUFFIX } from "../Stamp/Receipt.js"
import { jsonForTerminal, shown } from "../Verify/Display.js"
import { publishedTrust } from "../Stamp/PublishedTrust.js"
import { parseKeysDocument, parseOtsHeaders, summarize, verifyBundle, type VerifyOptions } from "../Verify/Verifier.js"

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

interface VerifyArgs {
  readonly bundle: string
  readonly file: Option.Option<string>
  readonly hash: Option.Option<string>
  readonly otsHeaders: Option.Option<string>
  readonly tsaCa: Option.Option<string>
  readonly keys: Option.Option<string>
  readonly bitcoinSource: Option.Option<string>
  readonly server: Option.Option<string>
  readonly hmacKey: Option.Option<string>
}

/** `envUrl`: ATTESTD_URL ("" when unset), the server a stamped FILE is checked against by default. */
const loadInputs = async (args: VerifyArgs, envUrl: string): Promise<{ bundle: unknown; options: VerifyOptions; notes: Array<string> }> => {
  if (Option.isSome(args.file) && Option.isSome(args.hash)) throw new InputError("give either --file or --hash, not both")
  // `attestd verify FILE`: the receipt of `attestd stamp` beside it names what FILE must match.
  const besideReceipt = `${args.bundle}${RECEIPT_SUFFIX}`
  const fileMode = Option.isNone(args.file) && Option.isNone(args.hash) && !args.bundle.endsWith(RECEIPT_SUFFIX) && existsSync(besideReceipt)
  const dataFile = fileMode ? Option.some(args.bundle) : args.file
  let doc: unknown
  try {
    doc = readJson(fileMode ? besideReceipt : args.bundle, fileMode ? "receipt" : "bundle")
  } catch (e) {
    if (e instanceof InputError && !fileMode && !args.bundle.endsWith(".json")) {
      throw new InputError(`${e.message} (nor is there a receipt ${besideReceipt} beside it)`)
    }
    throw e
  }
  const receipt = parsed(fileMode ? `receipt ${besideReceipt}` : `bundle ${args.bundle}`, () => parseReceipt(doc))
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
  if (Option.isSome(args.otsHeaders)) {
    const path = args.otsHeaders.value
    const doc = readJson(path, "--ots-headers")
    options.otsHeaders = parsed(`--ots-headers ${path}`, () => parseOtsHeaders(doc))
    labels.otsHeaders = `--ots-headers ${path}`
  }
  if (Option.isSome(args.tsaCa)) {
    const path = args.tsaCa.value
    const pem = readText(path, "--tsa-ca")
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new InputError(`--tsa-ca ${path} holds no PEM certificate`)
    options.tsaCaPem = pem
    labels.tsa = `--tsa-ca ${path}`
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
  options.trustLabels = labels
  return { bundle, options, notes }
}

export const exitCodeOf = (verdict: "verified" | "failed" | "partial"): number => (verdict === "verified" ? 0 : verdict === "failed" ? 1 : 3)

const run = (args: VerifyArgs) =>
  Effect.gen(function*() {
    const envUrl = yield* Config.string("ATTESTD_URL").pipe(Config.withDefault(""), Effect.orDie)
    const inputs = yield* Effect.tryPromise({
      try: () => loadInputs(args, envUrl),
      catch: (e) => (e instanceof InputError ? e : new InputError(message(e)))
    }).pipe(Effect.either)
    if (inputs._tag === "Left") {
      yield* Console.error(`attestd verify: ${shown(inputs.left.message)}`)
      yield* Console.log(jsonForTerminal({ ok: false, error: inputs.left.message }))
      return yield* Effect.sync(() => {
        process.exitCode = 2
      })
    }
    const checked = yield* Effect.promise(() => verifyBundle(inputs.right.bundle, inputs.right.options))
    const report = inputs.right.notes.length === 0 ? checked : { ...checked, notes: [...inputs.right.notes, ...checked.notes] }
    yield* Console.log(jsonForTerminal(report, 2))
    yield* Console.error(summarize(report))
    yield* Effect.sync(() => {
      process.exitCode = exitCodeOf(report.verdict)
    })
  })

export const verifyCommand = Command.make(
  "verify",
  {
    bundle: Args.file({ name: "BUNDLE.json" }).pipe(
      Args.withDescription(
        "evidence bundle (GET /v1/attestation/{id}/evidence) or receipt of attestd stamp; or a stamped FILE whose FILE.attestd.json lies beside it"
      )
    ),
    file: Options.file("file").pipe(
      Options.withDescription("the attested data: its SHA-256 must equal the bundle's hash_hex"),
      Options.optional
    ),
    hash: Options.text("hash").pipe(
      Options.withDescription("a SHA-256 (64 hex) that must equal the bundle's hash_hex"),
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
      Options.withDescription("PEM trust anchors of the TSA (the trust input for T1); the chain is validated at genTime"),
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
).pipe(Command.withDescription("verify an evidence bundle; exit 0 verified, 1 failed, 2 unreadable input, 3 partial (a tier not anchored in a trust input)"))
