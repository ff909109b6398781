/**
 * The live clock discipline (CONTRACT §6): every ATTESTD_NTP_INTERVAL, the
 * first time at start, each ATTESTD_NTP_SERVERS server is asked once over SNTP,
 * all at once. The clock is trusted when more than half of them answered and
 * |median offset| + half the median round trip ≤ ATTESTD_CLOCK_TOLERANCE.
 * Until the first poll has finished it is not trusted ("not yet checked"): a
 * token is never stamped on a clock nobody has looked at; nor on a verdict older
 * than two intervals (a poller that stopped). Each poll replaces the verdict, so
 * recovery needs no one. The verdict shows as the `clock` health check and the
 * attestd_clock_* gauges.
 */
import { Cause, Clock, Duration, Effect, Layer, Metric, Ref } from "effect"
import type { NtpServer } from "../Platform/Config.js"
import { type ClockCheck, HealthChecks } from "../Platform/HealthChecks.js"
import * as Metrics from "../Platform/Metrics.js"
import { formatMillis } from "../Domain/Time.js"
import { ClockDiscipline, type ClockState } from "./Clock.js"
import { query, SntpError, type SntpSample, serverLabel } from "./Sntp.js"

/** How long one server may take to answer a poll. */
export const QUERY_TIMEOUT = Duration.seconds(2)

export const NOT_YET_CHECKED = "not yet checked: the first NTP poll has not finished"

export interface ClockMonitorOptions {
  readonly servers: ReadonlyArray<NtpServer>
  readonly interval: Duration.DurationInput
  readonly toleranceMs: number
  readonly queryTimeout?: Duration.DurationInput
}

const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

const ms = (x: number): string => `${Math.round(x * 1000) / 1000} ms`

