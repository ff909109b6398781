/**
 * The storage switch: `sqlite:PATH` (embedded default) or `postgres://…`, and the
 * migrations of both dialects. Everything above this file talks to `SqlClient`.
 */
import { Migrator, SqlClient, SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Context, Duration, Effect, Layer, Option, Predicate, Redacted } from "effect"
import { migrations } from "./migrations/index.js"
import { prepareSqliteFile } from "./PrivateFiles.js"

export type Dialect = "sqlite" | "pg"

export const dialectOf = (url: string): Dialect => {
  if (url.startsWith("sqlite:")) return "sqlite"
  if (url.startsWith("postgres://") || url.startsWith("postgresql://")) return "pg"
  throw new Error(`DATABASE_URL must start with sqlite: or postgres://, got ${url.split(":")[0]}:`)
}

/** The SQLite file a `sqlite:` DATABASE_URL names, or ":memory:" for `sqlite:` alone. */
export const sqlitePath = (url: string): string => url.slice("sqlite:".length) || ":memory:"

/** The SQLite database file behind the SqlClient: none for Postgres and in-memory. */
export class DatabaseFile extends Context.Tag("Platform/DatabaseFile")<DatabaseFile, Option.Option<string>>() {}

/** The SQLite database file behind the current SqlClient: undefined for Postgres and in-memory. */
export const currentSqliteFile: Effect.Effect<string | undefined, never, DatabaseFile> = Effect.map(DatabaseFile, Option.getOrUndefined)

/**
 * Pages the WAL may hold before a commit copies them into the database (SQLite's
 * default is 1,000). A checkpoint runs inside the COMMIT that crosses the limit,
 * on the event loop, and writes every page changed since the last one: attests
 * change the same index pages again and again, so a rarer checkpoint writes each
 * of them once for many commits. Measured inside a server on SQLite (attest-new,
 * 30,000 requests, statements timed, two runs each): COMMIT 33.6–35.3 → 26.7–26.9
 * µs per request; a checkpoint's pause grows (longest COMMIT 6.6–17.8 → 10.9–11.5 ms).
 * The WAL file grows to ~40 MiB and is reused from its start after each checkpoint.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 10_000

const sqliteLayer = (url: string) => {
  const filename = sqlitePath(url)
  // webhook secrets and claim data: 0600 in a 0700 directory, whatever the umask
  if (filename !== ":memory:") prepareSqliteFile(filename)
  const pragmas = Layer.effectDiscard(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe("PRAGMA busy_timeout = 10000")
      // FULL, not NORMAL: in WAL mode NORMAL may lose the last committed transactions on
      // power loss, and an acknowledged T0 (or a sealed batch, an anchor, a webhook outbox
      // row) must survive it. Group commit amortises the extra fsync per commit.
      yield* sql.unsafe("PRAGMA synchronous = FULL")
      yield* sql.unsafe("PRAGMA foreign_keys = ON")
      yield* sql.unsafe(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`)
    })
  )
  return Layer.provideMerge(pragmas, SqliteClient.layer({ filename })).pipe(
    Layer.merge(Layer.succeed(DatabaseFile, filename === ":memory:" ? Option.none() : Option.some(filename)))
  )
}

const pgLayer = (url: string, maxConnections: number) =>
  PgClient.layer({
    url: Redacted.make(url),
    maxConnections,
    connectTimeout: Duration.seconds(5),
    applicationName: "attestd"
  }).pipe(Layer.merge(Layer.succeed(DatabaseFile, Option.none())))

/** The SqlClient for a DATABASE_URL. */
export const layerFromUrl = (
  url: string,
  options: { readonly maxConnections?: number } = {}
): Layer.Layer<SqlClient.SqlClient | DatabaseFile> =>
  dialectOf(url) === "sqlite"
    ? sqliteLayer(url).pipe(Layer.orDie)
    : pgLayer(url, options.maxConnections ?? 10).pipe(Layer.orDie)

