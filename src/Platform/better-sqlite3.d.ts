/**
 * The part of better-sqlite3 (a dependency of @effect/sql-sqlite-node, which ships
 * no types for it) that SqliteReader.ts uses.
 */
declare module "better-sqlite3" {
  interface Statement {
    get(...params: ReadonlyArray<unknown>): unknown
  }
  interface Database {
    prepare(source: string): Statement
    close(): void
  }
  const Database: new (
    filename: string,
    options?: { readonly readonly?: boolean; readonly fileMustExist?: boolean; readonly timeout?: number }
  ) => Database
  export default Database
}
