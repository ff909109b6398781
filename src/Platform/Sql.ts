/**
 * The storage switch: `sqlite:PATH` (embedded default) or `postgres://…`, and the
 * migrations of both dialects. Everything above this file talks to `SqlClient`.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlError from "@effect/sql/SqlError"
import type { Connection } from "@effect/sql/SqlConnection"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { Cause, Context, Effect, Layer, Option, Predicate } from "effect"
import { Socket } from "node:net"
import pg from "pg"
import { migrations } from "./migrations/index.js"
import { prepareSqliteFile } from "./PrivateFiles.js"
import { sleepRealTime } from "./RealTime.js"

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

/** How long taking a connection from the pool may wait, a new connection's handshake included. */
export const CONNECT_TIMEOUT_MS = 5_000

/** A statement outstanding this long makes the watchdog ask whether the server still answers. */
export const STUCK_AFTER_MS = 3_000
/** How long the watchdog's probe (a new connection and `SELECT 1`) may take before the server counts as not answering. */
export const PROBE_TIMEOUT_MS = 2_000
/** The error of a statement not sent because the server is silent (the watchdog, makePgPool). */
const SILENT = "the database does not answer: statement not sent"

/**
 * `SELECT 1` on a connection of its own, bounded by PROBE_TIMEOUT_MS: whether the server (or
 * the pooler in front of it and a server behind that) answers now. The probe's socket is the
 * probe's own, destroyed at the deadline: a frozen server never answers its goodbye either.
 */
const probe = (url: string, applicationName: string): Effect.Effect<boolean> =>
  Effect.async<boolean>((resume) => {
    const socket = new Socket()
    const client = new pg.Client({ connectionString: url, application_name: applicationName, stream: () => socket })
    client.on("error", () => {})
    let done = false
    const finish = (answered: boolean) => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.succeed(answered))
    }
    const timer = setTimeout(() => finish(false), PROBE_TIMEOUT_MS)
    client.connect().then(() => client.query("SELECT 1")).then(() => finish(true), () => finish(false))
    return Effect.sync(() => finish(false))
  })

/**
 * A pg pool whose connections carry no session state of their own (PgBouncer in transaction
 * mode hands each transaction to any server connection): no startup parameters beyond
 * application_name (PgBouncer refuses `options` and `statement_timeout` at login), unnamed
 * statements only (node-postgres names one only when asked), and TCP keepalives so a
 * connection to a vanished server fails instead of waiting forever.
 *
 * A server that stops answering without closing its connections (a frozen host, a network
 * partition, a failover that left the old primary's sockets open) would hold every statement
 * already sent to it until it answers again. A watchdog bounds that: once a second it looks
 * for statements outstanding over STUCK_AFTER_MS; if there are any, it probes the server on a
 * new connection (at most once per STUCK_AFTER_MS), and when the probe is not answered within
 * PROBE_TIMEOUT_MS the server is silent: the watchdog destroys the sockets of every statement
 * outstanding, and until a probe (one each time round) is answered, a statement is not sent
 * but fails at once. The callers fail with "Connection terminated" or SILENT (a 503 at the
 * edge, a pause in a worker); Postgres rolls back the transactions of the destroyed sockets
 * when it notices they are gone, so nothing is half written. A statement that is merely slow
 * (a large seal) keeps running: the probe is answered. So whatever waits on a server that
 * went silent, even behind another statement, fails within about STUCK_AFTER_MS + 1 s +
 * PROBE_TIMEOUT_MS, and at once while it is known silent; within a second of the server
 * answering again (the probe in flight is answered then) statements are sent again.
 * The pool's connections are a Client of this pool's own that notes each statement it sends
 * (the callback form, which @effect/sql-pg uses) and owns its socket (node-postgres's
 * `stream` option), so dropping one needs nothing private.
 */
