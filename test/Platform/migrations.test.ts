/**
 * The schema the migrations build, on each store, compared with a snapshot
 * taken from the migrations as they were first applied: rewriting a migration
 * (one definition for both dialects, a shared type map) must leave databases
 * migrated before and after the rewrite with the same tables, columns, types,
 * defaults, constraints and indexes.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { layerFromUrl, migrate } from "../../src/Platform/Sql.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"

const squash = (text: unknown) => (typeof text === "string" ? text.replace(/\s+/g, " ").trim() : text)

type Row = Record<string, unknown>

const sqliteSchema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const objects = yield* sql.unsafe<Row>(
    "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
  )
  const tables: Record<string, unknown> = {}
  for (const o of objects) {
    if (o.type !== "table") continue
    const name = String(o.name)
    tables[name] = {
      columns: yield* sql.unsafe<Row>(`PRAGMA table_info(${name})`),
      indexes: yield* sql.unsafe<Row>(`PRAGMA index_list(${name})`).pipe(
        Effect.flatMap((list) =>
          Effect.forEach(
            [...list].sort((a, b) => String(a.name).localeCompare(String(b.name))),
            (i) =>
              Effect.map(sql.unsafe<Row>(`PRAGMA index_info(${String(i.name)})`), (columns) => ({
                name: i.name,
                unique: i.unique,
                origin: i.origin,
                partial: i.partial,
                columns: columns.map((c) => c.name)
              }))
          )
        )
      ),
      foreignKeys: yield* sql.unsafe<Row>(`PRAGMA foreign_key_list(${name})`)
    }
  }
  return { objects: objects.map((o) => ({ ...o, sql: squash(o.sql) })), tables }
})

const pgSchema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return {
    relations: yield* sql.unsafe<Row>(
      `SELECT relname AS name, relkind AS kind, relpersistence AS persistence FROM pg_class
       WHERE relnamespace = 'public'::regnamespace ORDER BY relname`
    ),
    columns: yield* sql.unsafe<Row>(
      `SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default
       FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`
    ),
    constraints: yield* sql.unsafe<Row>(
      `SELECT conrelid::regclass::text AS table_name, conname AS name, pg_get_constraintdef(oid) AS definition
       FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY conrelid::regclass::text, conname`
    ),
    indexes: yield* sql.unsafe<Row>(
      `SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname`
    )
  }
})

const databases: Array<TestDatabase> = []
afterAll(async () => {
  for (const db of databases) await db.drop()
})

for (const dialect of await dialects()) {
  describe(`migrations (${dialect})`, () => {
    it("build the schema of the snapshot taken before the migrations shared one definition", async () => {
      const db = await createDatabase(dialect)
      databases.push(db)
      const schema = await Effect.runPromise(
        Effect.andThen(migrate, dialect === "sqlite" ? sqliteSchema : pgSchema).pipe(
          Effect.provide(layerFromUrl(db.url))
        )
      )
      await expect(JSON.stringify(schema, null, 2) + "\n").toMatchFileSnapshot(`../fixtures/schema/${dialect}.json`)
    })
  })
}
