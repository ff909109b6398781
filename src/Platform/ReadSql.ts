/**
 * The database the public reads ask first: a Postgres replica at ATTESTD_PG_READ_URL, or the
 * primary itself when there is none. Only reads go there; what they miss is read again on the
 * primary (Attestations/PublicReads.ts), so a replica's lag never makes an attestation absent.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Context, Effect, Layer, Option } from "effect"
import pg from "pg"

export class ReadSql extends Context.Tag("Platform/ReadSql")<ReadSql, {
  readonly client: SqlClient.SqlClient
  /** false: `client` is the primary's own (no ATTESTD_PG_READ_URL), and a miss there is final */
  readonly replica: boolean
}>() {
  static readonly layer = (config: { readonly databaseReadUrl: Option.Option<string> }): Layer.Layer<ReadSql, never, SqlClient.SqlClient> =>
    Option.match(config.databaseReadUrl, {
      onNone: () => Layer.effect(ReadSql, Effect.map(SqlClient.SqlClient, (client) => ({ client, replica: false }))),
      onSome: (url) =>
        Layer.effect(ReadSql, Effect.map(SqlClient.SqlClient, (client) => ({ client, replica: true }))).pipe(
          Layer.provide(replicaClient(url))
        )
    })
}

/**
 * A client of the replica over a pool of its own that connects on first use: unlike the
 * primary's, it does not try a connection at start, so an instance starts (and reads on the
 * primary) while its replica is down.
 */
const replicaClient = (url: string) =>
  PgClient.layerFromPool({
    acquire: Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 2000, application_name: "attestd-read" })
        // an idle connection the replica drops; the next read opens another
        pool.on("error", () => {})
        return pool
      }),
      (pool) => Effect.promise(() => pool.end())
    )
  }).pipe(Layer.orDie)
