/**
 * Postgres for attestd: @effect/sql-pg's SqlClient over a `pg` pool attestd
 * creates (as that package's own `layer` creates one), and the same pool's
 * clients for programs run with callbacks (`PgDirect.runThen`, Steps.ts): the
 * attests' group commit runs its statements on one pool client, with no fiber
 * and no @effect/sql statement around each (Attestor; README, Performance).
 *
 * A statement run there is built with the SqlClient's `sql` template and
 * compiled by its compiler; the rows come as that client's would (`pg`'s own
 * parsing, no transforms). A failure releases the client destroyed: its
 * connection ends, and Postgres rolls back a transaction left open on it.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient, SqlError, type Statement } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Either, Layer } from "effect"
import pg from "pg"
import { type Program, runThen, type Step, stepOf, waiting } from "./Steps.js"

/** Statements on one pool client, for a program run with callbacks (inside PgDirect.runThen). */
export interface RunThen {
  /** The rows of a statement built with the SqlClient's `sql` template: compiled by its compiler, run on this client. */
  readonly statementRows: (statement: Statement.Statement<unknown>) => Step<ReadonlyArray<Record<string, unknown>>>
  /** `body` between BEGIN and COMMIT on this client; its failure fails the program (and ends the connection). */
  readonly transaction: <A>(body: () => Program<A>) => Step<A>
}

export interface PgDirectShape {
  /** `body` run with callbacks on one client of the pool; `k` gets its result or its error, once. */
  readonly runThen: <A>(body: (run: RunThen) => Program<A>, k: (outcome: Either.Either<A, unknown>) => void) => void
}

/** The pool behind the current SqlClient, for programs run with callbacks; undefined on SQLite. */
export class PgDirect extends Context.Reference<PgDirect>()("Platform/PgDirect", {
  defaultValue: (): PgDirectShape | undefined => undefined
}) {}

/**
 * Called with the SQL of each statement PgDirect runs (BEGIN and COMMIT included):
 * for tests that hold a statement sequence, as @effect/sql's spans note the
 * others. None by default.
 */
export class PgStatementObserver extends Context.Reference<PgStatementObserver>()("Platform/PgStatementObserver", {
  defaultValue: (): ((text: string) => void) | undefined => undefined
}) {}

/** How long the first connection may take (as @effect/sql-pg's default). */
const CONNECT_TIMEOUT = Duration.seconds(5)

/**
 * Statement texts prepared by name, per pool. The group statements' texts do not depend
 * on their number of rows (arrays as parameters: Repo), so a few names cover them;
 * past this many, a statement runs unnamed, as @effect/sql-pg runs every one.
 */
const PREPARED_NAMES = 64

/** BEGIN, `inner`, COMMIT, as one step (written once: Steps.stepOf). */
function* inTransaction<A>(query: (text: string, params: ReadonlyArray<unknown>) => Step<unknown>, inner: () => Program<A>): Program<A> {
  yield* query("BEGIN", [])
  const out = yield* inner()
  yield* query("COMMIT", [])
  return out
}

const makeDirect = (pool: pg.Pool, observe: ((text: string) => void) | undefined): PgDirectShape => {
  // One name per text for the whole pool: `pg` prepares a name once per connection, and refuses
  // one name for two texts. A prepared statement saves Postgres its parse and plan each time
  // (with `pg` alone on attestd's schema, a 16-row group's read and write cost Postgres ~31%
  // less CPU, its round trips ~24% less time: README, Performance). Should another instance's
  // migration change a table under a prepared `SELECT *`, Postgres refuses that statement on each
  // connection that prepared it ("cached plan must not change result type"): the program fails,
  // its batch runs in a fiber (unnamed), and its connection is destroyed, so the next prepares anew.
  const names = new Map<string, string>()
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text)
    if (name === undefined && names.size < PREPARED_NAMES) names.set(text, name = `attestd_${names.size}`)
    return name
  }
  return {
    runThen: (body, k) =>
      pool.connect((error, client, release) => {
        if (error || client === undefined) return k(Either.left(error ?? new Error("no client returned")))
        // An error on a checked-out client with no listener would be thrown at the process.
        let lost: unknown
        const onError = (e: unknown) => void (lost = e)
        client.on("error", onError)
        const query = (text: string, params: ReadonlyArray<unknown>) =>
          waiting<ReadonlyArray<Record<string, unknown>>>((resume) => {
            observe?.(text)
            const name = params.length > 0 ? nameOf(text) : undefined
            client.query(
              { text, values: params as Array<unknown>, ...(name === undefined ? {} : { name }) },
              (e: Error | null, result: pg.QueryResult) => resume(e ? Either.left(e) : Either.right(result.rows))
            )
          })
        const run: RunThen = {
          statementRows: (statement) => {
            const [text, params] = statement.compile()
            return query(text, params)
          },
          transaction: (inner) => stepOf(inTransaction, query, inner)
        }
        runThen(body(run), (outcome) => {
          client.off("error", onError)
          const failure = Either.isLeft(outcome) ? outcome.left : lost
          // Destroyed on any failure: nothing of this program (an open transaction) stays on a pooled connection.
          release(failure === undefined ? undefined : failure instanceof Error ? failure : new Error(String(failure)))
          k(outcome)
        })
      })
  }
}

/** SqlClient (PgClient) and PgDirect over one pool for `url`. */
export const layer = (url: string, maxConnections: number): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient | PgDirect, SqlError.SqlError> =>
  Layer.scopedContext(Effect.gen(function*() {
    const observe = yield* PgStatementObserver
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new pg.Pool({ connectionString: url, max: maxConnections, application_name: "attestd" })
        // idle clients' errors: the pool drops the client
        pool.on("error", () => {})
        return pool
      }),
      (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
    )
    yield* Effect.tryPromise({
      try: () => pool.query("SELECT 1"),
      catch: (cause) => new SqlError.SqlError({ cause, message: "PgClient: Failed to connect" })
    }).pipe(Effect.timeoutFail({
      duration: CONNECT_TIMEOUT,
      onTimeout: () => new SqlError.SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
    }))
    const client = yield* PgClient.fromPool({ acquire: Effect.succeed(pool) })
    return Context.make(PgClient.PgClient, client).pipe(
      Context.add(SqlClient.SqlClient, client),
      Context.add(PgDirect, makeDirect(pool, observe))
    )
  })).pipe(Layer.provide(Reactivity.layer))