export const makePgPool = (url: string, options: { readonly max: number; readonly applicationName: string }) =>
  Effect.gen(function*() {
    /** The connections with statements outstanding: when each was sent. */
    const busy = new Map<WatchedClient, Set<{ readonly at: number }>>()
    /** Whether the last probe went unanswered: the server is silent until one is answered. */
    let silent = false
    class WatchedClient extends pg.Client {
      readonly socket: Socket
      constructor(config: pg.ClientConfig = {}) {
        let socket: Socket | undefined
        super({ ...config, stream: () => (socket = new Socket()) })
        this.socket = socket!
        // A connection that breaks fails its statements; the 'error' it also emits (at a moment no
        // borrower may be listening, e.g. when the watchdog drops it) must never end the process.
        this.on("error", () => {})
      }
      // pg.Client.query is overloaded; this one signature stands for all of them
      override query(...args: Array<never>): never {
        const last = args.length - 1
        const callback = args[last]
        // (a query object without a callback, such as a cursor, is not watched)
        if (typeof callback !== "function") return (super.query as (...a: Array<unknown>) => never)(...args)
        if (silent) {
          // not sent: the connection stays as it was, and the caller hears at once
          const error = new Error(SILENT)
          queueMicrotask(() => (callback as (e: Error) => void)(error))
          return undefined as never
        }
        const sent = { at: Date.now() }
        const outstanding = busy.get(this) ?? new Set()
        outstanding.add(sent)
        busy.set(this, outstanding)
        const watched = (...result: Array<unknown>) => {
          outstanding.delete(sent)
          if (outstanding.size === 0) busy.delete(this)
          ;(callback as (...r: Array<unknown>) => void)(...result)
        }
        return (super.query as (...a: Array<unknown>) => never)(...args.slice(0, last), watched)
      }
    }
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new pg.Pool({
          connectionString: url,
          max: options.max,
          connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
          idleTimeoutMillis: 10_000,
          keepAlive: true,
          keepAliveInitialDelayMillis: 10_000,
          application_name: options.applicationName,
          Client: WatchedClient
        })
        // an idle connection that breaks (a restart) is dropped by the pool; the error is not ours to throw
        pool.on("error", () => {})
        return pool
      }),
      (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
    )
    let probedAt = Number.NEGATIVE_INFINITY
    const watch = Effect.suspend(() => {
      const now = Date.now()
      const stuck = [...busy.values()].some((sent) => [...sent].some((s) => s.at <= now - STUCK_AFTER_MS))
      if (!silent && (!stuck || now - probedAt < STUCK_AFTER_MS)) return Effect.void
      probedAt = now
      return Effect.flatMap(probe(url, options.applicationName), (answered) => {
        const wasSilent = silent
        silent = !answered
        if (answered) return wasSilent ? Effect.logInfo("the database answers again") : Effect.void
        // on a silent server whatever is outstanding is stuck, however recently it was sent
        const dropped = [...busy.keys()]
        for (const client of dropped) client.socket.destroy()
        return wasSilent
          ? Effect.void
          : Effect.logWarning(
            `the database left a statement unanswered for ${STUCK_AFTER_MS / 1000} s and a new connection for ${PROBE_TIMEOUT_MS / 1000} s: ` +
              `dropped ${dropped.length} connection(s), and drops those that wait on it until it answers (their statements fail and are rolled back)`
          )
      })
    })
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(sleepRealTime(1_000), watch)))
    return pool
  })

/**
 * A connection whose statements, run outside a transaction, run again when Postgres rolls
 * them back for a serialization failure or a deadlock (under `default_transaction_isolation =
 * serializable` a single UPDATE of a row another transaction changed is one); a transaction
 * is retried as a whole by its caller (retryingConflicts).
 */
const retryingStatements = (conn: Connection): Connection => ({
  execute: (sql, params, transformRows) => retryingConflicts(conn.execute(sql, params, transformRows)),
  executeRaw: (sql, params) => retryingConflicts(conn.executeRaw(sql, params)),
  executeStream: (sql, params, transformRows) => conn.executeStream(sql, params, transformRows),
  executeValues: (sql, params) => retryingConflicts(conn.executeValues(sql, params)),
  executeUnprepared: (sql, params, transformRows) => retryingConflicts(conn.executeUnprepared(sql, params, transformRows))
})

/**
 * The Postgres SqlClient: @effect/sql-pg's connections over makePgPool, assembled so that a
 * statement outside a transaction takes its connection uninterruptibly (an interrupted wait
 * must not leave a pooled connection taken for good) and retries its conflicts.
 */
const pgClient = (url: string, maxConnections: number) =>
  Effect.gen(function*() {
    const pool = yield* makePgPool(url, { max: maxConnections, applicationName: "attestd" })
    const base = yield* PgClient.fromPool({ acquire: Effect.succeed(pool), applicationName: "attestd" })
    // fail at start, as a wrong URL should, rather than at the first request
    yield* Effect.tryPromise({
      try: () => pool.query("SELECT 1"),
      catch: (cause) => new SqlError.SqlError({ cause, message: "PgClient: Failed to connect" })
    })
    return yield* SqlClient.make({
      acquirer: Effect.map(Effect.uninterruptible(base.reserve), retryingStatements),
      transactionAcquirer: base.reserve,
      compiler: PgClient.makeCompiler(),
      spanAttributes: [["db.system.name", "postgresql"]]
    })
  })

