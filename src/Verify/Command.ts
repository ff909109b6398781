/**
 * `attestd verify BUNDLE.json [--file DATA | --hash HEX] [--ots-headers FILE] [--tsa-ca FILE] [--keys FILE]`
 * (CONTRACT §1, §5): offline verification of an evidence bundle.
 *
 * Prints the report (src/Verify/Verifier.ts) as JSON on stdout and a short
 * human summary on stderr. Exit code: 0 when every present tier checks (a
 * Bitcoin header check that could not be performed is not a failure), 1 when
 * something failed, 2 when an input cannot be read or parsed (then stdout is
 * `{"ok": false, "error": "…"}`).
 */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import { createHash } from "node:crypto"
import { createReadStream, readFileSync } from "node:fs"
import { parseKeysDocument, parseOtsHeaders, summarize, verifyBundle, type VerifyOptions } from "./Verifier.js"

/** An input that cannot be read or parsed (exit code 2). */
class InputError extends Error {}

const readText = (path: string, what: string): string => {
  try {
    return readFileSync(path, "utf8")
  } catch (e) {
    throw new InputError(`cannot read ${what} ${path}: ${e instanceof Error ? e.message : String(e)}`)
  }
}

const readJson = (path: string, what: string): unknown => {
  const text = readText(path, what)
  try {
    return JSON.parse(text) as unknown
  } catch (e) {
    throw new InputError(`${what} ${path} is not JSON: ${e instanceof Error ? e.message : String(e)}`)
  }
}

const parsed = <A>(what: string, path: string, f: () => A): A => {
  try {
    return f()
  } catch (e) {
    throw new InputError(`${what} ${path}: ${e instanceof Error ? e.message : String(e)}`)
  }
}

/** SHA-256 of a file, streamed (the data may be large). */
const hashFile = (path: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const h = createHash("sha256")
    createReadStream(path)
      .on("data", (chunk) => h.update(chunk))
      .on("error", (e) => reject(new InputError(`cannot read --file ${path}: ${e.message}`)))
      .on("end", () => resolve(h.digest("hex")))
  })

interface VerifyArgs {
  readonly bundle: string
  readonly file: Option.Option<string>
  readonly hash: Option.Option<string>
  readonly otsHeaders: Option.Option<string>
  readonly tsaCa: Option.Option<string>
  readonly keys: Option.Option<string>
}

const loadInputs = async (args: VerifyArgs): Promise<{ bundle: unknown; options: VerifyOptions }> => {
  if (Option.isSome(args.file) && Option.isSome(args.hash)) throw new InputError("give either --file or --hash, not both")
  const bundle = readJson(args.bundle, "bundle")
  let options: VerifyOptions = {}
  if (Option.isSome(args.hash)) {
    const hash = args.hash.value.trim().toLowerCase()
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new InputError("--hash must be a SHA-256 as 64 hex characters")
    options = { ...options, hash }
  }
  if (Option.isSome(args.file)) options = { ...options, dataSha256: await hashFile(args.file.value) }
  if (Option.isSome(args.otsHeaders)) {
    const path = args.otsHeaders.value
    const doc = readJson(path, "--ots-headers")
    options = { ...options, otsHeaders: parsed("--ots-headers", path, () => parseOtsHeaders(doc)) }
  }
  if (Option.isSome(args.tsaCa)) {
    const path = args.tsaCa.value
    const pem = readText(path, "--tsa-ca")
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new InputError(`--tsa-ca ${path} holds no PEM certificate`)
    options = { ...options, tsaCaPem: pem }
  }
  if (Option.isSome(args.keys)) {
    const path = args.keys.value
    const doc = readJson(path, "--keys")
    options = { ...options, keys: parsed("--keys", path, () => parseKeysDocument(doc)) }
  }
  return { bundle, options }
}

const run = (args: VerifyArgs) =>
  Effect.gen(function*() {
    const inputs = yield* Effect.tryPromise({
      try: () => loadInputs(args),
      catch: (e) => (e instanceof InputError ? e : new InputError(e instanceof Error ? e.message : String(e)))
    }).pipe(Effect.either)
    if (inputs._tag === "Left") {
      yield* Console.error(`attestd verify: ${inputs.left.message}`)
      yield* Console.log(JSON.stringify({ ok: false, error: inputs.left.message }))
      return yield* Effect.sync(() => {
        process.exitCode = 2
      })
    }
    const report = yield* Effect.promise(() => verifyBundle(inputs.right.bundle, inputs.right.options))
    yield* Console.log(JSON.stringify(report, null, 2))
    yield* Console.error(summarize(report))
    yield* Effect.sync(() => {
      process.exitCode = report.ok ? 0 : 1
    })
  })

export const verifyCommand = Command.make(
  "verify",
  {
    bundle: Args.file({ name: "BUNDLE.json" }).pipe(
      Args.withDescription("evidence bundle (GET /v1/attestation/{id}/evidence)")
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
          "without it the Bitcoin header check is NOT PERFORMED"
      ),
      Options.optional
    ),
    tsaCa: Options.file("tsa-ca").pipe(
      Options.withDescription("PEM trust anchors of the TSA; makes the certificate chain mandatory"),
      Options.optional
    ),
    keys: Options.file("keys").pipe(
      Options.withDescription("the server's signing keys (JSON of GET /v1/keys, or one JWK); default: the key in the bundle"),
      Options.optional
    )
  },
  run
).pipe(Command.withDescription("verify an evidence bundle offline; exit 0 only when every present tier checks"))
