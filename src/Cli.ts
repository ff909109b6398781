/** The `attestd` command line (CONTRACT.md §1): every command. bin.ts runs it on the process's argv; tests run it in-process. */
import * as Args from "@effect/cli/Args"
import type * as CliApp from "@effect/cli/CliApp"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as Usage from "@effect/cli/Usage"
import * as ValidationError from "@effect/cli/ValidationError"
import { Console, ConfigError, ConfigProvider, Effect, Either, identity, Layer, Option, ParseResult, Schema } from "effect"
import { accessSync, constants, readFileSync, statSync } from "node:fs"
import { Brand } from "./Brand/Domain.js"
import { BrandRepo } from "./Brand/Repo.js"
import { formatMillis } from "./Domain/Time.js"
import { verifyCommand } from "./VerifyCli/Command.js"
import { stampCommand, upgradeCommand } from "./Stamp/Command.js"
import { listCommand } from "./Stamp/ListCommand.js"
import { ApiKeyRepo } from "./Auth/ApiKeyRepo.js"
import { KeyCacheRef } from "./Auth/KeyCache.js"
import { parseCidr } from "./Platform/ClientAddress.js"
import { isScope, SCOPES, type Scope } from "./Auth/Domain.js"
import { SERVICE_VERSION } from "./Domain/Version.js"
import { AppConfig, appConfig } from "./Platform/Config.js"
import { backup, restore } from "./Platform/Backup.js"
import { DatabaseLive, migrate } from "./Platform/Sql.js"
import { createKey, KeyCustodyLive, rotateKey } from "./Platform/Signer.js"
import { encryptKeyFiles, readPassphrase } from "./Platform/Keys/FileKeys.js"
import { SUBJECT_ATTRIBUTE_NAMES } from "./Platform/Tsa/CertificationRequest.js"
import { formatName } from "./Platform/Tsa/Rfc3161.js"
import { csrSubject, tsaCsr } from "./Timestamping/KeyCertification.js"

/**
 * `serve` (and `worker`) flags: every variable of Platform/Config.ts, each the same
 * setting as its environment variable (CONTRACT §1); a flag wins over the variable.
 */
