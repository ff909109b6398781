/**
 * Service configuration from the environment (CONTRACT.md §1). `attestd serve`
 * flags are folded in as a ConfigProvider in front of the environment.
 */
import { Config, ConfigError, ConfigProvider, Context, Duration, Effect, Either, Layer, Option } from "effect"
import { parseTrustProxy, type TrustProxy } from "./ClientAddress.js"
import { redactUrls } from "./RedactUrl.js"

export type Mode = "demo" | "production"
export type Environment = "test" | "production"

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/

export const parseDuration = (raw: string): Duration.Duration | undefined => {
  const m = DURATION.exec(raw.trim())
  if (!m) return undefined
  const n = Number(m[1])
  switch (m[2]) {
    case "ms":
      return Duration.millis(n)
    case "s":
      return Duration.seconds(n)
    case "m":
      return Duration.minutes(n)
    case "h":
      return Duration.hours(n)
    default:
      return Duration.days(n)
  }
}

const duration = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((raw) => {
      const d = parseDuration(raw)
      return d && Duration.toMillis(d) > 0
        ? Either.right(d)
        : Either.left(ConfigError.InvalidData([name], `expected a duration such as 500ms, 2s, 1m or 24h, got ${raw}`))
    })
  )

/** A duration setting in milliseconds; unset, `fallbackMs` (the one place its default is stated). */
const durationMs = (name: string, fallbackMs: number) => Config.map(duration(name, `${fallbackMs}ms`), Duration.toMillis)

const durationList = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((raw) => {
      const parts = raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
      const out: Array<Duration.Duration> = []
      for (const p of parts) {
        const d = parseDuration(p)
        if (!d) return Either.left(ConfigError.InvalidData([name], `bad duration ${p}`))
        out.push(d)
      }
      return Either.right(out)
    })
  )

const urlList = (name: string) =>
  Config.string(name).pipe(
    Config.withDefault(""),
    Config.map((raw) => raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)),
    Config.mapOrFail((urls) => {
      const bad = urls.filter((u) => {
        try {
          return !["http:", "https:"].includes(new URL(u).protocol)
        } catch {
          return true
        }
      })
      return bad.length === 0
        ? Either.right(urls)
        : Either.left(ConfigError.InvalidData([name], `not an http(s) URL: ${redactUrls(bad).join(", ")}`))
    })
  )

/** One NTP server of ATTESTD_NTP_SERVERS. */
export interface NtpServer {
  readonly host: string
  readonly port: number
}

const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/
const IPV6 = /^[0-9A-Fa-f:.]+$/

/** `host`, `host:port`, `[v6]` or `[v6]:port` (default port 123), or a reason it is not one. */
export const parseNtpServer = (text: string): NtpServer | string => {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(text) ?? /^([^:\[\]]+)(?::(\d+))?$/.exec(text)
  if (m === null) {
    return text.split(":").length > 2 ? `${text}: an IPv6 address goes in brackets, e.g. [2001:db8::1]:123` : `${text}: not host[:port]`
  }
  const host = m[1]!
  const bracketed = text.startsWith("[")
  if (bracketed ? !(IPV6.test(host) && host.includes(":")) : !HOST_NAME.test(host)) return `${text}: ${JSON.stringify(host)} is not a host name or address`
  const port = m[2] === undefined ? 123 : Number(m[2])
  if (!Number.isInteger(port) || port < 1 || port > 65535) return `${text}: the port must be 1..65535`
  return { host, port }
}

const ntpServers = (name: string) =>
  Config.string(name).pipe(
    Config.withDefault(""),
    Config.mapOrFail((raw) => {
      const servers: Array<NtpServer> = []
      for (const part of raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)) {
        const server = parseNtpServer(part)
        if (typeof server === "string") return Either.left(ConfigError.InvalidData([name], `expected comma-separated host[:port], ${server}`))
        // The same server twice would count as two votes of the quorum.
        if (servers.some((s) => s.host.toLowerCase() === server.host.toLowerCase() && s.port === server.port)) {
          return Either.left(ConfigError.InvalidData([name], `${part} is listed twice`))
        }
        servers.push(server)
      }
      return Either.right(servers)
    })
  )

