/** A migration is a list of DDL statements per dialect, run one by one. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const ddl = (statements: { readonly sqlite: ReadonlyArray<string>; readonly pg: ReadonlyArray<string> }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const list = sql.onDialectOrElse({ pg: () => statements.pg, orElse: () => statements.sqlite })
    for (const statement of list) yield* sql.unsafe(statement)
  })
