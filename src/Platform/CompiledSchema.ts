/**
 * Structs decoded by plain functions compiled from their schema's AST, where every
 * field is of a kind this module knows: strings, numbers, booleans, literals (null
 * among them), unknown, refinements (patterns, lengths, brands, integers), unions of
 * these, transformations whose decode answers at once (DbInt's NumberFromString,
 * parseJson, Schema.transform) and declarations (Uint8Array). Effect's parser returns an
 * Either per step and threads its options through every call: a row or payload through
 * it cost ~3–4% of an attest's CPU on both stores (perf, 2026-11-24); an attestations
 * row takes ~1 µs compiled against ~13 through Effect's decoder.
 *
 * A compiled decoder is only ever sure of success. An input it is not sure of (one that
 * does not decode, or is not an object) goes to Effect's decoder, so every refusal, and
 * its ParseError, is Effect's own; a schema with a part it does not know (a nested
 * struct or array, a parse options or decoding fallback annotation, an index signature)
 * is not compiled at all. Used for the repositories' rows (`Rows.ts`) and the fast
 * lane's payloads; test/Platform/Rows.test.ts and test/Platform/compiledSchema.test.ts
 * hold the compiled decoders equal to Effect's.
 */
import { Either, identity, Option, type ParseResult, type Schema, SchemaAST as AST } from "effect"

/** What a compiled check answers when it is not sure: the input goes to Effect's decoder. */
const NOT_SURE: unique symbol = Symbol("CompiledSchema/NOT_SURE")
type Compiled = (u: unknown) => unknown

/** Whether `ast` carries an annotation that changes how Effect parses it (parse options, a decoding fallback): never compiled. */
export const changesParsing = (ast: AST.AST): boolean =>
  Option.isSome(AST.getParseOptionsAnnotation(ast)) || Option.isSome(AST.getDecodingFallbackAnnotation(ast))

/** An AST's decode as a plain function, or undefined when it has a part this module does not know. */
const compiledValue = (ast: AST.AST): Compiled | undefined => {
  if (changesParsing(ast)) return undefined
  switch (ast._tag) {
    case "StringKeyword":
      return (u) => (typeof u === "string" ? u : NOT_SURE)
    case "NumberKeyword":
      return (u) => (typeof u === "number" ? u : NOT_SURE)
    case "BooleanKeyword":
      return (u) => (typeof u === "boolean" ? u : NOT_SURE)
    case "UnknownKeyword":
    case "AnyKeyword":
      return identity
    case "UndefinedKeyword":
      return (u) => (u === undefined ? u : NOT_SURE)
    case "Literal": {
      const literal = ast.literal
      return (u) => (u === literal ? u : NOT_SURE)
    }
    case "Refinement": {
      const from = compiledValue(ast.from)
      if (from === undefined) return undefined
      return (u) => {
        const a = from(u)
        return a === NOT_SURE || Option.isSome(ast.filter(a, AST.defaultParseOption, ast)) ? NOT_SURE : a
      }
    }
    case "Union": {
      // Effect tries a union's members in order and keeps the first that decodes (members
      // that are structs go by their literal fields first: not compiled here)
      const members = ast.types.map(compiledValue)
      if (!members.every((m): m is Compiled => m !== undefined)) return undefined
      return (u) => {
        for (const m of members) {
          const a = m(u)
          if (a !== NOT_SURE) return a
        }
        return NOT_SURE
      }
    }
    case "Transformation": {
      const from = compiledValue(ast.from)
      const to = compiledValue(ast.to)
      if (from === undefined || to === undefined) return undefined
      const t = ast.transformation
      if (t._tag === "ComposeTransformation") {
        return (u) => {
          const a = from(u)
          return a === NOT_SURE ? a : to(a)
        }
      }
      if (t._tag !== "FinalTransformation") return undefined
      return (u) => {
        const a = from(u)
        if (a === NOT_SURE) return a
        const b = t.decode(a, AST.defaultParseOption, ast, u)
        return Either.isEither(b) && Either.isRight(b) ? to(b.right) : NOT_SURE
      }
    }
    case "Declaration": {
      const decode = ast.decodeUnknown(...ast.typeParameters)
      return (u) => {
        const a = decode(u, AST.defaultParseOption, ast)
        return Either.isEither(a) && Either.isRight(a) ? a.right : NOT_SURE
      }
    }
    default:
      return undefined
  }
}