/** An origin as browsers send it (`https://app.example`, `http://localhost:3000`), or undefined. */
const originOf = (text: string): string | undefined => {
  try {
    const url = new URL(text)
    if (url.protocol !== "http:" && url.protocol !== "https:") return undefined
    if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "" || (url.pathname !== "/" && url.pathname !== "")) return undefined
    if (!/^[a-z][a-z0-9+.-]*:\/\/[^/]+\/?$/i.test(text)) return undefined
    return url.origin
  } catch {
    return undefined
  }
}

/**
 * Where the signing keys live (CONTRACT §8). `file`: PKCS#8 files in the data dir,
 * encrypted when a passphrase file is given; `pkcs11`: keys generated in a PKCS#11
 * token that never leave it. Secrets (passphrase, PIN) are named by file only.
 */
export type SignerSettings =
  | { readonly _tag: "file"; readonly passphraseFile: Option.Option<string> }
  | {
    readonly _tag: "pkcs11"
    readonly module: string
    readonly token: string
    readonly pinFile: string
    /** ATTESTD_PKCS11_WORKERS: threads that sign with the token (default 2). */
    readonly workers: number
  }

export interface AppConfigShape {
  readonly port: number
  readonly host: string
  readonly databaseUrl: string
  /**
   * ATTESTD_PG_READ_URL: a Postgres replica for the public reads (verify, lookup, status, evidence,
   * keys); what it misses, and everything while it fails, is read on the primary. None: the primary.
   */
  readonly databaseReadUrl: Option.Option<string>
  readonly mode: Mode
  readonly environment: Environment
  readonly tsaUrls: ReadonlyArray<string>
  readonly tsaCaFile: Option.Option<string>
  readonly otsCalendars: ReadonlyArray<string>
  /** Esplora-compatible base URLs the upgrader asks for Bitcoin block headers (all must agree). */
  readonly bitcoinSources: ReadonlyArray<string>
  readonly sealInterval: Duration.Duration
  readonly anchorInterval: Duration.Duration
  readonly otsUpgradeInterval: Duration.Duration
  readonly webhookRetryDelays: ReadonlyArray<Duration.Duration>
  /** ATTESTD_WEBHOOK_PORTS: the ports a production webhook URL may use (default 443). */
  readonly webhookPorts: ReadonlyArray<number>
  readonly dataDir: string
  readonly demoConfirmDelay: Duration.Duration
  /** ATTESTD_TRUST_PROXY: proxy hops (true = 1) or the proxies' CIDRs; false/0 = no proxy. */
  readonly trustProxy: TrustProxy
  /**
   * ATTESTD_PUBLIC_RATE_LIMIT: requests (batch verify: hashes) per minute per client address on
   * public routes, and on keyed routes for requests without valid credentials; none = off.
   */
  readonly publicRateLimit: Option.Option<number>
  /** The HTTP listener's timeouts and connection caps (see ServerLimits). */
  readonly server: ServerLimits
  readonly scanMaxHashes: number
  readonly defaultRateLimit: number
  /** ATTESTD_METRICS_PORT: the Prometheus listener (none when unset; 0: any free port). */
  readonly metricsPort: Option.Option<number>
  /**
   * ATTESTD_CORS_ORIGINS: comma-separated origins (`https://app.example`) whose browser pages may call
   * the authenticated routes (their preflight allows Authorization). Public routes answer any origin
   * with `Access-Control-Allow-Origin: *` either way. Default: none.
   */
  readonly corsOrigins: ReadonlyArray<string>
  /** ATTESTD_SIGNER and its settings: where the T0 (and TSA) keys live. */
  readonly signer: SignerSettings
  /** How often every instance reads the signing-key table: a rotation reaches it within this. */
  readonly signingKeyPoll: Duration.Duration
  /** The RFC 3161 time-stamping authority (POST /v1/timestamp, CONTRACT §6). */
  readonly timestamping: TimestampingConfig
  /**
   * ATTESTD_PG_DIRECT_URL: a Postgres URL that bypasses any connection pooler, for LISTEN
   * (API-key revocations reach every instance at once). Without it they reach it by
   * polling, within keyCacheTtl.
   */
  readonly pgDirectUrl: Option.Option<string>
  /** ATTESTD_KEY_CACHE_TTL: the longest an instance uses a cached API key without looking it up again (default 2s). */
  readonly keyCacheTtl: Duration.Duration
}