const SETTINGS = {
  port: ["PORT", "listen port (default 8080; 0: any free port)"],
  host: ["HOST", "listen address (default 127.0.0.1)"],
  "database-url": ["DATABASE_URL", "sqlite:PATH (default sqlite:DATA_DIR/attestd.db) or postgres://…"],
  "pg-read-url": ["ATTESTD_PG_READ_URL", "a Postgres replica for the public reads; a miss there is read again on the primary (default: none)"],
  mode: ["ATTESTD_MODE", "demo (embedded TSA and simulated calendar) or production (default demo)"],
  env: ["ATTESTD_ENV", "the server's environment, test or production; a key restricted to the other gets 403"],
  "tsa-url": ["ATTESTD_TSA_URL", "RFC 3161 TSA URLs, comma-separated, tried in order"],
  "tsa-ca-file": ["ATTESTD_TSA_CA_FILE", "PEM trust anchors every TSA reply is validated against"],
  "ots-calendars": ["ATTESTD_OTS_CALENDARS", "OpenTimestamps calendar URLs, comma-separated"],
  "bitcoin-sources": ["ATTESTD_BITCOIN_SOURCES", "Esplora-compatible API base URLs, comma-separated: confirm Bitcoin block headers"],
  "seal-interval": ["ATTESTD_SEAL_INTERVAL", "T1 batch window (default 60s)"],
  "anchor-interval": ["ATTESTD_ANCHOR_INTERVAL", "T2 daily-root window (default 24h)"],
  "ots-upgrade-interval": ["ATTESTD_OTS_UPGRADE_INTERVAL", "how often pending OTS proofs are asked for upgrades (default 10m)"],
  "webhook-retry-delays": ["ATTESTD_WEBHOOK_RETRY_DELAYS", "webhook retry schedule (default 1m,5m,15m)"],
  "webhook-ports": ["ATTESTD_WEBHOOK_PORTS", "ports webhook URLs may use, comma-separated"],
  "data-dir": ["ATTESTD_DATA_DIR", "signing keys, demo TSA certificate, SQLite file (default ./data)"],
  signer: ["ATTESTD_SIGNER", "where the signing keys live: file (key files in the data dir, default) or pkcs11 (a PKCS#11 token)"],
  "key-passphrase-file": ["ATTESTD_KEY_PASSPHRASE_FILE", "file holding the passphrase that encrypts the key files (signer file)"],
  "pkcs11-module": ["ATTESTD_PKCS11_MODULE", "the PKCS#11 module's shared library (signer pkcs11)"],
  "pkcs11-token": ["ATTESTD_PKCS11_TOKEN", "the PKCS#11 token's label (signer pkcs11)"],
  "pkcs11-pin-file": ["ATTESTD_PKCS11_PIN_FILE", "file holding the token's user PIN (signer pkcs11)"],
  "pkcs11-workers": ["ATTESTD_PKCS11_WORKERS", "threads that sign with the token, 1..64 (signer pkcs11, default 2)"],
  "demo-confirm-delay": ["ATTESTD_DEMO_CONFIRM_DELAY", "demo calendar: delay before a simulated Bitcoin confirmation (default 60s)"],
  "trust-proxy": ["ATTESTD_TRUST_PROXY", "trusted proxy hops (a number) or the proxies' CIDRs, for X-Forwarded-For"],
  "public-rate-limit": ["ATTESTD_PUBLIC_RATE_LIMIT", "requests per minute per client address on public endpoints; 0 = off"],
  "default-rate-limit": ["ATTESTD_DEFAULT_RATE_LIMIT", "requests per minute of a key without its own rate limit (default 1000)"],
  "scan-max-hashes": ["ATTESTD_SCAN_MAX_HASHES", "largest scan (default 50000)"],
  "metrics-port": ["ATTESTD_METRICS_PORT", "serve Prometheus metrics on this port (default: none)"],
  "cors-origins": ["ATTESTD_CORS_ORIGINS", "origins whose browser pages may call keyed routes, comma-separated (default: none)"],
  "ntp-servers": ["ATTESTD_NTP_SERVERS", "SNTP servers (host[:port], comma-separated) that discipline the time-stamping clock (default: none, unmonitored)"],
  "ntp-interval": ["ATTESTD_NTP_INTERVAL", "how often the NTP servers are asked (default 64s)"],
  "clock-tolerance": ["ATTESTD_CLOCK_TOLERANCE", "largest clock error time-stamp tokens are issued with, their accuracy (default 1s)"],
  "pg-direct-url": ["ATTESTD_PG_DIRECT_URL", "a postgres:// URL past any connection pooler, for LISTEN (key revocations at once)"],
  "key-cache-ttl": ["ATTESTD_KEY_CACHE_TTL", "longest use of a cached API key without a lookup (default 2s)"],
  "shutdown-timeout": ["ATTESTD_SHUTDOWN_TIMEOUT", "how long a shutdown waits for requests in flight (default 10s)"],
  "request-timeout": ["ATTESTD_REQUEST_TIMEOUT", "longest time to receive a request (default 30s)"],
  "headers-timeout": ["ATTESTD_HEADERS_TIMEOUT", "longest time to receive a request's headers (default 10s)"],
  "keep-alive-timeout": ["ATTESTD_KEEP_ALIVE_TIMEOUT", "idle keep-alive connection timeout (default 65s)"],
  "max-connections": ["ATTESTD_MAX_CONNECTIONS", "open connections at most; 0 = no limit (default 4096)"],
  "max-connections-per-address": ["ATTESTD_MAX_CONNECTIONS_PER_ADDRESS", "open connections per client address at most; 0 = no limit (default 256)"],
  timestamping: ["ATTESTD_TIMESTAMPING", "the RFC 3161 time-stamping authority, on or off (default on in demo, off in production)"],
  "tsa-access": ["ATTESTD_TSA_ACCESS", "who may ask for time-stamp tokens: public or key (scope timestamp) (default public)"],
  "tsa-policy": ["ATTESTD_TSA_POLICY", "policy OID of tokens whose request names none (default 2.999.1 in demo)"],
  "tsa-policies": ["ATTESTD_TSA_POLICIES", "further policy OIDs a request may name, comma-separated"],
  "tsa-cert-chain": ["ATTESTD_TSA_CERT_CHAIN", "PEM chain of the TSA certificate, TSA certificate first (default: a demo CA)"]
} as const satisfies Record<string, readonly [string, string]>

const settingOptions = Options.all(
  Object.fromEntries(
    Object.entries(SETTINGS).map(([flag, [env, meaning]]) => [
      flag,
      Options.text(flag).pipe(Options.withDescription(`${meaning}; same as ${env}`), Options.optional)
    ])
  ) as Record<keyof typeof SETTINGS, Options.Options<Option.Option<string>>>
)

const withSettings = (settings: Record<string, Option.Option<string>>) => {
  const map = new Map<string, string>()
  for (const [flag, value] of Object.entries(settings)) {
    if (Option.isSome(value)) map.set(SETTINGS[flag as keyof typeof SETTINGS][0], value.value)
  }
  return ConfigProvider.fromMap(map).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))
}

const loadConfig = appConfig

