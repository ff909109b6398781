/**
 * CompiledSchema's struct decoder (the fast lane's payloads; the rows' are in Rows.test.ts),
 * held equal to Effect's decoder: the same value with its keys in the same order, or Effect's
 * own refusal.
 */
import { Either, ParseResult, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { AttestPayload, VerifyPayload } from "../../src/Attestations/Api.js"
import { compiledStruct, structFields } from "../../src/Platform/CompiledSchema.js"

const hex = fc.stringMatching(/^[0-9a-f]{64}$/)
const payloads = fc.record({
  hash_hex: fc.oneof(hex, hex.map((h) => h.toUpperCase()), fc.string(), fc.anything()),
  source: fc.oneof(fc.string({ maxLength: 120 }), fc.constant(null), fc.constant(undefined), fc.anything()),
  extra_data: fc.oneof(fc.object(), fc.constant(null), fc.constant(undefined), fc.array(fc.integer()), fc.anything()),
  client_encrypted: fc.oneof(fc.boolean(), fc.constant(undefined), fc.anything()),
  other: fc.anything()
}, { requiredKeys: [] })

const same = <A, I>(schema: Schema.Schema<A, I, never>, input: unknown) => {
  const effects = Schema.decodeUnknownEither(schema)
  const expected = effects(input)
  const actual = compiledStruct(schema, effects)(input)
  expect(actual._tag).toBe(expected._tag)
  if (Either.isRight(expected) && Either.isRight(actual)) {
    expect(actual.right).toStrictEqual(expected.right)
    expect(Object.keys(actual.right as object)).toEqual(Object.keys(expected.right as object))
  }
  if (Either.isLeft(expected) && Either.isLeft(actual)) {
    expect(actual.left).toBeInstanceOf(ParseResult.ParseError)
    expect(ParseResult.ArrayFormatter.formatErrorSync(actual.left)).toEqual(ParseResult.ArrayFormatter.formatErrorSync(expected.left))
  }
}

describe("compiledStruct", () => {
  it("compiles the attest and verify payloads", () => {
    expect(structFields(AttestPayload.ast)).toBeDefined()
    expect(structFields(VerifyPayload.ast)).toBeDefined()
  })

  it("decodes generated payloads, valid and not, as Effect's decoder does", () => {
    fc.assert(fc.property(payloads, (p) => {
      same(AttestPayload, p)
      same(VerifyPayload, p)
    }), { numRuns: 2000 })
  })

  it("keeps an absent optional field absent, a present undefined one present, and drops keys the schema does not name", () => {
    const h = "a".repeat(64)
    for (const p of [{ hash_hex: h }, { hash_hex: h, source: undefined }, { hash_hex: h, source: null, extra: 1 }, { source: "s", hash_hex: h }]) {
      same(AttestPayload, p)
    }
    const decoded = compiledStruct(AttestPayload, Schema.decodeUnknownEither(AttestPayload))({ extra: 1, source: undefined, hash_hex: h })
    expect(Either.isRight(decoded) && Object.keys(decoded.right)).toEqual(["hash_hex", "source"])
  })

  it("passes extra_data through as parsed, __proto__ key and all", () => {
    const extra = JSON.parse('{"__proto__": {"x": 1}, "a": [1, 2]}')
    const decoded = compiledStruct(AttestPayload, Schema.decodeUnknownEither(AttestPayload))({ hash_hex: "b".repeat(64), extra_data: extra })
    expect(Either.isRight(decoded) && decoded.right.extra_data).toBe(extra)
    same(AttestPayload, { hash_hex: "b".repeat(64), extra_data: extra })
  })

  it("refuses with Effect's own error: not an object, an array, a bad digest, a long source", () => {
    for (const input of [null, "x", 3, [], [{ hash_hex: "a".repeat(64) }], { hash_hex: "A".repeat(64) }, { hash_hex: "a".repeat(64), source: "s".repeat(101) }]) {
      same(AttestPayload, input)
      same(VerifyPayload, input)
    }
  })

  it("leaves a struct it cannot compile to Effect's decoder", () => {
    const nested = Schema.Struct({ a: Schema.Struct({ b: Schema.String }) })
    const effects = Schema.decodeUnknownEither(nested)
    expect(structFields(nested.ast)).toBeUndefined()
    expect(compiledStruct(nested, effects)).toBe(effects)
    expect(structFields(Schema.Struct({}).ast)).toBeUndefined()
    expect(structFields(Schema.Record({ key: Schema.String, value: Schema.String }).ast)).toBeUndefined()
  })
})
