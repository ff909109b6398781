/**
 * Column schemas for the repositories' row schemas. SQLite returns INTEGER as a
 * number and Postgres returns BIGINT, COUNT(*) and SUM as strings: one schema
 * accepts what either store returns, so a repository decodes rows the same way
 * on both.
 */
import { Effect, Option, ParseResult, Schema } from "effect"

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
 * Decodes a statement's rows with `row` (a statement whose SQL is built at run time, so
 * SqlSchema's Request has nothing to say). The decoder is built once, when a repository
 * names its row schema, not per statement.
 */
export const decodeRows = <A, I, R>(row: Schema.Schema<A, I, R>) => {
  const decode = Schema.decodeUnknown(Schema.Array(row))
  return <E, R2>(rows: Effect.Effect<ReadonlyArray<unknown>, E, R2>): Effect.Effect<ReadonlyArray<A>, E, R | R2> =>
    orDieOnMismatch(Effect.flatMap(rows, decode))
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
