/**
 * The published signing keys (table signing_keys): the active keys this instance
 * signs with, and the retired keys of imported historical attestations. Read by
 * /v1/keys, /v1/info, the verifier page and evidence bundles.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { PublicJwk } from "../Domain/T0.js"

export type ListedJwk = PublicJwk & { readonly status?: "retired" }

export class SigningKeys extends Effect.Service<SigningKeys>()("Platform/SigningKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const isActive = (v: unknown) => v === true || v === 1 || v === "1" || v === "t"
    const rows = sql<{ jwk: string; active: unknown }>`SELECT jwk, active FROM signing_keys ORDER BY created_at, kid`.pipe(Effect.orDie)
    /** The keys this instance signs with. */
    const active = Effect.map(rows, (rs) => rs.filter((r) => isActive(r.active)).map((r) => JSON.parse(r.jwk) as PublicJwk))
    /** Every published key: the active ones, then the retired keys of imported historical attestations. */
    const listed = Effect.map(rows, (rs): Array<ListedJwk> => [
      ...rs.filter((r) => isActive(r.active)).map((r) => JSON.parse(r.jwk) as PublicJwk),
      ...rs.filter((r) => !isActive(r.active)).map((r) => ({ ...(JSON.parse(r.jwk) as PublicJwk), status: "retired" as const }))
    ])
    /** The bare JWK of a published key (active or retired), for evidence bundles. */
    const byKid = (kid: string) =>
      Effect.map(
        sql<{ jwk: string }>`SELECT jwk FROM signing_keys WHERE kid = ${kid}`.pipe(Effect.orDie),
        (rs) => (rs[0] ? (JSON.parse(rs[0].jwk) as PublicJwk) : undefined)
      )
    return { active, listed, byKid }
  })
}) {}
