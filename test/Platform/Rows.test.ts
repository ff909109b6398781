/**
 * Column schemas shared by both stores' row decoding: a number (SQLite) and a
 * decimal string (Postgres) decode alike. And the renaming row decoder, held
 * equal to Effect's on the repositories' row schemas and on generated rows.
 */
import { Arbitrary, Effect, Either, Exit, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { AttestationRow, ClaimRow } from "../../src/Attestations/Domain.js"
import { AttestationId } from "../../src/Domain/AttestationId.js"
import { column, CountRow, DbBool, DbInt, decodedRowSchemas, decodeRows, renamingRowsDecoder } from "../../src/Platform/Rows.js"

describe("row column schemas", () => {
  it("DbInt takes SQLite's number and Postgres's bigint string alike, and refuses anything else", () => {
    const decode = Schema.decodeUnknownSync(DbInt)
    expect(decode(42)).toBe(42)
    expect(decode("42")).toBe(42)
    expect(decode("-7")).toBe(-7)
    for (const bad of ["4.5", 4.5, "x", null, true]) expect(() => decode(bad)).toThrow()
  })

  it("DbBool takes Postgres booleans and SQLite's 0/1", () => {
    const decode = Schema.decodeUnknownSync(DbBool)
    expect([decode(true), decode(false), decode(1), decode(0)]).toEqual([true, false, true, false])
    for (const bad of [2, "true", null]) expect(() => decode(bad)).toThrow()
  })

  it("decodeRows turns a row that does not match into a defect, not a failure", () => {
    const ok = Effect.runSyncExit(decodeRows(CountRow)(Effect.succeed([{ n: "3" }])))
    expect(ok).toEqual(Exit.succeed([{ n: 3 }]))
    const bad = Effect.runSyncExit(decodeRows(Schema.Struct({ id: AttestationId }))(Effect.succeed([{ id: "att_short" }])))
    expect(Exit.isFailure(bad) && bad.cause._tag === "Die").toBe(true)
  })
})

/** Every module that decodes rows, so that each row schema of src/ is registered. */
const loadRepositories = () => import("../../src/main.js")

describe("the renaming row decoder", () => {
  const effectDecoder = (row: Schema.Schema.Any) => Schema.decodeUnknownEither(Schema.Array(row as Schema.Schema<unknown, unknown>))
  const fastDecoder = (row: Schema.Schema.Any) => {
    const decode = renamingRowsDecoder(row as Schema.Schema<unknown, unknown>)
    return decode && ((u: unknown) => Effect.runSync(Effect.either(decode(u))))
  }
  /** Both decoders on one input: the same rows (keys in the same order) or both refuse. */
  const same = (row: Schema.Schema.Any, input: unknown) => {
    const expected = effectDecoder(row)(input)
    const actual = fastDecoder(row)!(input)
    expect(actual._tag).toBe(expected._tag)
    if (expected._tag === "Right" && actual._tag === "Right") {
      expect(actual.right).toEqual(expected.right)
      expect(actual.right.map((r) => Object.keys(r as object))).toEqual(expected.right.map((r) => Object.keys(r as object)))
    }
  }
  /** Rows as a store returns them: valid ones (encoded from generated values), and anything at all. */
  const rowsOf = (row: Schema.Schema.Any) => {
    const encode = Schema.encodeEither(row as Schema.Schema<unknown, unknown>)
    // (a generated value the schema cannot encode, e.g. undefined as JSON, is no row)
    const valid = Arbitrary.make(row as Schema.Schema<unknown, unknown>).map(encode).filter(Either.isRight).map((e) => e.right)
    const broken = valid.chain((r) =>
      fc.constantFrom(...Object.keys(r as object)).chain((k) => fc.anything().map((v) => ({ ...(r as object), [k]: v })))
    )
    return fc.array(fc.oneof({ weight: 3, arbitrary: valid }, { weight: 1, arbitrary: broken }), { maxLength: 4 })
  }

  it("decodes each row schema the repositories load with as Effect's decoder does, on valid and broken rows", async () => {
    await loadRepositories()
    const schemas = decodedRowSchemas()
    const renaming = schemas.filter((s) => renamingRowsDecoder(s as Schema.Schema<unknown, unknown>) !== undefined)
    // those the repositories build as they load (the rest register when first used)
    expect(schemas.length).toBeGreaterThanOrEqual(10)
    expect(renaming.length).toBeGreaterThanOrEqual(5)
    expect(renaming).toContain(AttestationRow)
    expect(renaming).toContain(ClaimRow)
    for (const row of renaming) {
      fc.assert(fc.property(rowsOf(row), (rows) => same(row, rows)), { numRuns: 60 })
    }
  })

  it("keeps Effect's decoder for a schema with any other transformation, and for one without renames", () => {
    const withDefault = Schema.Struct({ a: Schema.optionalWith(Schema.String, { default: () => "x" }), b: column("b_b", Schema.String) })
    expect(renamingRowsDecoder(withDefault)).toBeUndefined()
    expect(renamingRowsDecoder(CountRow)).toBeUndefined()
    expect(renamingRowsDecoder(Schema.Array(AttestationRow))).toBeUndefined()
  })

  it("refuses what Effect's decoder refuses, and drops columns the schema does not name", () => {
    const row = Schema.Struct({ seq: DbInt, hashHex: column("hash_hex", Schema.String.pipe(Schema.length(4))), note: column("the_note", Schema.NullOr(Schema.String)) })
    same(row, [{ seq: "12", hash_hex: "abcd", the_note: null, extra: 1 }])
    same(row, [{ seq: 12, hash_hex: "abc", the_note: null }])
    same(row, [{ seq: 1.5, hash_hex: "abcd", the_note: null }])
    same(row, [{ seq: 1, hash_hex: "abcd" }])
    same(row, "not rows")
    expect(fastDecoder(row)!([{ seq: "12", hash_hex: "abcd", the_note: null, extra: 1 }])).toEqual(
      Either.right([{ seq: 12, hashHex: "abcd", note: null }])
    )
  })
})