/** CONTRACT §6: attestd as an RFC 3161 time-stamping authority. */
export interface TimestampingConfig {
  /** ATTESTD_TIMESTAMPING: on by default in demo mode, off by default in production. */
  readonly enabled: boolean
  /** ATTESTD_TSA_ACCESS: `public` (no credentials, the public per-address limit) or `key` (scope `timestamp`). */
  readonly access: "public" | "key"
  /** ATTESTD_TSA_POLICY: the policy of tokens whose request names none (demo default 2.999.1). */
  readonly policy: string
  /** ATTESTD_TSA_POLICIES: further policies a request may name. */
  readonly acceptedPolicies: ReadonlyArray<string>
  /** ATTESTD_TSA_CERT_CHAIN: PEM file, TSA certificate first (production); none: a demo CA under <dataDir>/tsa/. */
  readonly certChainFile: Option.Option<string>
  /** ATTESTD_CLOCK_TOLERANCE: the accuracy written into tokens, and the clock discipline's bound. */
  readonly clockToleranceMs: number
  /** ATTESTD_NTP_SERVERS: the SNTP servers that discipline the clock (none: unmonitored). */
  readonly ntpServers: ReadonlyArray<NtpServer>
  /** ATTESTD_NTP_INTERVAL: how often they are asked (default 64s). */
  readonly ntpInterval: Duration.Duration
}

/** The X.660 example arc: the demo's policy, never a production one. */
export const DEMO_TSA_POLICY = "2.999.1"

const OID_PATTERN = /^[0-2](\.(0|[1-9][0-9]*))+$/

const oidList = (name: string) =>
  Config.string(name).pipe(
    Config.withDefault(""),
    Config.map((raw) => raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)),
    Config.mapOrFail((oids) => {
      const bad = oids.filter((o) => !OID_PATTERN.test(o))
      return bad.length === 0
        ? Either.right(oids)
        : Either.left(ConfigError.InvalidData([name], `not a dotted object identifier: ${bad.join(", ")}`))
    })
  )

const timestampingConfig = Config.all({
  enabled: Config.option(Config.literal("on", "off")("ATTESTD_TIMESTAMPING")),
  access: Config.literal("public", "key")("ATTESTD_TSA_ACCESS").pipe(Config.withDefault("public" as const)),
  policy: Config.option(Config.string("ATTESTD_TSA_POLICY").pipe(
    Config.map((raw) => raw.trim()),
    Config.validate({ message: "ATTESTD_TSA_POLICY must be one dotted object identifier", validation: (oid) => OID_PATTERN.test(oid) })
  )),
  acceptedPolicies: oidList("ATTESTD_TSA_POLICIES"),
  certChainFile: Config.option(Config.string("ATTESTD_TSA_CERT_CHAIN")),
  clockToleranceMs: Config.map(duration("ATTESTD_CLOCK_TOLERANCE", "1s"), Duration.toMillis),
  ntpServers: ntpServers("ATTESTD_NTP_SERVERS"),
  ntpInterval: duration("ATTESTD_NTP_INTERVAL", "64s")
})

/** Requests (hashes for batch verify) per minute per client address on public routes, unless configured. */
export const DEFAULT_PUBLIC_RATE_LIMIT = 1000

/** Every instance reads the signing-key table this often; a rotation's overlap (Signer.ts) is several of these. */
export const SIGNING_KEY_POLL = Duration.seconds(2)

/** Timeouts and connection caps of the HTTP listener (docs/operations.md). */
export interface ServerLimits {
  /** ATTESTD_REQUEST_TIMEOUT: the whole request (headers and body) must arrive within this; else 408 and close. */
  readonly requestTimeoutMs: number
  /** ATTESTD_HEADERS_TIMEOUT: the request headers must arrive within this. */
  readonly headersTimeoutMs: number
  /**
   * ATTESTD_KEEP_ALIVE_TIMEOUT: an idle keep-alive connection is closed after this. Longer than a
   * load balancer's or a client pool's idle timeout (60 s is common), so that the server never
   * closes a connection as its peer sends the next request on it (which the peer sees reset).
   */
  readonly keepAliveTimeoutMs: number
  /** ATTESTD_MAX_CONNECTIONS: open connections in all; more are closed on accept (0: no cap). */
  readonly maxConnections: number
  /**
   * ATTESTD_MAX_CONNECTIONS_PER_ADDRESS: open connections from one socket peer address; more are
   * closed on accept (0: no cap). A peer that is a trusted proxy (ATTESTD_TRUST_PROXY) is exempt.
   */
  readonly maxConnectionsPerAddress: number
}

