/**
 * A migration is a list of DDL statements, run one by one. The dialects differ
 * mostly in type names, so each migration is one list written against this map.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

export interface Types {
  /** for the few statements with no common spelling (triggers) */
  readonly dialect: "sqlite" | "pg"
  /** an auto-numbered 64-bit primary key column */
  readonly serial: string
  readonly bigint: string
  readonly blob: string
  readonly boolean: string
  readonly true: string
  readonly false: string
  /** a table whose rows may be lost in a crash (Postgres skips its WAL): empty or `UNLOGGED ` */
  readonly unlogged: string
}

export const types: { readonly sqlite: Types; readonly pg: Types } = {
  sqlite: {
    dialect: "sqlite",
    serial: "INTEGER PRIMARY KEY",
    bigint: "INTEGER",
    blob: "BLOB",
    boolean: "INTEGER",
    true: "1",
    false: "0",
    unlogged: ""
  },
  pg: {
    dialect: "pg",
    serial: "BIGSERIAL PRIMARY KEY",
    bigint: "BIGINT",
    blob: "BYTEA",
    boolean: "BOOLEAN",
    true: "TRUE",
    false: "FALSE",
    unlogged: "UNLOGGED "
  }
}

export const ddl = (statements: (t: Types) => ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const list = statements(sql.onDialectOrElse({ pg: () => types.pg, orElse: () => types.sqlite }))
    for (const statement of list) yield* sql.unsafe(statement)
  })