const runServer = (settings: Record<string, Option.Option<string>>, options: { http: boolean; workers: boolean; migrate: boolean }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    yield* Effect.logInfo(`attestd ${SERVICE_VERSION} (${config.mode} mode, ${config.databaseUrl.split(":")[0]})`)
    // The server is loaded only by the commands that run it, so every other command starts
    // without evaluating the HTTP stack (issue 14: commands start in under 0.5 s).
    const { AppLive, ServerLive } = yield* Effect.promise(() => import("./main.js"))
    return yield* Layer.launch(options.http ? ServerLive(config, options) : AppLive(config, options))
  }).pipe(Effect.withConfigProvider(withSettings(settings)))

const serve = Command.make(
  "serve",
  {
    settings: settingOptions,
    noWorkers: Options.boolean("no-workers").pipe(Options.withDescription("API only, no background workers")),
    noMigrate: Options.boolean("no-migrate").pipe(Options.withDescription("do not apply migrations on start"))
  },
  ({ noMigrate, noWorkers, settings }) => runServer(settings, { http: true, workers: !noWorkers, migrate: !noMigrate })
).pipe(Command.withDescription("start the HTTP API and the background workers"))

const worker = Command.make(
  "worker",
  { settings: settingOptions, noMigrate: Options.boolean("no-migrate").pipe(Options.withDescription("do not apply migrations on start")) },
  ({ noMigrate, settings }) => runServer(settings, { http: false, workers: true, migrate: !noMigrate })
).pipe(Command.withDescription("background workers only (sealer, anchorer, OTS upgrader, webhook dispatcher)"))

/** Runs `effect` against the configured, migrated database. */
const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    return yield* effect.pipe(
      Effect.provide(ApiKeyRepo.Default.pipe(Layer.provide(KeyCacheRef.none), Layer.provideMerge(DatabaseLive(config)))),
      Effect.provideService(AppConfig, config)
    )
  })

const migrateCommand = Command.make("migrate", {}, () =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const applied = yield* migrate.pipe(Effect.provide(DatabaseLive(config, { migrate: false })))
    yield* Console.log(JSON.stringify({ applied: applied.map(([id, name]) => `${id}_${name}`) }))
  })).pipe(Command.withDescription("apply database migrations"))

/** A failure already reported to the user (one line on stderr); exit 2 when it is a usage error, else 1. */
export class Reported extends Error {
  constructor(message: string, readonly usage: boolean = false) {
    super(message)
  }
}

/** Prints `message` as one line and fails with exit 1. */
const fail = (message: string) => Effect.zipRight(Console.error(message), Effect.fail(new Reported(message)))

/** Prints `message` as one line and fails with exit 2: the invocation was wrong. */
const usage = (message: string) => Effect.zipRight(Console.error(message), Effect.fail(new Reported(message, true)))

const keysCreate = Command.make(
  "create",
  {
    label: Options.text("label").pipe(Options.withDescription("a name for the key, shown by keys list")),
    scopes: Options.text("scopes").pipe(
      Options.withDescription(`comma-separated scopes the key holds (default: all): ${SCOPES.join(", ")}; a :write scope implies its :read`),
      Options.optional
    ),
    org: Options.text("org").pipe(Options.withDescription("organisation id: keys of one org share its inventory and derived lists"), Options.optional),
    env: Options.choice("env", ["test", "production"]).pipe(
      Options.withDescription("restrict the key to a server of this environment (ATTESTD_ENV); the secret starts atk_test_ or atk_live_"),
      Options.optional
    ),
    allowIp: Options.text("allow-ip").pipe(Options.withDescription("accept the key only from this IP address or CIDR; repeat for several"), Options.repeated),
    rateLimit: Options.integer("rate-limit").pipe(Options.withDescription("requests per minute for this key (default: ATTESTD_DEFAULT_RATE_LIMIT)"), Options.optional),
    monthlyQuota: Options.integer("monthly-quota").pipe(Options.withDescription("attestations per calendar month (UTC); 0 = none allowed"), Options.optional)
  },
  (o) =>
    Effect.gen(function*() {
      const scopes = Option.map(o.scopes, (s) => s.split(",").map((x) => x.trim()).filter((x) => x.length > 0))
      if (Option.isSome(scopes)) {
        if (scopes.value.length === 0) return yield* usage(`--scopes names no scope; give one or more of: ${SCOPES.join(", ")} (or leave --scopes out for all)`)
        const bad = scopes.value.filter((s) => !isScope(s))
        if (bad.length > 0) return yield* usage(`unknown scope(s): ${bad.join(", ")}; known: ${SCOPES.join(", ")}`)
      }
      const badIps = o.allowIp.filter((c) => parseCidr(c) === undefined)
      if (badIps.length > 0) return yield* usage(`not an IP address or CIDR: ${badIps.join(", ")}`)
      if (Option.isSome(o.rateLimit) && o.rateLimit.value < 1) return yield* usage("--rate-limit must be at least 1")
      if (Option.isSome(o.monthlyQuota) && o.monthlyQuota.value < 0) return yield* usage("--monthly-quota must be >= 0")
      const env = Option.getOrNull(o.env) as "test" | "production" | null
      const created = yield* withDatabase(Effect.flatMap(ApiKeyRepo, (repo) =>
        repo.create({
          label: o.label,
          scopes: Option.getOrNull(scopes) as Array<Scope> | null,
          orgId: Option.getOrNull(o.org),
          env,
          allowIps: o.allowIp.length > 0 ? o.allowIp : null,
          rateLimit: Option.getOrNull(o.rateLimit),
          monthlyQuota: Option.getOrNull(o.monthlyQuota)
        })))
      yield* Console.log(JSON.stringify({
        id: created.id,
        key: created.secret,
        label: o.label,
        scopes: Option.getOrElse(scopes, () => [...SCOPES]),
        org_id: Option.getOrNull(o.org),
        env,
        allow_ips: o.allowIp,
        rate_limit: Option.getOrNull(o.rateLimit),
        monthly_quota: Option.getOrNull(o.monthlyQuota),
        created_at: created.createdAt
      }))
    })
).pipe(Command.withDescription("create an API key; prints it once"))

