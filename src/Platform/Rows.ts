/**
 * Column schemas for the repositories' row schemas. SQLite returns INTEGER as a
 * number and Postgres returns BIGINT, COUNT(*) and SUM as strings: one schema
 * accepts what either store returns, so a repository decodes rows the same way
 * on both.
 */
import { Effect, Either, identity, Option, ParseResult, Schema, SchemaAST as AST } from "effect"
import { changesParsing, compiledArray, compiledFields, structFields } from "./CompiledSchema.js"

/** An integer column (or aggregate) as a number, from a number (SQLite) or a decimal string (Postgres). */
export const DbInt = Schema.Union(Schema.Int, Schema.NumberFromString.pipe(Schema.int()))

/** A boolean column: Postgres BOOLEAN, or SQLite's 0/1. */
export const DbBool = Schema.Union(Schema.Boolean, Schema.transform(Schema.Literal(0, 1), Schema.Boolean, {
  strict: true,
  decode: (n) => n === 1,
  encode: (b) => (b ? 1 : 0)
}))

/** The single `n` of a `SELECT COUNT(*) AS n`. */
export const CountRow = Schema.Struct({ n: DbInt })

/** A row that does not match its schema is a bug, not input: its ParseError becomes a defect. */
export const orDieOnMismatch = <A, E, R>(self: Effect.Effect<A, E | ParseResult.ParseError, R>): Effect.Effect<A, E, R> =>
  Effect.catchAll(self, (e) => (e instanceof ParseResult.ParseError ? Effect.die(e) : Effect.fail(e)))

/**
 * The decoder of an array of rows, built once per row schema and shared by decodeRows
 * and decodeRowsSync: building Schema.Array and its parser on every call cost ~10% of
 * an attest request's CPU. Row schemas have no requirements, so it answers at once.
 */
const rowDecoders = new WeakMap<Schema.Schema.Any, (u: unknown) => Either.Either<ReadonlyArray<any>, ParseResult.ParseError>>()
const rowSchemas = new Set<Schema.Schema.Any>()
/** Every row schema a repository decodes with (for the test that holds the two decoders equal). */
export const decodedRowSchemas = (): ReadonlyArray<Schema.Schema.Any> => [...rowSchemas]
const rowsDecoder = <A, I>(row: Schema.Schema<A, I, never>) => {
  let decode = rowDecoders.get(row)
  if (decode === undefined) {
    rowSchemas.add(row)
    decode = renamingRowsDecoderEither(row) ?? plainRowsDecoderEither(row)
    rowDecoders.set(row, decode)
  }
  return decode as (u: unknown) => Either.Either<ReadonlyArray<A>, ParseResult.ParseError>
}

/**
 * The decoder of a row schema whose one transformation of its own is renaming
 * columns (`column()`), or undefined for any other schema. It decodes the columns
 * (the struct's encoded side: each field's schema, refinements and DbInt's parse
 * included) and renames the keys, in the type side's order. Effect's decoder
 * would then check the type side again: the same refinements over values that
 * each field's own decoder has just checked, ~6 µs of the ~11 per attestations
 * row (`BENCH_ONLY=costs`). The columns' checks are compiled where they allow
 * (CompiledSchema: ~1 µs per row). test/Platform/Rows.test.ts holds the two
 * decoders equal on the repositories' row schemas and on generated rows.
 */
export const renamingRowsDecoder = <A, I, R>(
  row: Schema.Schema<A, I, R>
): ((u: unknown) => Effect.Effect<ReadonlyArray<A>, ParseResult.ParseError, R>) | undefined =>
  // An Either is an Effect: row schemas have no requirements, so the rows decode synchronously.
  renamingRowsDecoderEither(row as Schema.Schema<A, I, never>)

/** A renaming row schema's columns (its encoded struct) and each output key with the column it is read from. */
const renamedColumns = (ast: AST.AST) => {
  if (ast._tag !== "Transformation" || ast.transformation._tag !== "TypeLiteralTransformation") return undefined
  if (ast.from._tag !== "TypeLiteral" || ast.to._tag !== "TypeLiteral") return undefined
  if (ast.from.indexSignatures.length > 0 || ast.to.indexSignatures.length > 0) return undefined
  const renames = ast.transformation.propertySignatureTransformations
  if (!renames.every((t) => t.decode === identity && t.encode === identity)) return undefined
  const columnOf = new Map<PropertyKey, PropertyKey>(renames.map((t) => [t.to, t.from]))
  const keys = ast.to.propertySignatures.map((ps) => [ps.name, columnOf.get(ps.name) ?? ps.name] as const)
  return { columns: ast.from, keys, compiled: changesParsing(ast) ? undefined : compiledFields(ast.from, keys) }
}

