/**
 * The settings every SQLite connection of the service opens with
 * (src/Platform/Sql.ts), and what the WAL limit does to the file: past SQLite's
 * default of 1,000 pages the WAL keeps growing, and a checkpoint still bounds it.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { layerFromUrl, WAL_AUTOCHECKPOINT_PAGES } from "../../src/Platform/Sql.js"

const dir = mkdtempSync(join(tmpdir(), "attestd-pragmas-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const onFile = <A>(name: string, program: Effect.Effect<A, unknown, SqlClient.SqlClient>) =>
  Effect.runPromise(Effect.scoped(Effect.provide(program, layerFromUrl(`sqlite:${join(dir, name)}`))))

const pragma = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<Record<string, unknown>>(`PRAGMA ${name}`)).pipe(
    Effect.map((rows) => Object.values(rows[0] ?? {})[0])
  )

describe("SQLite connection settings", () => {
  it("open in WAL mode with FULL sync, foreign keys, a busy timeout and the WAL limit", async () => {
    const settings = await onFile(
      "settings.db",
      Effect.all({
        journal_mode: pragma("journal_mode"),
        synchronous: pragma("synchronous"),
        foreign_keys: pragma("foreign_keys"),
        busy_timeout: pragma("busy_timeout"),
        wal_autocheckpoint: pragma("wal_autocheckpoint")
      })
    )
    expect(settings).toEqual({
      journal_mode: "wal",
      synchronous: 2, // FULL
      foreign_keys: 1,
      busy_timeout: 10_000,
      wal_autocheckpoint: WAL_AUTOCHECKPOINT_PAGES
    })
    expect(WAL_AUTOCHECKPOINT_PAGES).toBeGreaterThan(1_000)
  })

  it("let the WAL grow past SQLite's default of 1,000 pages, and checkpoint it at the limit", async () => {
    const file = join(dir, "growth.db")
    const pageSize = await onFile("growth.db", pragma("page_size"))
    const walPages = () => statSync(`${file}-wal`).size / (Number(pageSize) + 24) // each frame: a 24-byte header + a page
    // Commits of ~200 pages each (one row per page), WAL size read after each.
    const sizes = await onFile(
      "growth.db",
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe("CREATE TABLE filler (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        const row = "x".repeat(Number(pageSize) - 200)
        const sizes: Array<number> = []
        const commits = Math.ceil((WAL_AUTOCHECKPOINT_PAGES * 1.5) / 200)
        for (let c = 0; c < commits; c++) {
          yield* sql.withTransaction(
            sql.unsafe(
              `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
               INSERT INTO filler (data) SELECT ? FROM n`,
              [row]
            )
          )
          sizes.push(walPages())
        }
        return sizes
      })
    )
    const largest = Math.max(...sizes)
    // With SQLite's default the WAL would restart at ~1,000 pages and stay near that size.
    expect(largest).toBeGreaterThan(WAL_AUTOCHECKPOINT_PAGES * 0.9)
    // A checkpoint ran once the limit was crossed: the file is reused from its start, not grown further.
    expect(largest).toBeLessThan(WAL_AUTOCHECKPOINT_PAGES + 2 * 200 + 10)
  })
})
