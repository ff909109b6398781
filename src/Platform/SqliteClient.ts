/**
 * The SqlClient for SQLite: @effect/sql's client over one better-sqlite3
 * connection, as @effect/sql-sqlite-node builds it (statements prepared once,
 * a transaction holds the connection through a one-permit semaphore), plus what
 * that package does not give: the same connection for a transaction run
 * synchronously on the event loop (`SqliteNow.transactionNow`).
 *
 * better-sqlite3 is synchronous, so a transaction that begins and commits in one
 * turn of the event loop cannot interleave with anything. It only must not run
 * inside a transaction an Effect fiber has open on the connection (between that
 * fiber's BEGIN and COMMIT, which may span turns): then it answers UNDECIDED and
 * the caller takes the Effect path, which waits for the connection. The group
 * commit of attests uses it (Attestor): one group's reads and writes without a
 * fiber or @effect/sql in the way (README, Performance).
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient, SqlError, Statement } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import Database from "better-sqlite3"
import { Context, Effect, Layer, Scope, Stream } from "effect"
import { UNDECIDED, type Undecided } from "../Domain/Undecided.js"

/** Statements on the connection, run now (inside SqliteNow.runNow). */
export interface RunNow {
  /** The rows of a statement built with the SqlClient's `sql` template: compiled by its compiler, run here. */
  readonly statementRows: (statement: Statement.Statement<unknown>) => ReadonlyArray<Record<string, unknown>>
  /**
   * A statement that returns no rows, run here: how many rows it changed, and the rowid of the
   * last row an INSERT on this connection added (stale when it changed none).
   */
  readonly statementRun: (statement: Statement.Statement<unknown>) => { readonly changes: number; readonly lastInsertRowid: number }
  /** `body` in a transaction begun and committed now; a throw rolls it back and is rethrown. */
  readonly transaction: <A>(body: () => A) => A
}

export interface SqliteNowShape {
  /** The database file, or ":memory:". */
  readonly filename: string
  /**
   * `body` now, on the SqlClient's own connection; UNDECIDED (and nothing run)
   * while a fiber's transaction is open on it. `body` must not wait for anything.
   */
  readonly runNow: <A>(body: (run: RunNow) => A) => A | Undecided
}

/** The SQLite connection behind the current SqlClient; undefined on Postgres. */
export class SqliteNow extends Context.Reference<SqliteNow>()("Platform/SqliteNow", {
  defaultValue: (): SqliteNowShape | undefined => undefined
}) {}

/**
 * Called with the SQL of each statement SQLite runs on the connection, on either
 * path (better-sqlite3's `verbose`): for tests that hold a statement sequence.
 * None by default.
 */
export class SqliteStatementObserver extends Context.Reference<SqliteStatementObserver>()("Platform/SqliteStatementObserver", {
  defaultValue: (): ((source: string) => void) | undefined => undefined
}) {}

/** Prepared statements kept per connection (as @effect/sql-sqlite-node's default). */
const PREPARED_CAPACITY = 200

