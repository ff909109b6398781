/**
 * The published signing keys (table signing_keys): the service's own T0 keys, each with
 * its validity window (`activated_at`, and `retired_at` once rotated out), and the keys of
 * imported historical attestations (retired, their window the span of the signatures
 * imported). Read by /v1/keys, /v1/info, the verifier page and evidence bundles; the
 * Signer registers, retires and polls its keys here.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Schema } from "effect"
import { Jwk } from "../Domain/Jwk.js"
import type { PublicJwk } from "../Domain/T0.js"
import type { KeyRole } from "./Keys/Custody.js"
import { DbBool, decodeRows } from "./Rows.js"

/** A published key: the stored JWK and its window (wire time format), retired ones marked. */
export type ListedJwk = PublicJwk & {
  readonly attestd_activated_at?: string
  readonly attestd_retired_at?: string
  readonly status?: "retired"
}

const keyRows = decodeRows(Schema.Struct({
  jwk: Schema.String,
  active: DbBool,
  activated_at: Schema.NullOr(Schema.String),
  retired_at: Schema.NullOr(Schema.String)
}))
const windowRows = decodeRows(Schema.Struct({ kid: Schema.String, activated_at: Schema.String, retired_at: Schema.NullOr(Schema.String) }))
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

type KeyRow = { readonly jwk: string; readonly active: boolean; readonly activated_at: string | null; readonly retired_at: string | null }

/** The stored JWK with its window: what an evidence bundle carries. */
const windowedJwk = (r: KeyRow): ListedJwk => ({
  ...storedJwk(r.jwk),
  ...(r.activated_at === null ? {} : { attestd_activated_at: r.activated_at }),
  ...(r.retired_at === null ? {} : { attestd_retired_at: r.retired_at })
})

/** As GET /v1/keys lists it: keys that sign nothing new marked retired. */
const listedJwk = (r: KeyRow): ListedJwk => ({
  ...windowedJwk(r),
  ...(r.active && r.retired_at === null ? {} : { status: "retired" as const })
})

export class SigningKeys extends Effect.Service<SigningKeys>()("Platform/SigningKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = keyRows(sql`SELECT jwk, active, activated_at, retired_at FROM signing_keys WHERE role = 't0'
      ORDER BY created_at, kid`).pipe(Effect.orDie)
    /**
     * Every published T0 key: the ones that sign (no retired_at), then those rotated out or
     * imported, each with its window.
     */
    const listed = Effect.map(rows, (rs): Array<ListedJwk> => {
      const all = rs.map(listedJwk)
      return [...all.filter((k) => k.status === undefined), ...all.filter((k) => k.status !== undefined)]
    })
    /** A published key (signing or retired) with its window, for evidence bundles. */
    const byKid = (kid: string) =>
      Effect.map(
        keyRows(sql`SELECT jwk, active, activated_at, retired_at FROM signing_keys WHERE kid = ${kid}`).pipe(Effect.orDie),
        (rs) => (rs[0] ? windowedJwk(rs[0]) : undefined)
      )
    return { listed, byKid }
  })
}) {}

/** A key's validity window: it signs what is registered from `activatedAt` to `retiredAt` (open while null). */
export interface KeyWindow {
  readonly kid: string
  readonly activatedAt: string
  readonly retiredAt: string | null
}

/** The service's own keys of `role` (imported keys excluded) with their windows, newest activation first. */
export const keyWindows = (role: KeyRole) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    // An instance of an earlier version registers keys without activated_at: their creation is their activation.
    windowRows(sql`SELECT kid, COALESCE(activated_at, created_at) AS activated_at, retired_at FROM signing_keys
      WHERE role = ${role} AND active ORDER BY COALESCE(activated_at, created_at) DESC, kid`)).pipe(
      Effect.map((rs): Array<KeyWindow> => rs.map((r) => ({ kid: r.kid, activatedAt: r.activated_at, retiredAt: r.retired_at })))
    )

/** Records a key of the service's own, active from `activatedAt` (idempotent: a key already recorded keeps its row). */
export const registerKey = (role: KeyRole, jwk: PublicJwk, createdAt: string, activatedAt: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`INSERT INTO signing_keys (kid, jwk, created_at, role, activated_at)
      VALUES (${jwk.kid}, ${JSON.stringify(jwk)}, ${createdAt}, ${role}, ${activatedAt})
      ON CONFLICT (kid) DO NOTHING`)

/** Ends the windows of `kids` at `at` (keys already retired keep their time). */
export const retireKeys = (kids: ReadonlyArray<string>, at: string) =>
  kids.length === 0
    ? Effect.void
    : Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`UPDATE signing_keys SET retired_at = ${at} WHERE ${sql.in("kid", kids)} AND retired_at IS NULL`)
