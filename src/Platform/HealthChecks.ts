/**
 * Health checks and tier status. The database and signer decide health; the
 * TSA and calendars report `degraded` without making the service unhealthy.
 * Later tiers register their checks and counts here.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import { Signer } from "./Signer.js"

export type CheckResult = "ok" | "degraded" | "unhealthy"

export interface TierProbe {
  readonly name: string
  readonly check: Effect.Effect<CheckResult>
}

export class HealthChecks extends Effect.Service<HealthChecks>()("Platform/HealthChecks", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const signer = yield* Signer
    const probes: Array<TierProbe> = []
    const features: Array<string> = []
    const tiers: Record<string, unknown> = { T0: { algorithm: "ECDSA-P256-SHA256", format_version: "2.0.0" } }
    const countQueries: Array<Effect.Effect<Record<string, number>>> = []

    const database = sql`SELECT 1 AS ok`.pipe(
      Effect.timeout(Duration.seconds(2)),
      Effect.as("ok" as CheckResult),
      Effect.orElseSucceed(() => "unhealthy" as CheckResult)
    )

    const run = Effect.gen(function*() {
      const checks: Record<string, CheckResult> = {
        database: yield* database,
        signer: signer.currentKid ? "ok" : "unhealthy"
      }
      for (const p of probes) checks[p.name] = yield* p.check
      const ok = Object.values(checks).every((c) => c !== "unhealthy")
      return { ok, checks: checks as Record<string, string> }
    })

    const counts = Effect.map(Effect.all(countQueries), (parts) =>
      Object.assign({ batches: 0, daily_roots: 0 }, ...parts) as { batches: number; daily_roots: number })

    return {
      run,
      counts,
      features: () => features as ReadonlyArray<string>,
      tiers: () => tiers,
      register: (options: {
        readonly probe?: TierProbe
        readonly features?: ReadonlyArray<string>
        readonly tier?: readonly [string, unknown]
        readonly counts?: Effect.Effect<Record<string, number>>
      }) =>
        Effect.sync(() => {
          if (options.probe) probes.push(options.probe)
          if (options.features) features.push(...options.features)
          if (options.tier) tiers[options.tier[0]] = options.tier[1]
          if (options.counts) countQueries.push(options.counts)
        })
    }
  }),
  dependencies: [Signer.Default]
}) {}