/** The quorum rule over one poll of `servers` servers, of which `samples` answered. */
export const judge = (
  servers: number,
  samples: ReadonlyArray<SntpSample>,
  toleranceMs: number,
  checkedAtMillis: number
): ClockState => {
  if (samples.length === 0) {
    return { _tag: "Untrusted", offsetMs: null, reason: `none of the ${servers} NTP server(s) answered`, checkedAtMillis }
  }
  const offsetMs = median(samples.map((s) => s.offsetMs))
  const halfRoundTripMs = median(samples.map((s) => s.roundTripMs)) / 2
  if (samples.length * 2 <= servers) {
    return {
      _tag: "Untrusted",
      offsetMs,
      reason: `${samples.length} of ${servers} NTP servers answered; more than half must`,
      checkedAtMillis
    }
  }
  const bound = Math.abs(offsetMs) + halfRoundTripMs
  if (bound > toleranceMs) {
    return {
      _tag: "Untrusted",
      offsetMs,
      reason: `|median offset| ${ms(Math.abs(offsetMs))} + half the round trip ${ms(halfRoundTripMs)} exceeds the tolerance ${ms(toleranceMs)}`,
      checkedAtMillis
    }
  }
  return { _tag: "Trusted", offsetMs, halfRoundTripMs, checkedAtMillis }
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000

/** The `clock` health check of a state (an unmonitored clock has none). */
export const clockCheck = (state: ClockState, toleranceMs: number, halfRoundTripMs: number | null): ClockCheck => {
  const checkedAt = state._tag === "Unmonitored" || state.checkedAtMillis === null ? null : formatMillis(state.checkedAtMillis)
  const offset = state._tag === "Unmonitored" ? null : state.offsetMs
  const base = {
    offset_ms: offset === null ? null : round3(offset),
    half_round_trip_ms: halfRoundTripMs === null ? null : round3(halfRoundTripMs),
    tolerance_ms: toleranceMs,
    checked_at: checkedAt
  }
  return state._tag === "Untrusted" ? { status: "degraded", ...base, reason: state.reason } : { status: "ok", ...base }
}

interface Verdict {
  readonly state: ClockState
  readonly halfRoundTripMs: number | null
  readonly failures: ReadonlyArray<SntpError>
}

/**
 * The monitor's parts: `poll` asks every server once and records the verdict; `run` polls
 * now and then every interval, forever; `discipline` is what the port serves.
 */
export const makeClockMonitor = (options: ClockMonitorOptions) =>
  Effect.gen(function*() {
    const timeout = options.queryTimeout ?? QUERY_TIMEOUT
    const verdict = yield* Ref.make<Verdict>({
      state: { _tag: "Untrusted", offsetMs: null, reason: NOT_YET_CHECKED, checkedAtMillis: null },
      halfRoundTripMs: null,
      failures: []
    })

    const ask = (server: NtpServer) =>
      query(server, timeout).pipe(
        Effect.catchAllDefect((d) => Effect.fail(new SntpError({ server: serverLabel(server), reason: d instanceof Error ? d.message : String(d) }))),
        Effect.either
      )

    const poll = Effect.gen(function*() {
      const answers = yield* Effect.forEach(options.servers, ask, { concurrency: "unbounded" })
      const samples = answers.flatMap((a) => (a._tag === "Right" ? [a.right] : []))
      const failures = answers.flatMap((a) => (a._tag === "Left" ? [a.left] : []))
      const now = yield* Clock.currentTimeMillis
      const state = judge(options.servers.length, samples, options.toleranceMs, now)
      const halfRoundTripMs = samples.length === 0 ? null : median(samples.map((s) => s.roundTripMs)) / 2
      const before = yield* Ref.getAndSet(verdict, { state, halfRoundTripMs, failures })
      yield* Metric.set(Metrics.clockTrusted, state._tag === "Trusted" ? 1 : 0)
      yield* Metric.set(Metrics.clockServersAnswered, samples.length)
      yield* Metric.set(Metrics.clockOffset, state._tag === "Unmonitored" || state.offsetMs === null ? Number.NaN : state.offsetMs / 1000)
      const unreachable = failures.map((f) => f.message).join("; ")
      if (state._tag === "Untrusted" && (before.state._tag !== "Untrusted" || before.state.reason !== state.reason)) {
        yield* Effect.logWarning(`clock not trusted, time-stamp tokens refused: ${state.reason}${unreachable === "" ? "" : ` (${unreachable})`}`)
      } else if (state._tag === "Trusted" && before.state._tag !== "Trusted") {
        yield* Effect.logInfo(
          `clock trusted: median offset ${ms(state.offsetMs)}, half round trip ${ms(state.halfRoundTripMs)}, ` +
            `${samples.length} of ${options.servers.length} NTP server(s) answered${unreachable === "" ? "" : ` (${unreachable})`}`
        )
      }
      return state
    })

    // A poll that dies (it should not: every server's failure is a value) still leaves a verdict.
    const guarded = poll.pipe(Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const reason = `the NTP poll failed: ${Cause.pretty(cause).split("\n")[0]}`
        yield* Ref.set(verdict, { state: { _tag: "Untrusted", offsetMs: null, reason, checkedAtMillis: now }, halfRoundTripMs: null, failures: [] })
        yield* Metric.set(Metrics.clockTrusted, 0)
        yield* Effect.logWarning(`clock not trusted, time-stamp tokens refused: ${reason}`)
      })
    ))
    const run = Effect.forever(Effect.zipRight(guarded, Effect.sleep(options.interval)))

    // A verdict is good for two intervals and a poll: one missed poll is tolerated, a stopped poller is not.
    const maxAgeMs = 2 * Duration.toMillis(options.interval) + Duration.toMillis(timeout)
    const current = Effect.gen(function*() {
      const v = yield* Ref.get(verdict)
      const now = yield* Clock.currentTimeMillis
      if (v.state._tag !== "Trusted" || now - v.state.checkedAtMillis <= maxAgeMs) return v
      const state: ClockState = {
        _tag: "Untrusted",
        offsetMs: v.state.offsetMs,
        reason: `the last NTP poll ended ${formatMillis(v.state.checkedAtMillis)}, more than two intervals ago`,
        checkedAtMillis: v.state.checkedAtMillis
      }
      return { ...v, state }
    })
    const discipline: ClockDiscipline["Type"] = {
      state: Effect.map(current, (v) => v.state),
      toleranceMs: options.toleranceMs
    }
    const check = Effect.map(current, (v) => clockCheck(v.state, options.toleranceMs, v.halfRoundTripMs))
    return { discipline, poll, run, check }
  })

/** ClockDiscipline from SNTP: the poller runs as long as the layer's scope, and registers the `clock` health check. */
export const ClockMonitorLive = (options: ClockMonitorOptions): Layer.Layer<ClockDiscipline, never, HealthChecks> =>
  Layer.scoped(
    ClockDiscipline,
    Effect.gen(function*() {
      const monitor = yield* makeClockMonitor(options)
      const health = yield* HealthChecks
      yield* health.register({ probe: { name: "clock", check: monitor.check } })
      yield* Effect.logInfo(`clock discipline: ${options.servers.map(serverLabel).join(", ")} every ${Duration.format(Duration.decode(options.interval))}`)
      yield* Effect.forkScoped(monitor.run)
      return monitor.discipline
    })
  )