const keysList = Command.make("list", {}, () =>
  Effect.gen(function*() {
    const keys = yield* withDatabase(Effect.flatMap(ApiKeyRepo, (repo) => repo.list))
    yield* Console.log(JSON.stringify({
      keys: keys.map((k) => ({
        id: k.id,
        label: k.label,
        scopes: k.scopes ?? [...SCOPES],
        org_id: k.orgId,
        env: k.env,
        allow_ips: k.allowIps ?? [],
        rate_limit: k.rateLimit,
        monthly_quota: k.monthlyQuota,
        created_at: k.createdAt,
        revoked_at: k.revokedAt
      }))
    }))
  })).pipe(Command.withDescription("list API keys (never prints secrets)"))

const keysRevoke = Command.make("revoke", { id: Args.text({ name: "ID" }).pipe(Args.withDescription("the key's id (key_…), as keys list shows it")) }, ({ id }) =>
  Effect.gen(function*() {
    const revoked = yield* withDatabase(Effect.flatMap(ApiKeyRepo, (repo) => repo.revoke(id)))
    if (!revoked) return yield* fail(`no active key ${id}`)
    yield* Console.log(JSON.stringify({ id, revoked: true }))
  })).pipe(Command.withDescription("revoke an API key"))

const keys = Command.make("keys").pipe(Command.withDescription("API keys: create, list, revoke"), Command.withSubcommands([keysCreate, keysList, keysRevoke]))

/** Runs `effect` with the configured key custody and database; `pkcs11` forces ATTESTD_SIGNER=pkcs11. */
const withKeyCustody = <A, E, R>(effect: Effect.Effect<A, E, R>, pkcs11: boolean) =>
  withDatabase(Effect.provide(effect, KeyCustodyLive)).pipe(
    pkcs11
      ? Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["ATTESTD_SIGNER", "pkcs11"]])).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv())))
      : identity
  )

const tsaOption = Options.boolean("tsa").pipe(Options.withDescription(
  "the time-stamping authority's key instead of a T0 key (every instance signs with a rotated one within 2 s of its certificate: at once in demo, once ATTESTD_TSA_CERT_CHAIN certifies it in production)"
))

const subjectOption = Options.text("subject").pipe(
  Options.withDescription(
    `the subject to certify, RFC 4514: "CN=Example TSA,O=Example,C=DE" (${SUBJECT_ATTRIBUTE_NAMES.join(", ")}); default: the subject of the TSA certificate in ATTESTD_TSA_CERT_CHAIN`
  ),
  Options.optional
)