/** renamingRowsDecoder's decoder as a synchronous function (row schemas have no effects of their own). */
const renamingRowsDecoderEither = <A, I>(
  row: Schema.Schema<A, I, never>
): ((u: unknown) => Either.Either<ReadonlyArray<A>, ParseResult.ParseError>) | undefined => {
  const shape = renamedColumns(row.ast)
  if (shape === undefined) return undefined
  const { columns, keys, compiled } = shape
  const decodeColumns = Schema.decodeUnknownEither(Schema.Array(Schema.make<Record<PropertyKey, unknown>, unknown, never>(columns)))
  const rename = (columns: Record<PropertyKey, unknown>): A => {
    const out: Record<PropertyKey, unknown> = {}
    for (const [key, column] of keys) if (column in columns) out[key] = columns[column]
    return out as A
  }
  const decode = (u: unknown) => Either.map(decodeColumns(u), (rows) => rows.map(rename))
  return compiled === undefined ? decode : compiledArray(compiled, decode)
}

/** Whether `row`'s columns compile (CompiledSchema), so its rows are decoded without Effect's parser (for tests). */
export const isCompiledRow = (row: Schema.Schema.Any): boolean =>
  (renamedColumns(row.ast)?.compiled ?? structFields(row.ast)) !== undefined

/** Effect's decoder of an array of `row`, compiled when the row is a plain struct of known column types. */
const plainRowsDecoderEither = <A, I>(row: Schema.Schema<A, I, never>): ((u: unknown) => Either.Either<ReadonlyArray<A>, ParseResult.ParseError>) => {
  const decode = Schema.decodeUnknownEither(Schema.Array(row))
  const fields = structFields(row.ast)
  return fields === undefined ? decode : compiledArray(fields, decode)
}

/** Decodes a statement's rows (one whose SQL is built at run time, so SqlSchema's Request has nothing to say). */
export const decodeRows = <A, I, R>(row: Schema.Schema<A, I, R>) => {
  // (an Either is an Effect)
  const decode = rowsDecoder(row as Schema.Schema<A, I, never>)
  return <E, R2>(rows: Effect.Effect<ReadonlyArray<unknown>, E, R2>): Effect.Effect<ReadonlyArray<A>, E, R | R2> =>
    orDieOnMismatch(Effect.flatMap(rows, decode))
}

/**
 * One row decoded synchronously, with the same checks as decodeRows (a row that
 * does not match throws its ParseError): for reads answered without a fiber
 * (SqliteReader). Registered with the row schemas decodeRows uses.
 */
export const decodeRowSync = <A, I>(row: Schema.Schema<A, I, never>): ((u: unknown) => A) => {
  const decode = decodeRowsSync(row)
  return (u) => decode([u])[0]!
}

/** decodeRowSync for an array of rows (SqliteNow's reads and writes). */
export const decodeRowsSync = <A, I>(row: Schema.Schema<A, I, never>): ((u: ReadonlyArray<unknown>) => ReadonlyArray<A>) => {
  const decode = rowsDecoder(row)
  return (u) => {
    const rows = decode(u)
    if (Either.isLeft(rows)) throw rows.left
    return rows.right
  }
}

/** A field decoded from the snake_case column `name`: row schemas decode straight to the domain's camelCase shape. */
export const column = <S extends Schema.Schema.Any>(name: string, schema: S) =>
  Schema.propertySignature(schema).pipe(Schema.fromKey(name))

/** SqlSchema.findOne's Option as `A | undefined`, a mismatching row as a defect. */
export const orUndefined = <A, E, R>(self: Effect.Effect<Option.Option<A>, E | ParseResult.ParseError, R>): Effect.Effect<A | undefined, E, R> =>
  orDieOnMismatch(Effect.map(self, Option.getOrUndefined))

/** A BLOB/BYTEA column as a plain Uint8Array (a copy: never a view into a driver's pooled Buffer). */
export const DbBytes = Schema.transform(Schema.Uint8ArrayFromSelf, Schema.Uint8ArrayFromSelf, {
  strict: true,
  decode: (bytes) => new Uint8Array(bytes),
  encode: (bytes) => bytes
})