export const DEFAULT_SERVER_LIMITS: ServerLimits = {
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 65_000,
  maxConnections: 4096,
  maxConnectionsPerAddress: 256
}

const count = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be 0 or a positive integer`, validation: (n) => n >= 0 })
  )

/**
 * Threads that sign with a PKCS#11 token: two keep SoftHSM2 on two cores near node:crypto's
 * signatures per second; a network HSM that answers several requests at once may use more.
 */
export const DEFAULT_PKCS11_WORKERS = 2

const signerSettings: Config.Config<SignerSettings> = Config.all({
  kind: Config.literal("file", "pkcs11")("ATTESTD_SIGNER").pipe(Config.withDefault("file" as const)),
  passphraseFile: Config.option(Config.string("ATTESTD_KEY_PASSPHRASE_FILE")),
  module: Config.option(Config.string("ATTESTD_PKCS11_MODULE")),
  token: Config.option(Config.string("ATTESTD_PKCS11_TOKEN")),
  pinFile: Config.option(Config.string("ATTESTD_PKCS11_PIN_FILE")),
  workers: Config.integer("ATTESTD_PKCS11_WORKERS").pipe(
    Config.withDefault(DEFAULT_PKCS11_WORKERS),
    Config.validate({ message: "ATTESTD_PKCS11_WORKERS must be 1..64", validation: (n) => n >= 1 && n <= 64 })
  )
}).pipe(
  Config.mapOrFail((s): Either.Either<SignerSettings, ConfigError.ConfigError> => {
    if (s.kind === "file") return Either.right({ _tag: "file", passphraseFile: s.passphraseFile })
    if (Option.isSome(s.passphraseFile)) {
      return Either.left(ConfigError.InvalidData(
        ["ATTESTD_KEY_PASSPHRASE_FILE"],
        "encrypts key files, so it applies to ATTESTD_SIGNER=file only; with pkcs11 the keys stay in the token"
      ))
    }
    const missing = (["ATTESTD_PKCS11_MODULE", "ATTESTD_PKCS11_TOKEN", "ATTESTD_PKCS11_PIN_FILE"] as const).filter((_, i) =>
      Option.isNone([s.module, s.token, s.pinFile][i]!)
    )
    if (Option.isNone(s.module) || Option.isNone(s.token) || Option.isNone(s.pinFile)) {
      return Either.left(ConfigError.MissingData(
        [...missing],
        `ATTESTD_SIGNER=pkcs11 needs ${missing.join(", ")} (the module's .so, the token label, a file holding the user PIN)`
      ))
    }
    return Either.right({ _tag: "pkcs11", module: s.module.value, token: s.token.value, pinFile: s.pinFile.value, workers: s.workers })
  })
)

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  port: Config.integer("PORT").pipe(
    Config.withDefault(8080),
    Config.validate({ message: "PORT must be 0..65535 (0: any free port)", validation: (p) => p >= 0 && p <= 65535 })
  ),
  host: Config.string("HOST").pipe(Config.withDefault("127.0.0.1")),
  dataDir: Config.string("ATTESTD_DATA_DIR").pipe(Config.withDefault("./data")),
  databaseUrl: Config.option(Config.string("DATABASE_URL")),
  databaseReadUrl: Config.option(Config.string("ATTESTD_PG_READ_URL").pipe(
    Config.validate({
      message: "ATTESTD_PG_READ_URL must start with postgres:// or postgresql://",
      validation: (url) => url.startsWith("postgres://") || url.startsWith("postgresql://")
    })
  )),
  mode: Config.literal("demo", "production")("ATTESTD_MODE").pipe(Config.withDefault("demo" as const)),
  environment: Config.option(Config.literal("test", "production")("ATTESTD_ENV")),
  tsaUrls: urlList("ATTESTD_TSA_URL"),
  tsaCaFile: Config.option(Config.string("ATTESTD_TSA_CA_FILE")),
  otsCalendars: urlList("ATTESTD_OTS_CALENDARS"),
  bitcoinSources: urlList("ATTESTD_BITCOIN_SOURCES"),
  sealInterval: duration("ATTESTD_SEAL_INTERVAL", "60s"),
  anchorInterval: duration("ATTESTD_ANCHOR_INTERVAL", "24h"),
  otsUpgradeInterval: duration("ATTESTD_OTS_UPGRADE_INTERVAL", "10m"),
  webhookRetryDelays: durationList("ATTESTD_WEBHOOK_RETRY_DELAYS", "1m,5m,15m"),
  webhookPorts: Config.string("ATTESTD_WEBHOOK_PORTS").pipe(
    Config.withDefault("443"),
    Config.mapOrFail((s) => {
      const ports = s.split(",").map((p) => p.trim()).filter((p) => p !== "").map(Number)
      return ports.length > 0 && ports.every((p) => Number.isInteger(p) && p >= 1 && p <= 65535)
        ? Either.right(ports)
        : Either.left(ConfigError.InvalidData(["ATTESTD_WEBHOOK_PORTS"], "a comma-separated list of ports 1..65535"))
    })
  ),
  demoConfirmDelay: duration("ATTESTD_DEMO_CONFIRM_DELAY", "60s"),
  trustProxy: Config.string("ATTESTD_TRUST_PROXY").pipe(
    Config.withDefault(""),
    Config.mapOrFail((s) => {
      const parsed = parseTrustProxy(s)
      return typeof parsed === "string" ? Either.left(ConfigError.InvalidData(["ATTESTD_TRUST_PROXY"], parsed)) : Either.right(parsed)
    })
  ),
  publicRateLimit: count("ATTESTD_PUBLIC_RATE_LIMIT", DEFAULT_PUBLIC_RATE_LIMIT).pipe(
    Config.map((n) => (n === 0 ? Option.none() : Option.some(n)))
  ),
  server: Config.all({
    requestTimeoutMs: durationMs("ATTESTD_REQUEST_TIMEOUT", DEFAULT_SERVER_LIMITS.requestTimeoutMs),
    headersTimeoutMs: durationMs("ATTESTD_HEADERS_TIMEOUT", DEFAULT_SERVER_LIMITS.headersTimeoutMs),
    keepAliveTimeoutMs: durationMs("ATTESTD_KEEP_ALIVE_TIMEOUT", DEFAULT_SERVER_LIMITS.keepAliveTimeoutMs),
    maxConnections: count("ATTESTD_MAX_CONNECTIONS", DEFAULT_SERVER_LIMITS.maxConnections),
    maxConnectionsPerAddress: count("ATTESTD_MAX_CONNECTIONS_PER_ADDRESS", DEFAULT_SERVER_LIMITS.maxConnectionsPerAddress)
  }),
  scanMaxHashes: Config.integer("ATTESTD_SCAN_MAX_HASHES").pipe(Config.withDefault(50_000)),
  defaultRateLimit: Config.integer("ATTESTD_DEFAULT_RATE_LIMIT").pipe(Config.withDefault(1000)),
  metricsPort: Config.option(Config.integer("ATTESTD_METRICS_PORT").pipe(
    Config.validate({ message: "ATTESTD_METRICS_PORT must be 0..65535", validation: (p) => p >= 0 && p <= 65535 })
  )),
  corsOrigins: Config.string("ATTESTD_CORS_ORIGINS").pipe(
    Config.withDefault(""),
    Config.mapOrFail((raw) => {
      const origins: Array<string> = []
      for (const part of raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)) {
        const origin = originOf(part)
        if (origin === undefined) {
          return Either.left(ConfigError.InvalidData(["ATTESTD_CORS_ORIGINS"], `not an origin (scheme://host[:port]): ${part}`))
        }
        origins.push(origin)
      }
      return Either.right(origins)
    })
  ),
  signer: signerSettings,
  signingKeyPoll: Config.succeed(SIGNING_KEY_POLL),
  timestamping: timestampingConfig,
  pgDirectUrl: Config.option(Config.string("ATTESTD_PG_DIRECT_URL").pipe(
    Config.validate({
      message: "ATTESTD_PG_DIRECT_URL must start with postgres:// or postgresql://",
      validation: (u) => u.startsWith("postgres://") || u.startsWith("postgresql://")
    })
  )),
  keyCacheTtl: duration("ATTESTD_KEY_CACHE_TTL", "2s")
}).pipe(
  Config.mapOrFail((c) => {
    if (c.mode === "production" && (c.tsaUrls.length === 0 || c.otsCalendars.length === 0)) {
      return Either.left(
        ConfigError.MissingData(
          ["ATTESTD_TSA_URL", "ATTESTD_OTS_CALENDARS"],
          "production mode refuses to start without ATTESTD_TSA_URL and ATTESTD_OTS_CALENDARS"
        )
      )
    }
    if (c.mode === "production" && Option.isNone(c.tsaCaFile)) {
      return Either.left(
        ConfigError.MissingData(
          ["ATTESTD_TSA_CA_FILE"],
          "production mode refuses to start without ATTESTD_TSA_CA_FILE (PEM trust anchors): every T1 token is validated against them before it is stored"
        )
      )
    }
    if (c.mode === "production" && c.bitcoinSources.length === 0) {
      return Either.left(
        ConfigError.MissingData(
          ["ATTESTD_BITCOIN_SOURCES"],
          "production mode refuses to start without ATTESTD_BITCOIN_SOURCES (comma-separated Esplora-compatible base URLs, e.g. https://blockstream.info/api): T2 needs the Bitcoin block header of every anchor"
        )
      )
    }
    if (Option.isSome(c.databaseReadUrl) && !Option.exists(c.databaseUrl, (url) => url.startsWith("postgres://") || url.startsWith("postgresql://"))) {
      return Either.left(
        ConfigError.InvalidData(["ATTESTD_PG_READ_URL"], "ATTESTD_PG_READ_URL needs DATABASE_URL to be a postgres:// URL (a replica of it)")
      )
    }
    const enabled = Option.getOrElse(c.timestamping.enabled, () => (c.mode === "demo" ? "on" : "off")) === "on"
    if (c.mode === "production" && enabled) {
      const missing = [
        ...(Option.isNone(c.timestamping.certChainFile) ? ["ATTESTD_TSA_CERT_CHAIN"] : []),
        ...(Option.isNone(c.timestamping.policy) ? ["ATTESTD_TSA_POLICY"] : []),
        ...(c.timestamping.ntpServers.length === 0 ? ["ATTESTD_NTP_SERVERS"] : [])
      ]
      if (missing.length > 0) {
        return Either.left(
          ConfigError.MissingData(
            missing,
            `production mode with ATTESTD_TIMESTAMPING=on refuses to start without ${missing.join(", ")}: the TSA's certificate chain, its own policy OID and the NTP servers that discipline its clock`
          )
        )
      }
    }
    return Either.right({
      ...c,
      timestamping: { ...c.timestamping, enabled, policy: Option.getOrElse(c.timestamping.policy, () => DEMO_TSA_POLICY) },
      databaseUrl: Option.getOrElse(c.databaseUrl, () => `sqlite:${c.dataDir.replace(/\/+$/, "")}/attestd.db`),
      environment: Option.getOrElse(c.environment, () => (c.mode === "demo" ? "test" : "production") as Environment)
    })
  })
)

export class AppConfig extends Context.Tag("Platform/AppConfig")<AppConfig, AppConfigShape>() {
  static readonly layer = Layer.effect(AppConfig, appConfig)
  /**
   * A configuration for servers run in-process (the tests): every setting as `attestd serve` reads
   * it from an empty environment, so each default is stated once (in `appConfig`), except an
   * in-memory database, any free port, and no public limit (in-process test servers poll public
   * routes; the tests of the limit set one). `overrides` win.
   */
  static readonly make = (overrides: Partial<AppConfigShape> = {}): AppConfigShape => ({
    ...Effect.runSync(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map()))),
    port: 0,
    databaseUrl: "sqlite::memory:",
    publicRateLimit: Option.none(),
    ...overrides
  })
}

export const currentConfig = Effect.map(AppConfig, (c) => c)

/**
 * ATTESTD_SHUTDOWN_TIMEOUT: on SIGTERM/SIGINT, how long in-flight requests may take to
 * finish before their connections are closed (default 10s).
 */
export const shutdownTimeout = duration("ATTESTD_SHUTDOWN_TIMEOUT", "10s")