const rotate = Command.make("rotate", { tsa: tsaOption, subject: subjectOption }, ({ subject, tsa }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const certified = tsa && Option.isSome(config.timestamping.certChainFile)
    if (Option.isSome(subject) && !certified) {
      return yield* usage("--subject names the subject of the new TSA key's certification request: it needs --tsa and ATTESTD_TSA_CERT_CHAIN (a demo TSA certifies its own key)")
    }
    // the request's subject first: a key the CA cannot be asked to certify is not made
    const name = certified ? yield* Either.match(csrSubject(subject, config), { onLeft: usage, onRight: Effect.succeed }) : undefined
    const rotated = yield* withKeyCustody(rotateKey(tsa ? "tsa" : "t0"), false).pipe(Effect.catchTag("KeyCustodyError", (e) => fail(e.message)))
    if (name === undefined) return yield* Console.log(JSON.stringify(rotated))
    const request = yield* withKeyCustody(tsaCsr(Option.some(rotated.kid), name), false).pipe(Effect.either)
    if (Either.isLeft(request)) {
      yield* Console.log(JSON.stringify(rotated))
      return yield* fail(`the TSA key ${rotated.kid} was made, but not its certification request (${messageOf(request.left)}): attestd signing-keys csr --tsa --kid ${rotated.kid}`)
    }
    yield* Console.log(JSON.stringify({ ...rotated, csr: request.right.pem }))
    yield* Console.error(
      `the previous TSA key signs on until ATTESTD_TSA_CERT_CHAIN certifies ${rotated.kid}: have the certification request ("csr") certified by your CA and replace that file with the new chain; every instance then switches within one poll and retires the previous key`
    )
  })).pipe(Command.withDescription(
    "add a new signing key (in the token with ATTESTD_SIGNER=pkcs11), active now; the previous key retires 10 s later; prints {kid, activated_at}. With --tsa and ATTESTD_TSA_CERT_CHAIN the previous TSA key signs on until that chain certifies the new one, and the JSON carries the new key's certification request (\"csr\", PEM)"
  ))

const csr = Command.make(
  "csr",
  {
    tsa: Options.boolean("tsa").pipe(Options.withDescription("the time-stamping authority's key (required: only it is certified; T0 keys are published as JWKs)")),
    subject: subjectOption,
    kid: Options.text("kid").pipe(Options.withDescription("the TSA key to certify (default: the newest TSA key held that is not retired)"), Options.optional)
  },
  ({ kid, subject, tsa }) =>
    Effect.gen(function*() {
      if (!tsa) return yield* usage("signing-keys csr needs --tsa: only the time-stamping authority's key is certified (T0 keys are published as JWKs at /v1/keys)")
      const config = yield* loadConfig
      const name = yield* Either.match(csrSubject(subject, config), { onLeft: usage, onRight: Effect.succeed })
      const request = yield* withKeyCustody(tsaCsr(kid, name), false).pipe(
        Effect.catchTags({ KeyCustodyError: (e) => fail(e.message), CsrRefused: (e) => fail(e.message) })
      )
      yield* Console.log(request.pem.trimEnd())
      yield* Console.error(`certification request of the TSA key ${request.kid}, subject ${formatName(name)}`)
    })
).pipe(Command.withDescription(
  "print a PKCS#10 certification request (PEM) for a TSA key in custody, signed by the key where it lives, asking for the critical timeStamping extendedKeyUsage: give it to your CA and put the chain in ATTESTD_TSA_CERT_CHAIN"
))

const create = Command.make(
  "create",
  {
    pkcs11: Options.boolean("pkcs11").pipe(Options.withDescription("generate the key in the PKCS#11 token (ATTESTD_PKCS11_MODULE, _TOKEN, _PIN_FILE), as ATTESTD_SIGNER=pkcs11 does")),
    tsa: tsaOption
  },
  ({ pkcs11, tsa }) =>
    Effect.gen(function*() {
      const created = yield* withKeyCustody(createKey(tsa ? "tsa" : "t0"), pkcs11).pipe(Effect.catchTag("KeyCustodyError", (e) => fail(e.message)))
      if ("existing" in created) return yield* fail(`a signing key is already active (${created.existing}); attestd signing-keys rotate replaces it`)
      yield* Console.log(JSON.stringify(created))
    })
).pipe(Command.withDescription("make the first signing key before the first start (in the token with --pkcs11); prints {kid, activated_at}"))

const encrypt = Command.make("encrypt", {}, () =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    if (config.signer._tag !== "file" || Option.isNone(config.signer.passphraseFile)) {
      return yield* usage("signing-keys encrypt needs ATTESTD_KEY_PASSPHRASE_FILE (a file holding the passphrase) and ATTESTD_SIGNER=file")
    }
    const { passphraseFile } = config.signer
    const result = yield* Effect.try({
      try: () => encryptKeyFiles(config.dataDir, readPassphrase(passphraseFile)!),
      catch: (e) => (e instanceof Error ? e.message : String(e))
    }).pipe(Effect.catchAll(fail))
    yield* Console.log(JSON.stringify(result))
  })).pipe(Command.withDescription("encrypt the plain key files of the data dir in place with the passphrase of ATTESTD_KEY_PASSPHRASE_FILE"))

