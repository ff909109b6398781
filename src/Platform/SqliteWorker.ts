/**
 * The SQLite SqlClient with its connection in a worker thread.
 *
 * better-sqlite3 is synchronous: on the event loop every statement, and above all
 * every COMMIT's fsync (`synchronous = FULL`), stops the server answering anyone.
 * Here one worker thread owns the only connection; the event loop posts each
 * statement to it and gets the rows back in a message, so a commit's fsync no
 * longer blocks requests (README "Performance": ~82 µs of SQLite per attest on the
 * loop before). Semantics are those of `@effect/sql-sqlite-node`'s client, which
 * this mirrors: one connection behind a one-permit semaphore, a transaction holds
 * the permit from BEGIN to COMMIT, prepared statements are cached, WAL mode.
 *
 * Messages are handled in order by a single thread, so statements can never
 * overlap. A statement once sent runs to its end: waiting for its answer is
 * uninterruptible (as a synchronous call on the loop was), so an interrupted
 * transaction's ROLLBACK always follows the statement it interrupted.
 *
 * The thread holds the process open only while statements are in flight; closing
 * the layer closes the connection (checkpointing the WAL) and ends the thread. If
 * the thread dies, every statement fails from then on with a SqlError (`/health`
 * reports the database unhealthy) rather than run outside the transaction it
 * belonged to.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import { Context, Effect, Layer, Scope } from "effect"
import { createRequire } from "node:module"
import { Worker } from "node:worker_threads"

export interface SqliteWorkerConfig {
  readonly filename: string
  /** Run once on the new connection, in order, before any statement (e.g. "synchronous = FULL"). */
  readonly pragmas: ReadonlyArray<string>
  /** Prepared statements kept (least recently used go first). */
  readonly prepareCacheSize?: number
}

/**
 * What a statement asks of the thread: 0 rows as objects (a statement that returns
 * none gives []); 1 the same, but a statement that returns none gives better-sqlite3's
 * run info; 2 rows as arrays of values; 3 as 0, prepared for this call only.
 */
type Mode = 0 | 1 | 2 | 3
const Rows: Mode = 0
const Raw: Mode = 1
const Values: Mode = 2
const Unprepared: Mode = 3

interface Request {
  readonly id: number
  readonly sql: string
  readonly params: ReadonlyArray<unknown>
  readonly mode: Mode
  readonly safeIntegers: boolean
}
interface Reply {
  readonly id: number
  readonly rows?: ReadonlyArray<any>
  readonly error?: { readonly message: string; readonly code?: string; readonly name?: string }
}
interface WorkerData {
  readonly driver: string
  readonly filename: string
  readonly pragmas: ReadonlyArray<string>
  readonly cacheSize: number
}

/**
 * The thread's whole program. It runs from its source text (`toString`) in an eval'd
 * CommonJS worker, so it may use nothing but its arguments: the one copy that runs
 * from `src/` under vitest and from `dist/` in production alike.
 */
function threadMain(require: (id: string) => any): void {
  const { parentPort, workerData } = require("node:worker_threads")
  const data = workerData as WorkerData
  const Database = require(data.driver)
  const db = new Database(data.filename)
  db.pragma("journal_mode = WAL")
  for (const pragma of data.pragmas) db.pragma(pragma)
  // a Map iterates in insertion order: re-inserting on use makes its first key the least recently used
  const cache = new Map<string, any>()
  const prepared = (sql: string) => {
    let statement = cache.get(sql)
    if (statement !== undefined) {
      cache.delete(sql)
    } else {
      statement = db.prepare(sql)
      if (cache.size >= data.cacheSize) cache.delete(cache.keys().next().value!)
    }
    cache.set(sql, statement)
    return statement
  }
  const run = (request: Request): ReadonlyArray<any> => {
    const statement = request.mode === 3 ? db.prepare(request.sql) : prepared(request.sql)
    statement.safeIntegers(request.safeIntegers)
    if (!statement.reader) {
      const info = statement.run(...request.params)
      return request.mode === 1 ? info : []
    }
    if (request.mode !== 2) return statement.all(...request.params)
    statement.raw(true)
    try {
      return statement.all(...request.params)
    } finally {
      statement.raw(false)
    }
  }
  parentPort.on("message", (request: Request | { readonly close: number }) => {
    if ("close" in request) {
      db.close()
      parentPort.postMessage({ id: request.close, rows: [] })
      return
    }
    try {
      parentPort.postMessage({ id: request.id, rows: run(request) })
    } catch (e) {
      const error = e as { message?: unknown; code?: unknown; name?: unknown }
      parentPort.postMessage({
        id: request.id,
        error: {
          message: String(error?.message ?? e),
          ...(typeof error?.code === "string" ? { code: error.code } : {}),
          ...(typeof error?.name === "string" ? { name: error.name } : {})
        }
      })
    }
  })
  parentPort.postMessage({ id: 0, rows: [] })
}