/**
 * Applies pending migrations. On Postgres a session advisory lock, held on a
 * reserved connection, serialises instances that start at the same moment.
 */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const started = Date.now()
  const run = Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: "attestd_migrations" }).pipe(
    Effect.tap((applied) =>
      applied.length === 0
        ? Effect.logDebug("database schema is up to date")
        : Effect.logInfo(
          `applied ${applied.length} migration(s) in ${Date.now() - started} ms: ${applied.map(([id, name]) => `${id}_${name}`).join(", ")}`
        )
    )
  )
  return yield* sql.onDialectOrElse({
    pg: () =>
      Effect.scoped(Effect.gen(function*() {
        const conn = yield* sql.reserve
        yield* Effect.acquireRelease(
          conn.executeRaw("SELECT pg_advisory_lock(727001)", []),
          () => Effect.ignore(conn.executeRaw("SELECT pg_advisory_unlock(727001)", []))
        )
        return yield* run
      })),
    orElse: () => run
  })
})

/** Whether the current fiber runs inside a transaction (`sql.withTransaction`). */
export const inTransaction: Effect.Effect<boolean> = Effect.map(
  Effect.serviceOption(SqlClient.TransactionConnection),
  Option.isSome
)

export const currentDialect = Effect.map(
  SqlClient.SqlClient,
  (sql): Dialect => sql.onDialectOrElse({ pg: () => "pg" as const, orElse: () => "sqlite" as const })
)

/** The database at `config.databaseUrl`, migrated unless told otherwise. */
export const DatabaseLive = (config: { readonly databaseUrl: string }, options: { readonly migrate?: boolean } = {}) => {
  const sql = layerFromUrl(config.databaseUrl)
  return options.migrate === false ? sql : Layer.provideMerge(Layer.effectDiscard(Effect.orDie(migrate)), sql)
}

/** The driver's code behind a SqlError (a SQLSTATE from Postgres, an errno such as ECONNREFUSED), if any. */
const codeOf = (e: SqlError.SqlError): string | undefined =>
  Predicate.hasProperty(e.cause, "code") && typeof e.cause.code === "string" ? e.cause.code : undefined

/** SQLSTATE 40001 (serialization failure) and 40P01 (deadlock): Postgres rolled the transaction back, and it can run again. */
export const isRetryableConflict = (e: unknown): boolean => {
  const code = e instanceof SqlError.SqlError ? codeOf(e) : undefined
  return code === "40001" || code === "40P01"
}

/** A pause of real time (setTimeout, not the Effect clock): a retry must not wait for a TestClock. */
const pause = (ms: number) =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

/**
 * `transaction` again, up to 5 more times with a jittered pause (5–40 ms, growing), while it fails
 * with a serialization failure or a deadlock; any other failure at once.
 */
export const retryingConflicts = <A, E, R>(transaction: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const attempt = (n: number): Effect.Effect<A, E, R> =>
    Effect.catchIf(transaction, (e) => n < 5 && isRetryableConflict(e), () =>
      Effect.zipRight(pause(Math.floor((0.5 + Math.random()) * 5 * 2 ** Math.min(n, 3))), attempt(n + 1)))
  return attempt(0)
}

/** Error codes of a database that is unreachable, restarting or failing over, rather than of a statement. */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENOTFOUND", "57P01", "57P02", "57P03", "53300"])

/**
 * Whether `e` says the database cannot be reached now (refused, reset, timed out, shutting down,
 * too many connections, SQLSTATE class 08): the request may succeed when retried, so it is a 503.
 */
export const isDatabaseUnavailable = (e: unknown): boolean => {
  if (!(e instanceof SqlError.SqlError)) return false
  const code = codeOf(e)
  if (code !== undefined && (UNAVAILABLE_CODES.has(code) || code.startsWith("08"))) return true
  const text = `${e.message} ${e.cause instanceof Error ? e.cause.message : ""}`
  return /connection terminated|connection timed out|failed to connect|timeout exceeded when trying to connect/i.test(text)
}