/** A struct's fields: each output key, the input key it is read from, whether it may be absent, and its compiled decode. */
export type CompiledFields = ReadonlyArray<readonly [key: PropertyKey, from: string, optional: boolean, decode: Compiled]>

/**
 * The compiled fields of the struct `from`, read into the output keys `keys` (each with
 * the key of `from` it is read from: the same, or a column renamed), or undefined.
 */
export const compiledFields = (
  from: AST.TypeLiteral,
  keys: ReadonlyArray<readonly [PropertyKey, PropertyKey]>
): CompiledFields | undefined => {
  if (from.indexSignatures.length > 0 || from.propertySignatures.length === 0 || changesParsing(from)) return undefined
  const byName = new Map(from.propertySignatures.map((ps) => [ps.name, ps]))
  const out: Array<CompiledFields[number]> = []
  for (const [key, name] of keys) {
    const ps = byName.get(name)
    if (ps === undefined || typeof name !== "string") return undefined
    const decode = compiledValue(ps.type)
    if (decode === undefined) return undefined
    out.push([key, name, ps.isOptional, decode])
  }
  return out.length === from.propertySignatures.length ? out : undefined
}

/** A struct's compiled fields (no renames), or undefined. */
export const structFields = (ast: AST.AST): CompiledFields | undefined =>
  ast._tag === "TypeLiteral" ? compiledFields(ast, ast.propertySignatures.map((ps) => [ps.name, ps.name] as const)) : undefined

const hasOwn = Object.prototype.hasOwnProperty

/** One object through the compiled fields, or NOT_SURE. Effect's order: the fields', an absent optional one left out. */
const decodeObject = (fields: CompiledFields, r: unknown): Record<PropertyKey, unknown> | typeof NOT_SURE => {
  if (typeof r !== "object" || r === null || Array.isArray(r)) return NOT_SURE
  const out: Record<PropertyKey, unknown> = {}
  for (const [key, from, optional, decode] of fields) {
    if (optional && !hasOwn.call(r, from)) continue
    const v = decode((r as Record<PropertyKey, unknown>)[from])
    if (v === NOT_SURE) return NOT_SURE
    out[key] = v
  }
  return out
}

/** An array of objects decoded by the compiled fields, or by `effects` (Effect's decoder) for any input they are not sure of. */
export const compiledArray = <A>(
  fields: CompiledFields,
  effects: (u: unknown) => Either.Either<ReadonlyArray<A>, ParseResult.ParseError>
) =>
(u: unknown): Either.Either<ReadonlyArray<A>, ParseResult.ParseError> => {
  if (!Array.isArray(u)) return effects(u)
  const rows: Array<A> = new Array(u.length)
  for (let i = 0; i < u.length; i++) {
    const row = decodeObject(fields, u[i])
    if (row === NOT_SURE) return effects(u)
    rows[i] = row as A
  }
  return Either.right(rows)
}

/** `schema`'s decoder (a struct: compiled where it can be; Effect's `effects` otherwise, and for any input the compiled one is not sure of). */
export const compiledStruct = <A, I>(
  schema: Schema.Schema<A, I, never>,
  effects: (u: unknown) => Either.Either<A, ParseResult.ParseError>
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const fields = structFields(schema.ast)
  if (fields === undefined) return effects
  return (u) => {
    const out = decodeObject(fields, u)
    return out === NOT_SURE ? effects(u) : Either.right(out as A)
  }
}