const signingKeys = Command.make("signing-keys").pipe(
  Command.withDescription("the service's ECDSA P-256 signing keys: create, rotate, csr, encrypt"),
  Command.withSubcommands([create, rotate, csr, encrypt])
)

const brandSet = Command.make(
  "set",
  {
    slug: Args.text({ name: "SLUG" }).pipe(Args.withDescription("the brand's name in URLs (/v1/brand/SLUG, the verifier page's ?brand=)")),
    file: Options.file("file").pipe(Options.withDescription("a JSON object: the brand's fields (display_name, colours, logo_url, …)"))
  },
  ({ file, slug }) =>
  Effect.gen(function*() {
    const raw: unknown = yield* Effect.try({
      try: () => JSON.parse(readFileSync(file, "utf8")),
      catch: (e) => e
    }).pipe(Effect.catchAll((e) => usage(`cannot read ${file}: ${e instanceof Error ? e.message : String(e)}`)))
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
      return yield* usage(`invalid brand: ${file} must hold a JSON object`)
    }
    const brand = yield* Schema.decodeUnknown(Brand)({ logo_url: null, ...raw, slug }, { onExcessProperty: "error" }).pipe(
      Effect.catchAll((e) => usage(`invalid brand: ${ParseResult.TreeFormatter.formatErrorSync(e).replace(/\s*\n\s*/g, " ")}`))
    )
    yield* withDatabase(Effect.flatMap(BrandRepo, (repo) => repo.put(brand, formatMillis(Date.now()))).pipe(Effect.provide(BrandRepo.Default)))
    yield* Console.log(JSON.stringify(brand))
  })).pipe(Command.withDescription("create or replace a brand configuration from a JSON file"))

const brand = Command.make("brand").pipe(Command.withDescription("branding of the verifier page"), Command.withSubcommands([brandSet]))

const backupCommand = Command.make("backup", { to: Options.text("to").pipe(Options.withDescription("a new or empty directory")) }, ({ to }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const result = yield* backup(config, to).pipe(Effect.catchAll((e) => fail(e.message)))
    yield* Console.log(JSON.stringify(result))
    if (result.store === "pg") yield* Console.error("Postgres: the database itself is not in this backup; dump it with pg_dump (docs/operations.md)")
  })).pipe(Command.withDescription("consistent online copy of the SQLite database plus the data dir (signing keys, demo TSA) into a directory"))

const restoreCommand = Command.make("restore", { from: Options.text("from").pipe(Options.withDescription("a directory written by attestd backup")) }, ({ from }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const result = yield* restore(config, from).pipe(Effect.catchAll((e) => fail(e.message)))
    yield* Console.log(JSON.stringify(result))
  })).pipe(Command.withDescription("restore a backup into an empty data dir (refuses a non-empty one)"))

const importCommand = Command.make(
  "import",
  { file: Args.text({ name: "FILE.jsonl" }).pipe(Args.withDescription("one historical attestation per line (docs/operations.md)")) },
  ({ file }) =>
    Effect.gen(function*() {
      const unreadable = (() => {
        try {
          accessSync(file, constants.R_OK)
          return statSync(file).isFile() ? null : "not a file"
        } catch (e) {
          return e instanceof Error ? e.message : String(e)
        }
      })()
      if (unreadable !== null) return yield* usage(`cannot read ${file}: ${unreadable}`)
      // Loaded on use, like the server: other commands start without it.
      const { importFile } = yield* Effect.promise(() => import("./Attestations/Import.js"))
      const { AttestationRepo } = yield* Effect.promise(() => import("./Attestations/Repo.js"))
      const report = yield* withDatabase(Effect.provide(importFile(file), AttestationRepo.Default)).pipe(
        Effect.catchAll((e) => fail(e instanceof Error ? e.message : String(e)))
      )
      for (const e of report.errors) yield* Console.error(`line ${e.line}: ${e.code} ${e.message}`)
      const shown = report.errors.slice(0, 100)
      yield* Console.log(JSON.stringify({
        file,
        ...report,
        errors: shown,
        ...(shown.length < report.errors.length ? { errors_truncated: report.errors.length - shown.length } : {})
      }))
      if (report.failed > 0) return yield* fail(`${report.failed} line(s) not imported`)
    })
).pipe(Command.withDescription(
  "import historical attestations from JSONL; each line is checked (its signature with its key) and stored on its own; exit 1 if any line was not imported"
))

