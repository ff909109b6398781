/** The `attestd` command line (CONTRACT.md §1): every command. bin.ts runs it on the process's argv; tests run it in-process. */
import { Args, Command, Options } from "@effect/cli"
import { Console, ConfigProvider, Effect, Layer, Option, ParseResult, Schema } from "effect"
import { readFileSync } from "node:fs"
import { Brand } from "./Brand/Domain.js"
import { BrandRepo } from "./Brand/Repo.js"
import { formatMillis } from "./Domain/Time.js"
import { verifyCommand } from "./VerifyCli/Command.js"
import { stampCommand, upgradeCommand } from "./Stamp/Command.js"
import { listCommand } from "./Stamp/ListCommand.js"
import { ApiKeyRepo } from "./Auth/ApiKeyRepo.js"
import { parseCidr } from "./Platform/ClientAddress.js"
import { isScope, SCOPES, type Scope } from "./Auth/Domain.js"
import { SERVICE_VERSION } from "./Domain/Version.js"
import { AppConfig, appConfig } from "./Platform/Config.js"
import { backup, restore } from "./Platform/Backup.js"
import { DatabaseLive, migrate } from "./Platform/Sql.js"
import { generateKey, registerPublicKeys } from "./Platform/Signer.js"

/** `serve` flags, each the same setting as an environment variable. */
const FLAGS = {
  port: "PORT",
  host: "HOST",
  "database-url": "DATABASE_URL",
  mode: "ATTESTD_MODE",
  env: "ATTESTD_ENV",
  "tsa-url": "ATTESTD_TSA_URL",
  "tsa-ca-file": "ATTESTD_TSA_CA_FILE",
  "ots-calendars": "ATTESTD_OTS_CALENDARS",
  "seal-interval": "ATTESTD_SEAL_INTERVAL",
  "anchor-interval": "ATTESTD_ANCHOR_INTERVAL",
  "ots-upgrade-interval": "ATTESTD_OTS_UPGRADE_INTERVAL",
  "webhook-retry-delays": "ATTESTD_WEBHOOK_RETRY_DELAYS",
  "data-dir": "ATTESTD_DATA_DIR",
  "demo-confirm-delay": "ATTESTD_DEMO_CONFIRM_DELAY",
  "trust-proxy": "ATTESTD_TRUST_PROXY",
  "public-rate-limit": "ATTESTD_PUBLIC_RATE_LIMIT",
  "scan-max-hashes": "ATTESTD_SCAN_MAX_HASHES",
  "shutdown-timeout": "ATTESTD_SHUTDOWN_TIMEOUT",
  "request-timeout": "ATTESTD_REQUEST_TIMEOUT",
  "headers-timeout": "ATTESTD_HEADERS_TIMEOUT",
  "keep-alive-timeout": "ATTESTD_KEEP_ALIVE_TIMEOUT",
  "max-connections": "ATTESTD_MAX_CONNECTIONS",
  "max-connections-per-address": "ATTESTD_MAX_CONNECTIONS_PER_ADDRESS"
} as const

const settingOptions = Options.all(
  Object.fromEntries(
    Object.entries(FLAGS).map(([flag, env]) => [flag, Options.text(flag).pipe(Options.withDescription(`same as ${env}`), Options.optional)])
  ) as Record<keyof typeof FLAGS, Options.Options<Option.Option<string>>>
)

const withSettings = (settings: Record<string, Option.Option<string>>) => {
  const map = new Map<string, string>()
  for (const [flag, value] of Object.entries(settings)) {
    if (Option.isSome(value)) map.set(FLAGS[flag as keyof typeof FLAGS], value.value)
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
  { settings: settingOptions, noMigrate: Options.boolean("no-migrate") },
  ({ noMigrate, settings }) => runServer(settings, { http: false, workers: true, migrate: !noMigrate })
).pipe(Command.withDescription("background workers only (sealer, anchorer, OTS upgrader, webhook dispatcher)"))

/** Runs `effect` against the configured, migrated database. */
const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    return yield* effect.pipe(
      Effect.provide(Layer.mergeAll(ApiKeyRepo.Default).pipe(Layer.provideMerge(DatabaseLive(config)))),
      Effect.provideService(AppConfig, config)
    )
  })

