/**
 * The SQLite SqlClient: better-sqlite3 on the event loop, as `@effect/sql-sqlite-node`
 * runs it (one connection behind a one-permit semaphore, a transaction holds it from
 * BEGIN to COMMIT, prepared statements cached, WAL), with one difference: the fsync
 * that makes a commit durable runs on libuv's thread pool instead of on the event loop.
 *
 * With `synchronous = FULL`, every COMMIT fsyncs the WAL inside the synchronous driver
 * call, and the event loop serves no one meanwhile (~0.9 ms per commit, most of what
 * SQLite costs an attest: README, Performance). Here the connection runs with
 * `synchronous = NORMAL`, which in WAL mode writes a commit's frames without syncing
 * them (checkpoints still sync, as under FULL), and the client syncs the WAL file itself
 * after every statement that ends a write: a COMMIT, or a write outside a transaction.
 * That statement does not complete until the fsync has: an attestation is acknowledged
 * only once it is on disk, as under FULL.
 *
 * While the fsync runs, no other statement starts on the connection (each waits at a
 * barrier), so nothing read through the service ever shows data that is not yet
 * durable: a verify cannot find, nor a webhook announce, an attestation that a power
 * cut would take back. Meanwhile the event loop goes on reading, authenticating and
 * signing the next requests, which join the next group commit.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import Sqlite from "better-sqlite3"
import { Context, Effect, Layer, Scope } from "effect"
import { closeSync, fsync, openSync } from "node:fs"

export interface SqliteConfig {
  readonly filename: string
  /** Run once on the new connection, in order, before any statement (e.g. "foreign_keys = ON"). */
  readonly pragmas: ReadonlyArray<string>
  /** Prepared statements kept (the least recently used go first). */
  readonly prepareCacheSize?: number
  /** Makes the WAL file durable: node:fs `fsync` (on libuv's thread pool) unless a test holds or fails it. */
  readonly syncFile?: (fd: number, done: (error: Error | null) => void) => void
}

const failed = (cause: unknown, message = "Failed to execute statement") => new SqlError({ cause, message })

