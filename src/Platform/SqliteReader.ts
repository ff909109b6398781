/**
 * A second, read-only connection to the SQLite file, for reads answered on the
 * event loop without a fiber (the fast lane's public verify, FastLane.ts). In WAL
 * mode it sees every committed transaction and none in progress, so it never
 * answers from a write that is not durable yet, and it does not queue behind
 * @effect/sql's one connection while a group commit holds it. Its busy timeout is
 * 0: when it cannot read at once (a checkpoint or recovery holding the WAL), it
 * answers UNDECIDED and the caller takes the Effect path, which can wait, instead
 * of blocking the event loop. None on Postgres and for an in-memory database.
 */
import Database from "better-sqlite3"
import { Context, Effect, Layer } from "effect"
import { UNDECIDED, type Undecided } from "../Domain/Undecided.js"
import { currentSqliteFile } from "./Sql.js"

export interface SqliteReaderShape {
  /** The first row of `source` with `params`, undefined when none, UNDECIDED when the file is busy; other errors are thrown. */
  readonly first: (source: string, ...params: ReadonlyArray<unknown>) => unknown | Undecided
}

export class SqliteReader extends Context.Reference<SqliteReader>()("Platform/SqliteReader", {
  defaultValue: (): SqliteReaderShape | undefined => undefined
}) {
  /** A reader on the file behind the current SqliteClient; none for Postgres and in memory. Closed with its scope. */
  static readonly layer = Layer.scoped(
    SqliteReader,
    Effect.flatMap(currentSqliteFile, (file) =>
      file === undefined
        ? Effect.succeed(undefined)
        : Effect.map(
          Effect.acquireRelease(
            Effect.sync(() => new Database(file, { readonly: true, fileMustExist: true, timeout: 0 })),
            (db) => Effect.sync(() => db.close())
          ),
          readerOn
        ))
  )
}

const isBusy = (e: unknown): boolean =>
  typeof e === "object" && e !== null && "code" in e && (e.code === "SQLITE_BUSY" || e.code === "SQLITE_LOCKED")

/** The reader over an open connection (exported for its test). */
export const readerOn = (db: Database): SqliteReaderShape => {
  // Prepared on first use: the tables exist only once migrations have run.
  const statements = new Map<string, ReturnType<Database["prepare"]>>()
  return {
    first: (source, ...params) => {
      try {
        let statement = statements.get(source)
        if (statement === undefined) statements.set(source, statement = db.prepare(source))
        return statement.get(...params)
      } catch (e) {
        if (isBusy(e)) return UNDECIDED
        throw e
      }
    }
  }
}
