/**
 * Column schemas shared by both stores' row decoding: a number (SQLite) and a
 * decimal string (Postgres) decode alike.
 */
import { Arbitrary, Effect, Either, Exit, ParseResult, Schema } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { AttestationRow, ClaimRow } from "../../src/Attestations/Domain.js"
import { AttestationId } from "../../src/Domain/AttestationId.js"
import { CountRow, DbBool, DbInt, decodeRows } from "../../src/Platform/Rows.js"

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