/** The one connection: statements, the WAL sync and the barrier that holds statements during it. */
const connect = (config: SqliteConfig) =>
  Effect.gen(function*() {
    const db = yield* Effect.try({ try: () => new Sqlite(config.filename), catch: (e) => failed(e, `Failed to open ${config.filename}`) })
    const walFile = config.filename === ":memory:" ? undefined : `${config.filename}-wal`
    let walFd: number | undefined
    const syncFile = config.syncFile ?? fsync
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        if (walFd !== undefined) closeSync(walFd)
        db.close()
      })
    )
    yield* Effect.try({
      try: () => {
        db.pragma("journal_mode = WAL")
        for (const pragma of config.pragmas) db.pragma(pragma)
        // the commits' fsync is this client's (above); checkpoints keep theirs
        if (walFile !== undefined) db.pragma("synchronous = NORMAL")
      },
      catch: (e) => failed(e, `Failed to set up ${config.filename}`)
    })

    // a Map iterates in insertion order: re-inserting on use keeps the least recently used first
    const cacheSize = config.prepareCacheSize ?? 200
    const cache = new Map<string, Sqlite.Statement>()
    const prepared = (sql: string): Sqlite.Statement => {
      let statement = cache.get(sql)
      if (statement !== undefined) {
        cache.delete(sql)
      } else {
        statement = db.prepare(sql)
        if (cache.size >= cacheSize) cache.delete(cache.keys().next().value!)
      }
      cache.set(sql, statement)
      return statement
    }

    // Written since the last sync: a statement that is not read-only ran. BEGIN and
    // COMMIT count as read-only (sqlite3_stmt_readonly), so a COMMIT is found by the
    // connection leaving its transaction with writes behind it.
    let unsynced = false
    let syncing = false
    const waiting: Array<() => void> = []
    const syncWal = Effect.async<void, SqlError>((resume) => {
      syncing = true
      const done = (cause: unknown) => {
        syncing = false
        for (const wake of waiting.splice(0)) wake()
        resume(cause === null ? Effect.void : Effect.fail(failed(cause, "Failed to sync the write-ahead log")))
      }
      try {
        walFd ??= openSync(walFile!, "r+")
      } catch (e) {
        return done(e)
      }
      syncFile(walFd, done)
    })
    const barrier = Effect.async<void>((resume) => {
      waiting.push(() => resume(Effect.void))
    })

    const run = <A>(statement: Sqlite.Statement, execute: (s: Sqlite.Statement) => A, safeIntegers: boolean): Effect.Effect<A, SqlError> => {
      // re-checked after each wait: a statement woken by one sync may meet the next
      if (syncing) return Effect.zipRight(barrier, Effect.suspend(() => run(statement, execute, safeIntegers)))
      let result: A
      try {
        statement.safeIntegers(safeIntegers)
        result = execute(statement)
      } catch (cause) {
        return Effect.fail(failed(cause))
      }
      if (!statement.readonly) unsynced = true
      if (!unsynced || db.inTransaction || walFile === undefined) return Effect.succeed(result)
      unsynced = false
      return Effect.as(syncWal, result)
    }

    const rows = (s: Sqlite.Statement, params: ReadonlyArray<unknown>, raw: boolean): ReadonlyArray<any> => {
      if (s.reader) return s.all(...params)
      const info = s.run(...params)
      return raw ? (info as unknown as ReadonlyArray<any>) : []
    }
    const values = (s: Sqlite.Statement, params: ReadonlyArray<unknown>): ReadonlyArray<ReadonlyArray<unknown>> => {
      if (!s.reader) {
        s.run(...params)
        return []
      }
      s.raw(true)
      try {
        return s.all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
      } finally {
        s.raw(false)
      }
    }
    const statementOf = (sql: string, fresh: boolean) =>
      Effect.try({ try: () => (fresh ? db.prepare(sql) : prepared(sql)), catch: (e) => failed(e, "Failed to prepare statement") })
    const execute = (sql: string, params: ReadonlyArray<unknown>, raw: boolean, fresh: boolean) =>
      Effect.withFiberRuntime<ReadonlyArray<any>, SqlError>((fiber) =>
        Effect.flatMap(statementOf(sql, fresh), (s) => run(s, (s) => rows(s, params, raw), Context.get(fiber.currentContext, SqlClient.SafeIntegers)))
      )

    const connection: Connection = {
      execute: (sql, params, transformRows) => {
        const out = execute(sql, params, false, false)
        return transformRows ? Effect.map(out, transformRows) : out
      },
      executeRaw: (sql, params) => execute(sql, params, true, false),
      executeValues: (sql, params) =>
        Effect.withFiberRuntime((fiber) =>
          Effect.flatMap(statementOf(sql, false), (s) => run(s, (s) => values(s, params), Context.get(fiber.currentContext, SqlClient.SafeIntegers)))
        ),
      executeUnprepared: (sql, params, transformRows) => {
        const out = execute(sql, params ?? [], false, true)
        return transformRows ? Effect.map(out, transformRows) : out
      },
      executeStream: () => Effect.dieMessage("executeStream not implemented")
    }
    return connection
  })

/** The client: `@effect/sql-sqlite-node`'s acquirers over the one connection. */
export const make = (config: SqliteConfig) =>
  Effect.gen(function*() {
    const connection = yield* connect(config)
    const semaphore = yield* Effect.makeSemaphore(1)
    const acquirer = semaphore.withPermits(1)(Effect.succeed(connection))
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.as(
        Effect.zipRight(
          restore(semaphore.take(1)),
          Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))
        ),
        connection
      )
    )
    return yield* SqlClient.make({
      acquirer,
      compiler: Statement.makeCompilerSqlite(),
      transactionAcquirer,
      spanAttributes: [["db.system.name", "sqlite"]]
    })
  })

/** The SqlClient for one database file (or ":memory:"). */
export const layer = (config: SqliteConfig): Layer.Layer<SqlClient.SqlClient, SqlError> =>
  Layer.scoped(SqlClient.SqlClient, make(config)).pipe(Layer.provide(Reactivity.layer))
