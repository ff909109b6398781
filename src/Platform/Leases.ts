/**
 * Cluster-wide mutual exclusion for background jobs, with nothing held in a database
 * session, so it holds through a transaction pooler (PgBouncer) and on SQLite alike.
 *
 * Jobs that call out between their reads and their writes (the sealer asks a TSA, the
 * anchorer and the OTS upgrader ask calendars) hold a lease: a `leases` row naming the
 * holder, a fencing token and an expiry on the database's clock. It is taken in one short
 * statement when it is free or expired, renewed while the job runs, and released when it
 * ends. Every write of the job runs in a transaction that first confirms the token
 * (`UPDATE leases … WHERE name = $1 AND token = $2` must touch one row), so a job that
 * stalled past its lease while another instance took over writes nothing: no window is
 * sealed twice. A crashed holder's lease lapses after at most its duration. The holder is
 * the process, named by its place (host and data directory) and pid: an instance restarted
 * in place takes the lease of its previous run back at once when that pid no longer runs
 * on this host (the take-over still moves the token, fencing anything left of the old
 * process), while two live processes sharing a data directory are two holders and wait for
 * each other's lease like any others.
 *
 * A job that is one transaction (the webhook fan-out) takes a transaction-level advisory
 * lock instead (`pg_try_advisory_xact_lock`): it is released with the transaction, wherever
 * the pooler sends the next one. SQLite has one writer, so there it always succeeds.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Data, Duration, Effect, Fiber, Option, Schema } from "effect"
import { createHash } from "node:crypto"
import { hostname } from "node:os"
import { resolve } from "node:path"
import { AppConfig } from "./Config.js"
import { sleepRealTime, timeoutRealTime } from "./RealTime.js"
import { DbInt, decodeRows } from "./Rows.js"
import { inTransaction, retryingConflicts } from "./Sql.js"

/** A job's write refused because its lease was taken over. */
export class LeaseLost extends Data.TaggedError("LeaseLost")<{ readonly name: string }> {}

/**
 * Runs one write of a job in a transaction that first confirms the job's lease (and
 * extends it); LeaseLost, with nothing written, when another instance took it over.
 * Conflicts are retried; any other failure of the write is a defect, as in the jobs.
 */
export type Fence = <A, E, R>(write: Effect.Effect<A, E, R>) => Effect.Effect<A, LeaseLost, R>

/**
 * How long a lease lasts for a job that runs every `interval`: no longer than the interval, so
 * a crashed holder costs at most about one window, within 2–30 s (renewed every third of it).
 */
export const leaseDuration = (interval: Duration.DurationInput): number =>
  Math.min(30_000, Math.max(2_000, Duration.toMillis(interval)))

const TokenRow = Schema.Struct({ token: DbInt })
const decodeTokens = decodeRows(TokenRow)
const decodeHolders = decodeRows(Schema.Struct({ holder: Schema.String }))
const LockedRow = Schema.Struct({ locked: Schema.Boolean })
const decodeLocked = decodeRows(LockedRow)

/** Where an instance runs: this host and data directory (an instance restarted in place is in the same place). */
const placeOf = (dataDir: string): string =>
  `${hostname()}:${createHash("sha256").update(resolve(dataDir)).digest("hex").slice(0, 16)}`

/** Whether process `pid` runs on this host: signal 0 checks without signalling (EPERM: it runs as another user). */
const runs = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * Whether `holder` is a previous run of the instance at `place` that no longer runs: its pid
 * is gone from this host (or it predates pids in holders). A pid reused since only delays the
 * take-over until the lease expires.
 */
const isDeadRunOf = (place: string, holder: string): boolean => {
  if (holder === place) return true
  if (!holder.startsWith(`${place}:`)) return false
  const pid = Number(holder.slice(place.length + 1))
  return Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && !runs(pid)
}

