/**
 * The published signing keys (table signing_keys): the active keys this instance
 * signs with, and the retired keys of imported historical attestations. Read by
 * /v1/keys, /v1/info, the verifier page and evidence bundles.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Jwk } from "../Domain/Jwk.js"
import type { PublicJwk } from "../Domain/T0.js"
import { DbBool, decodeRows } from "./Rows.js"

export type ListedJwk = PublicJwk & { readonly status?: "retired" }

const keyRows = decodeRows(Schema.Struct({ jwk: Schema.String, active: DbBool }))
const jwkRows = decodeRows(Schema.Struct({ jwk: Schema.String }))
const isJwk = Schema.is(Jwk)

/**
 * A stored JWK, checked against the schema but kept as stored: the key order of
 * the JSON the service publishes stays the order it was written in. A stored key
 * that does not match is a bug (a defect), as with any row.
 */
export const storedJwk = (text: string): PublicJwk => {
  const jwk: unknown = JSON.parse(text)
  if (!isJwk(jwk)) throw new Error("signing_keys holds a JWK that does not match the PublicJwk schema")
  return jwk
}

export class SigningKeys extends Effect.Service<SigningKeys>()("Platform/SigningKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = keyRows(sql`SELECT jwk, active FROM signing_keys ORDER BY created_at, kid`).pipe(Effect.orDie)
    /** The keys this instance signs with. */
    const active = Effect.map(rows, (rs) => rs.filter((r) => r.active).map((r) => storedJwk(r.jwk)))
    /** Every published key: the active ones, then the retired keys of imported historical attestations. */
    const listed = Effect.map(rows, (rs): Array<ListedJwk> => [
      ...rs.filter((r) => r.active).map((r) => storedJwk(r.jwk)),
      ...rs.filter((r) => !r.active).map((r) => ({ ...storedJwk(r.jwk), status: "retired" as const }))
    ])
    /** The bare JWK of a published key (active or retired), for evidence bundles. */
    const byKid = (kid: string) =>
      Effect.map(
        jwkRows(sql`SELECT jwk FROM signing_keys WHERE kid = ${kid}`).pipe(Effect.orDie),
        (rs) => (rs[0] ? storedJwk(rs[0].jwk) : undefined)
      )
    return { active, listed, byKid }
  })
}) {}