const pgLayer = (url: string, maxConnections: number) =>
  Layer.scoped(SqlClient.SqlClient, pgClient(url, maxConnections)).pipe(
    Layer.provide(Reactivity.layer),
    Layer.merge(Layer.succeed(DatabaseFile, Option.none()))
  )

/** The SqlClient for a DATABASE_URL. */
export const layerFromUrl = (
  url: string,
  options: { readonly maxConnections?: number } = {}
): Layer.Layer<SqlClient.SqlClient | DatabaseFile> =>
  dialectOf(url) === "sqlite"
    ? sqliteLayer(url).pipe(Layer.orDie)
    : pgLayer(url, options.maxConnections ?? 10).pipe(Layer.orDie)

const MIGRATIONS_TABLE = "attestd_migrations"
const MIGRATION_LOCK = 727001

/**
 * Applies pending migrations. On Postgres everything happens in one transaction that
 * first takes a transaction-level advisory lock: instances starting at the same moment
 * (through a transaction pooler too) apply them one after the other, and the lock goes
 * with the transaction, whatever happens to the connection. READ COMMITTED, whatever the
 * database's default: a starter that waited for the lock must see what the one before
 * it committed. The migrations table is created here, under the lock, with the
 * definition @effect/sql's Migrator gives it (the Migrator's own check-then-create
 * would race, and a failed check would abort this transaction).
 */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const started = Date.now()
  const run = Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: MIGRATIONS_TABLE }).pipe(
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
      sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        yield* sql.unsafe(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`)
        yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (
  migration_id integer primary key,
  created_at timestamp with time zone not null default now(),
  name text not null
)`)
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

/** Whether a failure is a conflict (as a failure, or as a defect: @effect/sql dies when COMMIT fails) and nothing else. */
const causeIsConflict = (cause: Cause.Cause<unknown>): boolean => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) return isRetryableConflict(failure.value)
  const defect = Cause.dieOption(cause)
  return Option.isSome(defect) && isRetryableConflict(defect.value)
}

/**
 * `transaction` again, up to 5 more times with a jittered pause (5–40 ms, growing), while it fails
 * with a serialization failure or a deadlock (at COMMIT too); any other failure at once. Inside an
 * outer transaction it runs once: a conflict aborts the whole transaction, so only the outermost
 * one can run again.
 */
export const retryingConflicts = <A, E, R>(transaction: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const attempt = (n: number): Effect.Effect<A, E, R> =>
    Effect.catchAllCause(transaction, (cause) =>
      n < 5 && causeIsConflict(cause)
        ? Effect.zipRight(sleepRealTime(Math.floor((0.5 + Math.random()) * 5 * 2 ** Math.min(n, 3))), attempt(n + 1))
        : Effect.failCause(cause))
  return Effect.flatMap(inTransaction, (inside) => (inside ? transaction : attempt(0)))
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
  return text.includes(SILENT) ||
    /connection terminated|connection timed out|failed to connect|timeout exceeded when trying to connect|not queryable|query read timeout|query_wait_timeout|server conn crashed|server login/i.test(text)
}

/**
 * Why a failure is transient, if it is: the database is out of reach now ("unavailable"), or
 * conflicts outlasted their retries ("conflict"), as a failure or a defect anywhere in the
 * cause. Either is worth a 503 with Retry-After, and a worker's pause, rather than an internal
 * error; the two are told apart in the worker's log.
 */
export const transientDatabaseFailure = (cause: Cause.Cause<unknown>): Option.Option<"unavailable" | "conflict"> =>
  Cause.find(cause, (c) => {
    const e = Cause.isDieType(c) ? c.defect : Cause.isFailType(c) ? c.error : undefined
    if (e === undefined) return Option.none()
    if (isDatabaseUnavailable(e)) return Option.some("unavailable" as const)
    return isRetryableConflict(e) ? Option.some("conflict" as const) : Option.none()
  })

/** Whether a failure is transient (transientDatabaseFailure). */
export const isTransientDatabaseFailure = (cause: Cause.Cause<unknown>): boolean => Option.isSome(transientDatabaseFailure(cause))