const healthcheck = Command.make("healthcheck", {
  url: Options.text("url").pipe(Options.withDescription("the instance's base URL (default: http://HOST:PORT of the configuration)"), Options.optional)
}, ({ url }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host
    const base = Option.getOrElse(url, () => `http://${host.includes(":") ? `[${host}]` : host}:${config.port}`).replace(/\/+$/, "")
    const ok = yield* Effect.tryPromise(async () => {
      const res = await fetch(`${base}/v1/healthz`, { signal: AbortSignal.timeout(5000) })
      const body = (await res.json().catch(() => null)) as { status?: string } | null
      // degraded (a TSA or calendar outage) still serves: a restart would not fix it
      return res.status === 200 && (body?.status === "ok" || body?.status === "degraded")
    }).pipe(Effect.orElseSucceed(() => false))
    yield* Console.log(JSON.stringify({ url: `${base}/v1/healthz`, ok }))
    if (!ok) return yield* Effect.fail(new Reported("unhealthy"))
  })).pipe(Command.withDescription("exit 0 when /v1/healthz answers 200 (ok or degraded), 1 otherwise (container health checks)"))

export const attestd = Command.make("attestd").pipe(
  Command.withSubcommands([serve, worker, migrateCommand, keys, signingKeys, brand, verifyCommand, stampCommand, upgradeCommand, listCommand, backupCommand, restoreCommand, importCommand, healthcheck])
)

const run = Command.run(attestd, { name: "attestd", version: SERVICE_VERSION })

// ---------------------------------------------------------------------------
// How the command line behaves for a person: help without colour codes when it is not
// a terminal and without padding; an unknown option refused (exit 2) before it can be
// taken for a file name; every failure one line on stderr, no stack trace.

