/**
 * Health checks and tier status. The database and signer decide health; the
 * TSA and calendars report `degraded` without making the service unhealthy.
 * A background worker (sealing, anchoring) that has kept failing for longer
 * than two of its windows makes the status `degraded`: its check then names
 * the reason and since when; so does an untrusted clock (`clock`, with its
 * offset). Later tiers register their checks and counts here.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Cause, Clock, Duration, Effect, Option, Ref } from "effect"
import { formatMillis } from "../Domain/Time.js"
import { Signer } from "./Signer.js"

export type CheckResult = "ok" | "degraded" | "unhealthy"

/** A check that says why: a worker failing past two of its windows. */
export interface CheckDetail {
  readonly status: CheckResult
  readonly reason: string
  /** When the run of failures began (wire time format). */
  readonly since: string
}

/**
 * The clock of the RFC 3161 authority, when NTP servers discipline it: `degraded` while it is
 * not trusted (POST /v1/timestamp then answers timeNotAvailable; attests go on).
 */
export interface ClockCheck {
  readonly status: "ok" | "degraded"
  /** Median offset (server − local) of the NTP servers that answered the last poll, ms; null when none did. */
  readonly offset_ms: number | null
  /** Half the median round trip, ms: what the offset may be wrong by; null when no server answered. */
  readonly half_round_trip_ms: number | null
  readonly tolerance_ms: number
  /** When the last poll finished (wire time format); null before the first. */
  readonly checked_at: string | null
  /** Why the clock is not trusted (only when degraded). */
  readonly reason?: string
}

export type CheckValue = CheckResult | CheckDetail | ClockCheck

export const statusOf = (value: CheckValue): CheckResult => (typeof value === "string" ? value : value.status)

export interface TierProbe {
  readonly name: string
  readonly check: Effect.Effect<CheckValue>
}

/** What a background worker reports after each attempt. */
export interface WorkerHealth {
  readonly succeeded: Effect.Effect<void>
  readonly failed: (reason: string) => Effect.Effect<void>
}

/** A failure's first line, short: what a check shows as its reason. */
export const reasonOf = (cause: Cause.Cause<unknown>): string => {
  const e = Cause.squash(cause)
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!.slice(0, 300)
}

interface Failing {
  readonly sinceMillis: number
  readonly reason: string
}

/** How many of its windows a worker may fail before health says degraded. */
export const WORKER_GRACE_WINDOWS = 2

export class HealthChecks extends Effect.Service<HealthChecks>()("Platform/HealthChecks", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const signer = yield* Signer
    const probes: Array<TierProbe> = []
    const workers: Array<{ readonly name: string; readonly check: Effect.Effect<CheckValue> }> = []
    const features: Array<string> = []
    const tiers: Record<string, unknown> = { T0: { algorithm: "ECDSA-P256-SHA256", format_version: "2.0.0" } }
    const countQueries: Array<Effect.Effect<Record<string, number>>> = []

    const database = sql`SELECT 1 AS ok`.pipe(
      Effect.timeout(Duration.seconds(2)),
      Effect.as("ok" as CheckResult),
      Effect.orElseSucceed(() => "unhealthy" as CheckResult)
    )

    const run = Effect.gen(function*() {
      const checks: Record<string, CheckValue> = {
        database: yield* database,
        signer: yield* signer.health
      }
      for (const p of probes) checks[p.name] = yield* p.check
      for (const w of workers) checks[w.name] = yield* w.check
      const statuses = Object.values(checks).map(statusOf)
      const ok = statuses.every((s) => s !== "unhealthy")
      // The dependency checks (tsa, calendars, bitcoin) say how the last attempt went; only a
      // worker's sustained failure, a check with a reason, moves the status.
      const degraded = Object.values(checks).some((c) => typeof c !== "string" && c.status === "degraded")
      return { ok, degraded, checks }
    })

    /**
     * Tracks a worker whose attempts come every `window`: a run of failures older than
     * WORKER_GRACE_WINDOWS windows is `degraded` under `name`, with the latest reason.
     */
    const worker = (name: string, window: Duration.DurationInput) =>
      Effect.gen(function*() {
        const windowMs = Duration.toMillis(window)
        const state = yield* Ref.make(Option.none<Failing>())
        const check = Effect.gen(function*() {
          const failing = yield* Ref.get(state)
          if (Option.isNone(failing)) return "ok" as CheckValue
          const now = yield* Clock.currentTimeMillis
          if (now - failing.value.sinceMillis <= WORKER_GRACE_WINDOWS * windowMs) return "ok" as CheckValue
          return { status: "degraded", reason: failing.value.reason, since: formatMillis(failing.value.sinceMillis) } as CheckValue
        })
        workers.push({ name, check })
        const health: WorkerHealth = {
          succeeded: Ref.set(state, Option.none()),
          failed: (reason) =>
            Effect.flatMap(Clock.currentTimeMillis, (now) =>
              Ref.update(state, (prev) =>
                Option.some({ sinceMillis: Option.match(prev, { onNone: () => now, onSome: (p) => p.sinceMillis }), reason })))
        }
        return health
      })

    /** Each tracked worker and whether it is degraded now (the metrics' gauge). */
    const workerStates = Effect.forEach(workers, (w) =>
      Effect.map(w.check, (c) => ({ name: w.name, degraded: statusOf(c) === "degraded" })))

    const counts = Effect.map(Effect.all(countQueries), (parts) =>
      Object.assign({ batches: 0, daily_roots: 0 }, ...parts) as { batches: number; daily_roots: number })

    return {
      run,
      counts,
      worker,
      workerStates,
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