const migrateCommand = Command.make("migrate", {}, () =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const applied = yield* migrate.pipe(Effect.provide(DatabaseLive(config, { migrate: false })))
    yield* Console.log(JSON.stringify({ applied: applied.map(([id, name]) => `${id}_${name}`) }))
  })).pipe(Command.withDescription("apply database migrations"))

const fail = (message: string) => Effect.zipRight(Console.error(message), Effect.fail(new Error(message)))

const keysCreate = Command.make(
  "create",
  {
    label: Options.text("label"),
    scopes: Options.text("scopes").pipe(Options.optional),
    org: Options.text("org").pipe(Options.optional),
    env: Options.choice("env", ["test", "production"]).pipe(Options.optional),
    allowIp: Options.text("allow-ip").pipe(Options.repeated),
    rateLimit: Options.integer("rate-limit").pipe(Options.optional),
    monthlyQuota: Options.integer("monthly-quota").pipe(Options.optional)
  },
  (o) =>
    Effect.gen(function*() {
      const scopes = Option.map(o.scopes, (s) => s.split(",").map((x) => x.trim()).filter((x) => x.length > 0))
      if (Option.isSome(scopes)) {
        const bad = scopes.value.filter((s) => !isScope(s))
        if (bad.length > 0) return yield* fail(`unknown scope(s): ${bad.join(", ")}; known: ${SCOPES.join(", ")}`)
      }
      const badIps = o.allowIp.filter((c) => parseCidr(c) === undefined)
      if (badIps.length > 0) return yield* fail(`not an IP address or CIDR: ${badIps.join(", ")}`)
      if (Option.isSome(o.rateLimit) && o.rateLimit.value < 1) return yield* fail("--rate-limit must be at least 1")
      if (Option.isSome(o.monthlyQuota) && o.monthlyQuota.value < 0) return yield* fail("--monthly-quota must be >= 0")
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

const keysRevoke = Command.make("revoke", { id: Args.text({ name: "ID" }) }, ({ id }) =>
  Effect.gen(function*() {
    const revoked = yield* withDatabase(Effect.flatMap(ApiKeyRepo, (repo) => repo.revoke(id)))
    if (!revoked) return yield* fail(`no active key ${id}`)
    yield* Console.log(JSON.stringify({ id, revoked: true }))
  })).pipe(Command.withDescription("revoke an API key"))

const keys = Command.make("keys").pipe(Command.withSubcommands([keysCreate, keysList, keysRevoke]))

const rotate = Command.make("rotate", {}, () =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const key = generateKey(config.dataDir, Date.now())
    yield* withDatabase(registerPublicKeys([key]))
    yield* Console.log(JSON.stringify({ kid: key.kid, created_at: key.createdAt, jwk: key.jwk }))
  })).pipe(Command.withDescription("add a new active signing key; old keys stay listed and verifiable"))

const signingKeys = Command.make("signing-keys").pipe(Command.withSubcommands([rotate]))

const brandSet = Command.make("set", { slug: Args.text({ name: "SLUG" }), file: Options.file("file") }, ({ file, slug }) =>
  Effect.gen(function*() {
    const raw: unknown = yield* Effect.try({
      try: () => JSON.parse(readFileSync(file, "utf8")),
      catch: (e) => new Error(`cannot read ${file}: ${String(e)}`)
    })
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
      return yield* Effect.fail(new Error(`invalid brand: ${file} must hold a JSON object`)).pipe(Effect.tapError((e) => Console.error(e.message)))
    }
    const brand = yield* Schema.decodeUnknown(Brand)({ logo_url: null, ...raw, slug }, { onExcessProperty: "error" }).pipe(
      Effect.mapError((e) => new Error(`invalid brand: ${ParseResult.TreeFormatter.formatErrorSync(e)}`)),
      Effect.tapError((e) => Console.error(e.message))
    )
    yield* withDatabase(Effect.flatMap(BrandRepo, (repo) => repo.put(brand, formatMillis(Date.now()))).pipe(Effect.provide(BrandRepo.Default)))
    yield* Console.log(JSON.stringify(brand))
  })).pipe(Command.withDescription("create or replace a brand configuration from a JSON file"))