const ANSI = /\u001b\[[0-9;]*m/g
/** @effect/cli's generic line under each option's name: its type, not its meaning (ours follows it). */
const TYPE_LINE = /^\s*(A user-defined piece of text\.|A true or false value\.|An integer\.|A file\.|A directory\.|A file or directory\.|A floating point number\.)$/

const colourOn = (stream: NodeJS.WriteStream): boolean => stream.isTTY === true && process.env.NO_COLOR === undefined && process.env.TERM !== "dumb"

/** Help and messages as printed: colour codes only on a terminal, no type lines, the command table unpadded, no trailing spaces. */
export const tidyText = (text: string, colour: boolean): string => {
  const out: Array<string> = []
  let dropBlank = false
  for (const raw of (colour ? text : text.replace(ANSI, "")).split("\n")) {
    if (TYPE_LINE.test(raw.replace(ANSI, ""))) {
      dropBlank = true
      continue
    }
    if (dropBlank && raw.trim() === "") {
      dropBlank = false
      continue
    }
    dropBlank = false
    // "  - serve [--port text] …<hundreds of spaces>description": the description on its own line
    const row = /^(  - \S.*?) {2,}(\S.*)$/.exec(raw)
    if (row) out.push(row[1]!.trimEnd(), `      ${row[2]!.trimEnd()}`)
    else out.push(raw.trimEnd())
  }
  return out.join("\n")
}

const tidyConsole = (c: Console.Console): Console.Console => ({
  ...c,
  log: (...args) => c.log(...args.map((a) => (typeof a === "string" ? tidyText(a, colourOn(process.stdout)) : a))),
  error: (...args) => c.error(...args.map((a) => (typeof a === "string" ? tidyText(a, colourOn(process.stderr)) : a)))
})

const BUILT_IN: ReadonlyArray<string> = ["--help", "-h", "--version", "--wizard", "--completions", "--log-level"]

interface CommandShape {
  /** Every option name of the command. */
  readonly options: ReadonlySet<string>
  /** Options followed by a value (the next argument is never an option name). */
  readonly valued: ReadonlySet<string>
}

/** Every runnable command by its path; test/Cli/usage.test.ts checks it against the root help's list. */
export const COMMANDS: ReadonlyMap<string, () => Usage.Usage> = new Map([
  ["serve", () => Command.getUsage(serve)],
  ["worker", () => Command.getUsage(worker)],
  ["migrate", () => Command.getUsage(migrateCommand)],
  ["keys create", () => Command.getUsage(keysCreate)],
  ["keys list", () => Command.getUsage(keysList)],
  ["keys revoke", () => Command.getUsage(keysRevoke)],
  ["signing-keys create", () => Command.getUsage(create)],
  ["signing-keys rotate", () => Command.getUsage(rotate)],
  ["signing-keys csr", () => Command.getUsage(csr)],
  ["signing-keys encrypt", () => Command.getUsage(encrypt)],
  ["brand set", () => Command.getUsage(brandSet)],
  ["verify", () => Command.getUsage(verifyCommand)],
  ["stamp", () => Command.getUsage(stampCommand)],
  ["upgrade", () => Command.getUsage(upgradeCommand)],
  ["list", () => Command.getUsage(listCommand)],
  ["backup", () => Command.getUsage(backupCommand)],
  ["restore", () => Command.getUsage(restoreCommand)],
  ["import", () => Command.getUsage(importCommand)],
  ["healthcheck", () => Command.getUsage(healthcheck)]
])

/** A command's options, read from its usage line (rendering only that line: the whole help costs ~70 ms). */
const shapeOf = (usage: Usage.Usage): CommandShape => {
  const tokens = HelpDoc.toAnsiText(Usage.getHelp(usage)).replace(ANSI, "").trim().split(/\s+/)
  const options = new Set<string>()
  const valued = new Set<string>()
  tokens.forEach((t, i) => {
    const name = /^[[(]*(--[a-z0-9][a-z0-9-]*)/.exec(t)?.[1]
    if (name === undefined) return
    options.add(name)
    const next = tokens[i + 1]
    if (!/[\])]$/.test(t) && next !== undefined && !/^[[<(-]/.test(next)) valued.add(name)
  })
  return { options, valued }
}

/** The first option `args` give that their command does not know, with the command's path; undefined when all are known. */
export const unknownOption = (args: ReadonlyArray<string>): { readonly path: string; readonly option: string } | undefined => {
  let at = 0
  let path = ""
  while (at < args.length && /^[a-z][a-z0-9-]*$/.test(args[at]!) && !COMMANDS.has(path)) {
    path = path === "" ? args[at]! : `${path} ${args[at]}`
    at++
  }
  const usage = COMMANDS.get(path)
  if (usage === undefined) return undefined // no such command: @effect/cli reports it
  const shape = shapeOf(usage())
  for (; at < args.length; at++) {
    const a = args[at]!
    if (a === "--") break
    if (!a.startsWith("-") || a === "-" || /^-\d/.test(a)) continue
    const name = a.split("=")[0]!
    if (BUILT_IN.includes(name)) continue
    if (!shape.options.has(name)) return { path, option: name }
    if (shape.valued.has(name) && !a.includes("=")) at++
  }
  return undefined
}

const FLAG_OF: ReadonlyMap<string, string> = new Map(Object.entries(SETTINGS).map(([flag, [env]]) => [env, flag]))

/** The invalid settings of a ConfigError, each named as variable and flag (a missing value is only reported when nothing is invalid). */
const configMessage = (e: ConfigError.ConfigError): string => {
  const invalid: Array<string> = []
  const missing: Array<string> = []
  const walk = (c: ConfigError.ConfigError): void => {
    switch (c._op) {
      case "And":
      case "Or":
        walk(c.left)
        walk(c.right)
        return
      case "InvalidData":
      case "SourceUnavailable":
      case "Unsupported": {
        const name = c.path.join(".")
        const flag = FLAG_OF.get(name)
        invalid.push(`${name}${flag === undefined ? "" : ` (--${flag})`}: ${c.message}`)
        return
      }
      case "MissingData":
        missing.push(`${c.path.join(".")}: ${c.message}`)
    }
  }
  walk(e)
  return `invalid configuration: ${[...new Set(invalid.length > 0 ? invalid : missing)].join("; ")}`
}

const messageOf = (e: unknown): string => {
  if (ConfigError.isConfigError(e)) return configMessage(e)
  if (e instanceof Error) return e.message
  return String(e)
}

/**
 * Runs `attestd` on an argv (node, script, args…): output through Console. The exit code
 * goes to process.exitCode: 0 done, 2 a usage error (unknown option or command, a missing
 * or malformed argument, a bad setting), otherwise the command's own code or 1. A failure
 * is one line on stderr, never a stack trace.
 */
export const cli = (argv: ReadonlyArray<string>) =>
  Effect.flatMap(Effect.console, (console) => {
    const setExit = (code: number) => Effect.sync(() => { process.exitCode = code })
    const unknown = unknownOption(argv.slice(2))
    const program: Effect.Effect<void, unknown, CliApp.CliApp.Environment> = unknown !== undefined
      ? Effect.zipRight(
        Console.error(`attestd ${unknown.path}: unknown option ${unknown.option} (see attestd ${unknown.path} --help)`),
        setExit(2)
      )
      : run(argv).pipe(
        Effect.catchAll((e) => {
          if (ValidationError.isValidationError(e)) return setExit(2) // @effect/cli printed it
          if (e instanceof Reported) return setExit(e.usage ? 2 : 1)
          return Effect.zipRight(Console.error(`attestd: ${messageOf(e)}`), setExit(ConfigError.isConfigError(e) ? 2 : 1))
        }),
        Effect.catchAllDefect((d) => Effect.zipRight(Console.error(`attestd: internal error: ${messageOf(d)}`), setExit(1)))
      )
    return program.pipe(Effect.withConsole(tidyConsole(console)))
  })