export class Leases extends Effect.Service<Leases>()("Platform/Leases", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const place = placeOf(config.dataDir)
    const holder = `${place}:${process.pid}`
    const now = sql.onDialectOrElse({
      pg: () => sql.unsafe("(extract(epoch from clock_timestamp()) * 1000)::bigint"),
      orElse: () => sql.unsafe("CAST(unixepoch('subsec') * 1000 AS INTEGER)")
    })

    /**
     * The lease's token if it was free, expired, already ours, or held by a previous run of
     * this instance that no longer runs; the take is one statement, and a holder that changed
     * since it was read is not taken.
     */
    const take = (name: string, ms: number) =>
      Effect.gen(function*() {
        const [current] = yield* decodeHolders(sql`SELECT holder FROM leases WHERE name = ${name}`)
        const deadRun = current !== undefined && isDeadRunOf(place, current.holder) ? current.holder : null
        const rows = yield* decodeTokens(sql`INSERT INTO leases (name, holder, token, expires_at) VALUES (${name}, ${holder}, 1, ${now} + ${ms})
          ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = leases.token + 1, expires_at = excluded.expires_at
          WHERE leases.expires_at <= ${now} OR leases.holder = excluded.holder OR leases.holder = ${deadRun}
          RETURNING token`)
        return Option.fromNullable(rows[0]?.token)
      })

    /** Extends the lease if `token` still holds it; whether it does. */
    const extend = (name: string, token: number, ms: number) =>
      Effect.map(
        decodeTokens(sql`UPDATE leases SET expires_at = ${now} + ${ms} WHERE name = ${name} AND token = ${token} RETURNING token`),
        (rows) => rows.length === 1
      )

    const release = (name: string, token: number) => sql`UPDATE leases SET expires_at = ${now} WHERE name = ${name} AND token = ${token}`

    const fenceOf = (name: string, token: number, ms: number): Fence => (write) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        if (!(yield* extend(name, token, ms))) return yield* new LeaseLost({ name })
        return yield* write
      }))).pipe(Effect.catchAll((e) => (e instanceof LeaseLost ? Effect.fail(e) : Effect.die(e))))

    /**
     * Runs `job` if this instance can take the lease `name` (for `ms`), renewing it meanwhile
     * and releasing it after; None when another holder has it, or took it over before the
     * job's last write (the job's fenced writes then wrote nothing). A database failure of
     * the lease itself is a defect, as the jobs' own are.
     */
    const exclusively = <A, E, R>(
      name: string,
      ms: number,
      job: (fence: Fence) => Effect.Effect<A, E | LeaseLost, R>
    ): Effect.Effect<Option.Option<A>, E, R> =>
      Effect.gen(function*() {
        const token = yield* Effect.orDie(take(name, ms))
        if (Option.isNone(token)) return Option.none<A>()
        const renewing = yield* Effect.forkDaemon(Effect.forever(Effect.zipRight(sleepRealTime(ms / 3), Effect.ignore(extend(name, token.value, ms)))))
        return yield* job(fenceOf(name, token.value, ms)).pipe(
          Effect.map(Option.some),
          Effect.catchIf((e): e is LeaseLost => e instanceof LeaseLost, () =>
            Effect.as(Effect.logWarning(`the ${name} lease was taken over by another instance; this run wrote nothing`), Option.none<A>())),
          // bounded: a release that cannot reach the database must not hold up the next run or a shutdown
          Effect.ensuring(Effect.zipRight(Fiber.interruptFork(renewing), Effect.ignore(timeoutRealTime(release(name, token.value), 2_000, Effect.void))))
        ) as Effect.Effect<Option.Option<A>, E, R>
      })

    return { exclusively, holder }
  })
}) {}

/**
 * Inside a transaction: whether this transaction now holds the advisory lock `id` until it
 * ends (Postgres, without waiting); true on SQLite, whose one writer runs it alone anyway.
 */
export const tryTransactionLock = (id: number) =>
  Effect.gen(function*() {
    if (!(yield* inTransaction)) return yield* Effect.dieMessage("tryTransactionLock belongs inside a transaction")
    const sql = yield* SqlClient.SqlClient
    return yield* sql.onDialectOrElse({
      pg: () => Effect.map(decodeLocked(sql.unsafe(`SELECT pg_try_advisory_xact_lock(${id}) AS locked`)), (rows) => rows[0]?.locked === true),
      orElse: () => Effect.succeed(true)
    })
  })
