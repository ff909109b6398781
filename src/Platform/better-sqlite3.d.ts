/**
 * The part of better-sqlite3 (which ships no types) that the SQLite client
 * (SqliteClient.ts) and the read-only reader (SqliteReader.ts) use.
 */
declare module "better-sqlite3" {
  namespace Database {
    interface Statement {
      /** Whether the statement returns rows. */
      readonly reader: boolean
      get(...params: ReadonlyArray<unknown>): unknown
      all(...params: ReadonlyArray<unknown>): Array<any>
      run(...params: ReadonlyArray<unknown>): { readonly changes: number; readonly lastInsertRowid: number | bigint }
      raw(on: boolean): this
      safeIntegers(on: boolean): this
    }
  }
  interface Database {
    /** Whether a transaction is open on the connection. */
    readonly inTransaction: boolean
    prepare(source: string): Database.Statement
    pragma(source: string): unknown
    close(): void
  }
  const Database: new (
    filename: string,
    options?: {
      readonly readonly?: boolean
      readonly fileMustExist?: boolean
      readonly timeout?: number
      readonly verbose?: (source: string) => void
    }
  ) => Database
  export default Database
}