const make = (filename: string) =>
  Effect.gen(function*() {
    const verbose = yield* SqliteStatementObserver
    const db = yield* Effect.acquireRelease(
      Effect.sync(() => new Database(filename, verbose === undefined ? {} : { verbose })),
      (db) => Effect.sync(() => db.close())
    )
    db.pragma("journal_mode = WAL")

    // The least recently used goes when the cache is full: each entry keeps the tick of its
    // last use, so a hit writes a number rather than moving the entry to the end of the Map
    // (a delete and a set per statement had the Map rehashed every few statements, and each
    // new table survived a scavenge; README, Performance: "Responses kept by a Set").
    // Eviction, only past PREPARED_CAPACITY distinct statements, scans for the oldest.
    const prepared = new Map<string, { readonly statement: Database.Statement; used: number }>()
    let tick = 0
    const prepare = (source: string): Database.Statement => {
      const hit = prepared.get(source)
      if (hit !== undefined) {
        hit.used = ++tick
        return hit.statement
      }
      const statement = db.prepare(source)
      if (prepared.size >= PREPARED_CAPACITY) {
        let oldest: string | undefined
        let oldestUse = Infinity
        for (const [k, e] of prepared) {
          if (e.used < oldestUse) {
            oldestUse = e.used
            oldest = k
          }
        }
        prepared.delete(oldest!)
      }
      prepared.set(source, { statement, used: ++tick })
      return statement
    }
    const runRows = (statement: Database.Statement, params: ReadonlyArray<unknown>, raw: boolean): ReadonlyArray<any> => {
      if (statement.reader) return statement.all(...params)
      const result = statement.run(...params)
      return raw ? result as unknown as ReadonlyArray<any> : []
    }

    const attempt = <A>(message: string, f: () => A): Effect.Effect<A, SqlError.SqlError> =>
      Effect.try({ try: f, catch: (cause) => new SqlError.SqlError({ cause, message }) })
    const execute = (source: string, params: ReadonlyArray<unknown>, raw: boolean) =>
      Effect.withFiberRuntime<ReadonlyArray<any>, SqlError.SqlError>((fiber) =>
        attempt("Failed to execute statement", () => {
          const statement = prepare(source)
          // Set both ways: the statement is cached, and a flag set once would stay set for every later caller.
          statement.safeIntegers(Context.get(fiber.currentContext, SqlClient.SafeIntegers))
          return runRows(statement, params, raw)
        })
      )

    const connection: Connection = {
      execute: (source, params, transformRows) =>
        transformRows ? Effect.map(execute(source, params, false), transformRows) : execute(source, params, false),
      executeRaw: (source, params) => execute(source, params, true),
      executeValues: (source, params) =>
        Effect.flatMap(attempt("Failed to prepare statement", () => prepare(source)), (statement) =>
          attempt("Failed to execute statement", () => {
            if (!statement.reader) return (statement.run(...params), [])
            statement.raw(true)
            try {
              return statement.all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
            } finally {
              statement.raw(false)
            }
          })),
      executeUnprepared: (source, params, transformRows) => {
        const rows = Effect.flatMap(attempt("Failed to prepare statement", () => db.prepare(source)), (statement) =>
          attempt("Failed to execute statement", () => runRows(statement, params ?? [], false)))
        return transformRows ? Effect.map(rows, transformRows) : rows
      },
      executeStream: () => Stream.dieMessage("executeStream not implemented")
    }

    const semaphore = yield* Effect.makeSemaphore(1)
    const compiler = Statement.makeCompilerSqlite()
    const client = yield* SqlClient.make({
      acquirer: semaphore.withPermits(1)(Effect.succeed(connection)),
      compiler,
      transactionAcquirer: Effect.uninterruptibleMask((restore) =>
        Effect.as(
          Effect.zipRight(
            restore(semaphore.take(1)),
            Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, semaphore.release(1)))
          ),
          connection
        )
      ),
      spanAttributes: [["db.system.name", "sqlite"]]
    })

    const run: RunNow = {
      statementRows: (statement) => {
        const [source, params] = statement.compile()
        // numbers, as the fiber path reads without SafeIntegers (a fiber may have set it on this cached statement)
        return runRows(prepare(source).safeIntegers(false), params, false)
      },
      statementRun: (statement) => {
        const [source, params] = statement.compile()
        const info = prepare(source).safeIntegers(false).run(...params)
        return { changes: info.changes, lastInsertRowid: Number(info.lastInsertRowid) }
      },
      transaction: (body) => {
        prepare("BEGIN").run()
        try {
          const out = body()
          prepare("COMMIT").run()
          return out
        } catch (e) {
          if (db.inTransaction) prepare("ROLLBACK").run()
          throw e
        }
      }
    }
    const now: SqliteNowShape = { filename, runNow: (body) => (db.inTransaction ? UNDECIDED : body(run)) }
    return { client, now }
  })

/** SqlClient and SqliteNow over the SQLite database `filename` (":memory:" for one in memory). */
export const layer = (filename: string): Layer.Layer<SqlClient.SqlClient | SqliteNow> =>
  Layer.scopedContext(
    Effect.map(make(filename), ({ client, now }) => Context.make(SqlClient.SqlClient, client).pipe(Context.add(SqliteNow, now)))
  ).pipe(Layer.provide(Reactivity.layer))