const brand = Command.make("brand").pipe(Command.withSubcommands([brandSet]))

const backupCommand = Command.make("backup", { to: Options.text("to").pipe(Options.withDescription("a new or empty directory")) }, ({ to }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const result = yield* backup(config, to).pipe(Effect.tapError((e) => Console.error(e.message)))
    yield* Console.log(JSON.stringify(result))
    if (result.store === "pg") yield* Console.error("Postgres: the database itself is not in this backup; dump it with pg_dump (README, Backups)")
  })).pipe(Command.withDescription("consistent online copy of the SQLite database plus the data dir (signing keys, demo TSA) into a directory"))

const restoreCommand = Command.make("restore", { from: Options.text("from").pipe(Options.withDescription("a directory written by attestd backup")) }, ({ from }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const result = yield* restore(config, from).pipe(Effect.tapError((e) => Console.error(e.message)))
    yield* Console.log(JSON.stringify(result))
  })).pipe(Command.withDescription("restore a backup into an empty data dir (refuses a non-empty one)"))

const importCommand = Command.make(
  "import",
  { file: Args.text({ name: "FILE.jsonl" }).pipe(Args.withDescription("one historical attestation per line (README, Importing historical attestations)")) },
  ({ file }) =>
    Effect.gen(function*() {
      // Loaded on use, like the server: other commands start without it.
      const { importFile } = yield* Effect.promise(() => import("./Attestations/Import.js"))
      const { AttestationRepo } = yield* Effect.promise(() => import("./Attestations/Repo.js"))
      const report = yield* withDatabase(Effect.provide(importFile(file), AttestationRepo.Default)).pipe(Effect.tapError((e) => Console.error(e.message)))
      for (const e of report.errors) yield* Console.error(`line ${e.line}: ${e.code} ${e.message}`)
      const shown = report.errors.slice(0, 100)
      yield* Console.log(JSON.stringify({
        file,
        ...report,
        errors: shown,
        ...(shown.length < report.errors.length ? { errors_truncated: report.errors.length - shown.length } : {})
      }))
      if (report.failed > 0) return yield* Effect.fail(new Error(`${report.failed} line(s) not imported`))
    })
).pipe(Command.withDescription(
  "import historical attestations from JSONL; each line is checked (its signature with its key) and stored on its own; exit 1 if any line was not imported"
))

const healthcheck = Command.make("healthcheck", { url: Options.text("url").pipe(Options.optional) }, ({ url }) =>
  Effect.gen(function*() {
    const config = yield* loadConfig
    const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host
    const base = Option.getOrElse(url, () => `http://${host.includes(":") ? `[${host}]` : host}:${config.port}`).replace(/\/+$/, "")
    const ok = yield* Effect.tryPromise(async () => {
      const res = await fetch(`${base}/v1/healthz`, { signal: AbortSignal.timeout(5000) })
      const body = (await res.json().catch(() => null)) as { status?: string } | null
      return res.status === 200 && body?.status === "ok"
    }).pipe(Effect.orElseSucceed(() => false))
    yield* Console.log(JSON.stringify({ url: `${base}/v1/healthz`, ok }))
    if (!ok) return yield* Effect.fail(new Error("unhealthy"))
  })).pipe(Command.withDescription("exit 0 when /v1/healthz says ok, 1 otherwise (container health checks)"))

export const attestd = Command.make("attestd").pipe(
  Command.withSubcommands([serve, worker, migrateCommand, keys, signingKeys, brand, verifyCommand, stampCommand, upgradeCommand, listCommand, backupCommand, restoreCommand, importCommand, healthcheck])
)

/** Runs `attestd` on an argv (node, script, args…): output through Console, a failed command as the effect's error. */
export const cli = Command.run(attestd, { name: "attestd", version: SERVICE_VERSION })
