/**
 * Migration 0016 on a database that already holds attestations: the seal and anchor state the
 * rows carried (level, batch, leaf index, T1 and T2 times) moves into batch_leaves, batches and
 * the pending set, and the view `attestations` answers every row as the table did; a row
 * registered afterwards is pending, and the sealed ones are not. On both stores, the migrations
 * before 0016 applied one by one as they were.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { migrations } from "../../src/Platform/migrations/index.js"
import { layerFromUrl } from "../../src/Platform/Sql.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"

const COLUMNS = "seq, id, hash_hex, registered_at, signature, signing_key_id, format_version, level, batch_id, leaf_index, t1_at, t2_at, t2_block, legacy_id"
const at = (s: number) => `2026-01-01T00:00:${String(s).padStart(2, "0")}.000000+00:00`
const normalized = (rows: ReadonlyArray<Record<string, unknown>>) =>
  rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === "bigint" || (typeof v === "string" && /^\d+$/.test(v) && k !== "hash_hex" && k !== "id") ? Number(v) : v])))

const databases: Array<TestDatabase> = []
afterAll(async () => {
  for (const db of databases) await db.drop()
})

for (const dialect of await dialects()) {
  describe(`migration 0016 with attestations stored (${dialect})`, () => {
    it("moves each row's seal and anchor state out, and the view gives every row back as it was", async () => {
      const db = await createDatabase(dialect)
      databases.push(db)
      const program = Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const before = Object.entries(migrations).filter(([name]) => name < "0016")
        for (const [, migration] of before) yield* migration
        // a confirmed day with batch 1 (T2), an open day with batch 2 (T1), and two rows pending (T0)
        yield* sql.unsafe(`INSERT INTO daily_roots (id, window_end, root, leaves, batch_count, created_at, status, bitcoin_height, bitcoin_merkle_root, confirmed_at)
          VALUES (1, '${at(50)}', '${"a".repeat(64)}', ${dialect === "pg" ? "'\\x00'::bytea" : "X'00'"}, 1, '${at(51)}', 'confirmed', 800001, '${"b".repeat(64)}', '${at(59)}'),
                 (2, '${at(52)}', '${"c".repeat(64)}', ${dialect === "pg" ? "'\\x00'::bytea" : "X'00'"}, 1, '${at(53)}', 'pending', NULL, NULL, NULL)`)
        for (const [id, day] of [[1, 1], [2, 2]] as const) {
          yield* sql.unsafe(`INSERT INTO batches (id, window_end, merkle_root, leaf_count, tsa_token, tsa_provider, tsa_gen_time, sealed_at, daily_root_id, daily_leaf_index)
            VALUES (${id}, '${at(10 * id)}', '${String(id).repeat(64)}', 2, ${dialect === "pg" ? "'\\x01'::bytea" : "X'01'"}, 'demo', '2026-01-01T00:00:${10 * id + 1}.000Z', '${at(10 * id + 2)}', ${day}, 0)`)
        }
        const rows: Array<[number, string, number | null, number | null, string | null, string | null, number | null]> = [
          [1, "T2", 1, 0, at(11), at(59), 800001],
          [2, "T2", 1, 1, at(11), at(59), 800001],
          [3, "T1", 2, 1, at(21), null, null],
          [4, "T1", 2, 0, at(21), null, null],
          [5, "T0", null, null, null, null, null],
          [6, "T0", null, null, null, null, null]
        ]
        for (const [seq, level, batch, leaf, t1, t2, block] of rows) {
          const v = (x: unknown) => (x === null ? "NULL" : typeof x === "number" ? String(x) : `'${x}'`)
          yield* sql.unsafe(`INSERT INTO attestations (seq, id, hash_hex, registered_at, signature, signing_key_id, format_version, level, batch_id, leaf_index, t1_at, t2_at, t2_block)
            VALUES (${seq}, 'att_${seq}', '${String(seq).repeat(64)}', '${at(seq)}', 'sig${seq}', 'kid', '2.0.0', '${level}', ${v(batch)}, ${v(leaf)}, ${v(t1)}, ${v(t2)}, ${v(block)})`)
        }
        const old = yield* sql.unsafe<Record<string, unknown>>(`SELECT ${COLUMNS} FROM attestations ORDER BY seq`)

        yield* migrations["0016_registry"]

        const now = yield* sql.unsafe<Record<string, unknown>>(`SELECT ${COLUMNS} FROM attestations ORDER BY seq`)
        expect(normalized(now)).toEqual(normalized(old))
        expect(normalized(yield* sql.unsafe<Record<string, unknown>>(`SELECT seq, registered_at, hash_hex FROM pending_seals ORDER BY seq`))).toEqual(
          normalized([5, 6].map((s) => ({ seq: s, registered_at: at(s), hash_hex: String(s).repeat(64) })))
        )
        expect((yield* sql.unsafe<{ id: unknown; t1_at: unknown }>(`SELECT id, t1_at FROM batches ORDER BY id`)).map((b) => [Number(b.id), b.t1_at]))
          .toEqual([[1, at(11)], [2, at(21)]])
        // a row registered now is pending (the trigger), at T0 in the view
        yield* sql.unsafe(`INSERT INTO registry (seq, id, hash_hex, registered_at, signature, signing_key_id, format_version)
          VALUES (7, 'att_7', '${"7".repeat(64)}', '${at(7)}', 'sig7', 'kid', '2.0.0')`)
        expect(normalized(yield* sql.unsafe<Record<string, unknown>>(`SELECT seq FROM pending_seals ORDER BY seq`))).toEqual([{ seq: 5 }, { seq: 6 }, { seq: 7 }])
        expect(normalized(yield* sql.unsafe<Record<string, unknown>>(`SELECT level, batch_id FROM attestations WHERE id = 'att_7'`))).toEqual([{ level: "T0", batch_id: null }])
      })
      await Effect.runPromise(Effect.provide(program, layerFromUrl(db.url)))
    })
  })
}