/** The thread's failure as a driver error: same message and code as better-sqlite3's own. */
const driverError = (error: NonNullable<Reply["error"]>): Error =>
  Object.assign(new Error(error.message), { name: error.name ?? "SqliteError", code: error.code })

/** Starts the thread and opens the connection: the client's one Connection. */
const startThread = (config: SqliteWorkerConfig) =>
  Effect.gen(function*() {
    const data: WorkerData = {
      driver: createRequire(import.meta.url).resolve("better-sqlite3"),
      filename: config.filename,
      pragmas: config.pragmas,
      cacheSize: config.prepareCacheSize ?? 200
    }
    const worker = new Worker(`(${threadMain.toString()})(require)`, { eval: true, workerData: data })
    worker.unref()
    const waiting = new Map<number, (reply: Reply) => void>()
    let nextId = 1
    let dead: Error | undefined
    const settleAll = (error: Error) => {
      dead ??= error
      for (const resume of waiting.values()) resume({ id: 0, error: { message: dead.message } })
      waiting.clear()
      worker.unref()
    }
    worker.on("message", (reply: Reply) => {
      const resume = waiting.get(reply.id)
      if (resume === undefined) return
      waiting.delete(reply.id)
      if (waiting.size === 0) worker.unref()
      resume(reply)
    })
    worker.on("error", (e) => settleAll(new Error(`the SQLite thread failed: ${e.message}`)))
    worker.on("exit", (code) => settleAll(new Error(`the SQLite thread exited (code ${code})`)))

    const post = (message: Request | { readonly close: number }, id: number) =>
      Effect.async<ReadonlyArray<any>, SqlError>((resume) => {
        if (dead !== undefined) return resume(Effect.fail(new SqlError({ cause: dead, message: dead.message })))
        if (waiting.size === 0) worker.ref()
        waiting.set(id, (reply) =>
          resume(
            reply.error === undefined
              ? Effect.succeed(reply.rows ?? [])
              : Effect.fail(new SqlError({ cause: driverError(reply.error), message: "Failed to execute statement" }))
          ))
        worker.postMessage(message)
      })

    // the thread answers id 0 once the connection is open and its pragmas are set
    yield* Effect.async<ReadonlyArray<any>, SqlError>((resume) => {
      worker.ref()
      waiting.set(0, (reply) =>
        resume(
          reply.error === undefined
            ? Effect.succeed([])
            : Effect.fail(new SqlError({ cause: driverError(reply.error), message: `Failed to open ${config.filename}` }))
        ))
    })
    yield* Effect.addFinalizer(() =>
      Effect.uninterruptible(Effect.ignore(post({ close: nextId }, nextId++))).pipe(
        Effect.zipRight(Effect.promise(() => worker.terminate()))
      )
    )

    const statement = (sql: string, params: ReadonlyArray<unknown>, mode: Mode) =>
      Effect.uninterruptible(Effect.withFiberRuntime<ReadonlyArray<any>, SqlError>((fiber) => {
        const id = nextId++
        return post({ id, sql, params, mode, safeIntegers: Context.get(fiber.currentContext, SqlClient.SafeIntegers) }, id)
      }))

    const connection: Connection = {
      execute: (sql, params, transformRows) => {
        const rows = statement(sql, params, Rows)
        return transformRows ? Effect.map(rows, transformRows) : rows
      },
      executeRaw: (sql, params) => statement(sql, params, Raw),
      executeValues: (sql, params) => statement(sql, params, Values) as Effect.Effect<ReadonlyArray<ReadonlyArray<unknown>>, SqlError>,
      executeUnprepared: (sql, params, transformRows) => {
        const rows = statement(sql, params ?? [], Unprepared)
        return transformRows ? Effect.map(rows, transformRows) : rows
      },
      executeStream: () => Effect.dieMessage("executeStream not implemented")
    }
    return connection
  })

/** The client: `@effect/sql-sqlite-node`'s acquirers over the thread's connection. */
export const make = (config: SqliteWorkerConfig) =>
  Effect.gen(function*() {
    const connection = yield* startThread(config)
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
    const client = yield* SqlClient.make({
      acquirer,
      compiler: Statement.makeCompilerSqlite(),
      transactionAcquirer,
      spanAttributes: [["db.system.name", "sqlite"]]
    })
    return client
  })

/** The SqlClient for one database file (or ":memory:"). */
export const layer = (config: SqliteWorkerConfig): Layer.Layer<SqlClient.SqlClient, SqlError> =>
  Layer.scoped(SqlClient.SqlClient, make(config)).pipe(Layer.provide(Reactivity.layer))
