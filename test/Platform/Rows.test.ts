/**
 * Column schemas shared by both stores' row decoding: a number (SQLite) and a
 * decimal string (Postgres) decode alike. And the renaming row decoder, held
 * equal to Effect's on the repositories' row schemas and on generated rows.
 */
import { Arbitrary, Effect, Either, Exit, ParseResult, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { AttestationRow, ClaimRow } from "../../src/Attestations/Domain.js"
import { AttestationId } from "../../src/Domain/AttestationId.js"
import { column, CountRow, DbBool, DbBytes, DbInt, decodedRowSchemas, decodeRows, decodeRowsSync, isCompiledRow, renamingRowsDecoder } from "../../src/Platform/Rows.js"

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

describe("the row decoders", () => {
  const effectDecoder = (row: Schema.Schema.Any) => Schema.decodeUnknownEither(Schema.Array(row as Schema.Schema<unknown, unknown>))
  const fastDecoder = (row: Schema.Schema.Any) => {
    const decode = renamingRowsDecoder(row as Schema.Schema<unknown, unknown>)
    return decode && ((u: unknown) => Effect.runSync(Effect.either(decode(u))))
  }
  /** decodeRowsSync as an Either: its rows, or the ParseError it throws. */
  const syncDecoder = (row: Schema.Schema.Any) => {
    const decode = decodeRowsSync(row as Schema.Schema<unknown, unknown>)
    return (u: unknown): Either.Either<ReadonlyArray<unknown>, ParseResult.ParseError> => {
      try {
        return Either.right(decode(u as ReadonlyArray<unknown>))
      } catch (e) {
        if (e instanceof ParseResult.ParseError) return Either.left(e)
        throw e
      }
    }
  }
  /** Both decoders on one input: the same rows (keys in the same order), or the same error. */
  const same = (row: Schema.Schema.Any, input: unknown, decoder = fastDecoder(row)!) => {
    const expected = effectDecoder(row)(input)
    const actual = decoder(input)
    expect(actual._tag).toBe(expected._tag)
    if (expected._tag === "Right" && actual._tag === "Right") {
      expect(actual.right).toEqual(expected.right)
      expect(actual.right.map((r) => Object.keys(r as object))).toEqual(expected.right.map((r) => Object.keys(r as object)))
    }
    // (a renaming decoder's error names the columns' struct, not the row's)
    if (actual._tag === "Left") expect(actual.left).toBeInstanceOf(ParseResult.ParseError)
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

  it("decodes each row schema synchronously (compiled where its columns allow) as Effect's decoder does, on valid and broken rows", async () => {
    await loadRepositories()
    const schemas = decodedRowSchemas()
    const compiled = schemas.filter(isCompiledRow)
    // the rows an attest and a verify decode are compiled, renaming or not
    for (const row of [AttestationRow, ClaimRow, CountRow]) expect(compiled).toContain(row)
    expect(compiled.length).toBeGreaterThanOrEqual(schemas.length / 2)
    for (const row of schemas) {
      const decoder = syncDecoder(row)
      fc.assert(fc.property(rowsOf(row), (rows) => same(row, rows, decoder)), { numRuns: 40 })
    }
  })

  it("compiles the column types rows have, and leaves Effect's decoder the rest", () => {
    const row = Schema.Struct({
      n: DbInt,
      flag: DbBool,
      tag: Schema.Literal("a", "b"),
      bytes: column("the_bytes", Schema.NullOr(DbBytes)),
      id: AttestationId
    })
    expect(isCompiledRow(row)).toBe(true)
    const decoder = syncDecoder(row)
    const bytes = new Uint8Array([1, 2])
    same(row, [{ n: "7", flag: 1, tag: "b", the_bytes: bytes, id: "att_0123456789abcdef01234567" }], decoder)
    same(row, [{ n: 7, flag: true, tag: "a", the_bytes: null, id: "att_0123456789abcdef01234567" }], decoder)
    for (const bad of [{ n: "7.5" }, { flag: 2 }, { tag: "c" }, { the_bytes: [1, 2] }, { id: "att_short" }, { n: undefined }]) {
      same(row, [{ n: 7, flag: true, tag: "a", the_bytes: null, id: "att_0123456789abcdef01234567", ...bad }], decoder)
    }
    same(row, [null], decoder)
    same(row, [[1]], decoder)
    same(row, "not rows", decoder)
    // an optional field: absent stays absent
    const optional = Schema.Struct({ a: Schema.optional(Schema.String), b: Schema.String })
    expect(isCompiledRow(optional)).toBe(true)
    same(optional, [{ b: "x" }, { a: undefined, b: "y" }, { a: "z", b: "w" }], syncDecoder(optional))
    // a struct column, parse options, a decoding fallback: Effect's decoder alone
    expect(isCompiledRow(Schema.Struct({ a: Schema.Struct({ b: Schema.String }) }))).toBe(false)
    expect(isCompiledRow(Schema.Struct({ a: Schema.String }).annotations({ parseOptions: { onExcessProperty: "error" } }))).toBe(false)
    expect(isCompiledRow(Schema.Struct({ a: Schema.String.annotations({ decodingFallback: () => Either.right("x") }) }))).toBe(false)
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
