/**
 * What the service is doing, as Prometheus text (issue 14 §3). Counters and
 * histograms are Effect `Metric`s updated where the work happens; gauges that
 * describe the database (pending T0, T1 roots awaiting Bitcoin, webhook
 * backlog, TSA certificate expiry) are computed at scrape time, so every
 * instance on a shared Postgres reports the same backlog. Served on its own
 * listener (ATTESTD_METRICS_PORT) so a load balancer in front of the API never
 * exposes it.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Context, Effect, Layer, Metric, MetricBoundaries, MetricLabel, MetricState, Option, Runtime } from "effect"
import type * as MetricPair from "effect/MetricPair"
import { createHash } from "node:crypto"
import { createServer, type Server } from "node:http"
import { SERVICE_VERSION } from "../Domain/Version.js"
import { AppConfig } from "./Config.js"
import { HealthChecks } from "./HealthChecks.js"
import { Signer } from "./Signer.js"
import { redactUrl } from "./RedactUrl.js"
import { parseTimeStampToken } from "./Tsa/Rfc3161.js"

const seconds = (start: number, factor: number, count: number) =>
  MetricBoundaries.exponential({ start, factor, count })

// HTTP
export const httpRequests = Metric.counter("attestd_http_requests_total", {
  description: "HTTP requests answered, by method, route template and status."
})
export const httpDuration = Metric.histogram(
  "attestd_http_request_duration_seconds",
  seconds(0.0005, 2, 16),
  "Time from the request's arrival to the end of its response, by method, route template and status."
)
export const rateLimitRejections = Metric.counter("attestd_rate_limit_rejections_total", {
  description: "Requests refused with 429 (per-key, public or per-list rate limits and quotas), by route template."
})

// T0
export const attestationsCreated = Metric.counter("attestd_attestations_created_total", {
  description: "T0 attestations created (a re-attested hash is not counted again)."
})

// Public reads with ATTESTD_PG_READ_URL
export const replicaReads = Metric.counter("attestd_replica_reads_total", {
  description:
    "Public reads asked of the read replica, by outcome: replica (all found there), primary_miss (what it missed read again on the primary), primary_error (it failed or was skipped: read on the primary)."
})

// The RFC 3161 authority
export const timestampsAnswered = Metric.counter("attestd_timestamps_total", {
  description: "Answers of POST /v1/timestamp, by outcome: granted, or the failInfo of a rejection."
})

// T1
export const sealDuration = Metric.histogram(
  "attestd_seal_duration_seconds",
  seconds(0.005, 2, 16),
  "Time to seal one window: read pending, build the Merkle tree, timestamp, write."
)
export const sealBatchSize = Metric.histogram(
  "attestd_seal_batch_size",
  seconds(1, 4, 12),
  "Attestations per sealed batch."
)
export const tsaRequests = Metric.counter("attestd_tsa_requests_total", {
  description: "RFC 3161 timestamp requests, by TSA and outcome (ok, error)."
})
export const tsaDuration = Metric.histogram(
  "attestd_tsa_request_duration_seconds",
  seconds(0.005, 2, 14),
  "Time to obtain one RFC 3161 timestamp (all TSAs tried), by outcome."
)

// T2
export const calendarSubmissions = Metric.counter("attestd_calendar_submissions_total", {
  description: "Daily roots submitted to OpenTimestamps calendars, by calendar and outcome (ok, error)."
})
export const calendarUpgrades = Metric.counter("attestd_calendar_upgrades_total", {
  description: "OpenTimestamps upgrade requests, by calendar and outcome (upgraded, pending, error)."
})

// Webhooks
export const webhookDeliveries = Metric.counter("attestd_webhook_deliveries_total", {
  description: "Webhook delivery attempts, by outcome (succeeded, retrying, failed)."
})

// Clock discipline of the RFC 3161 authority (ATTESTD_NTP_SERVERS), set after each SNTP poll
export const clockOffset = Metric.gauge("attestd_clock_offset_seconds", {
  description: "Median offset (server − local) of the NTP servers that answered the last poll, seconds; NaN when none answered."
})
export const clockTrusted = Metric.gauge("attestd_clock_trusted", {
  description: "1 while the clock is trusted (POST /v1/timestamp grants tokens), 0 while it is not (timeNotAvailable)."
})
export const clockServersAnswered = Metric.gauge("attestd_clock_servers_answered", {
  description: "NTP servers that answered the last poll (more than half of ATTESTD_NTP_SERVERS must)."
})

// This process, read at scrape time: a rate() of either is how busy the instance is.
// An event loop busy ~100% of the time is saturated whatever the CPU total says (docs/performance.md).
// Both are totals since the process started, so they are rendered from the readings
// themselves rather than kept as Effect counters brought up to date by each scrape.
const processCounters = (): ReadonlyArray<Sample> => {
  const cpu = process.cpuUsage()
  return [
    {
      name: "attestd_event_loop_busy_seconds_total",
      type: "counter",
      help: "Time the main thread's event loop spent running code rather than waiting for I/O (performance.eventLoopUtilization).",
      value: performance.eventLoopUtilization().active / 1000
    },
    {
      name: "attestd_process_cpu_seconds_total",
      type: "counter",
      help: "CPU time of the whole process, user and system, every thread included (process.cpuUsage).",
      value: (cpu.user + cpu.system) / 1e6
    }
  ]
}

// Scrape-time gauges
const buildInfo = Metric.gauge("attestd_build_info", { description: "Always 1; labelled with the service version and Node.js version." })
const signingKeyInfo = Metric.gauge("attestd_signing_key_info", { description: "1 for the key id this instance signs new T0 attestations with." })
const pendingT0 = Metric.gauge("attestd_t0_pending", { description: "Attestations at T0 waiting for a seal." })
const pendingT0Age = Metric.gauge("attestd_t0_oldest_pending_age_seconds", { description: "Age of the oldest attestation still at T0 (0 when none)." })
const awaitingBitcoin = Metric.gauge("attestd_t1_roots_awaiting_bitcoin", {
  description: "Sealed batches (T1 roots) whose day is not yet confirmed in Bitcoin."
})
const awaitingBitcoinAge = Metric.gauge("attestd_t1_oldest_awaiting_bitcoin_age_seconds", {
  description: "Age of the oldest sealed batch not yet confirmed in Bitcoin (0 when none)."
})
const webhookBacklog = Metric.gauge("attestd_webhook_backlog", {
  description: "Webhook deliveries pending or waiting for a retry, plus events not yet fanned out."
})
const workerDegraded = Metric.gauge("attestd_worker_degraded", {
  description: "1 while a background worker (sealing, anchoring, upgrading) has failed for longer than two of its windows (GET /v1/healthz says degraded), else 0."
})
const tsaCertExpiry = Metric.gauge("attestd_tsa_certificate_expiry_days", {
  description: "Days until the earliest-expiring certificate in the latest token from each TSA expires."
})

const labels = (tags: Record<string, string>): ReadonlyArray<MetricLabel.MetricLabel> =>
  Object.entries(tags).map(([k, v]) => MetricLabel.make(k, v))

/** Records one timed effect into a histogram and counter labelled with its outcome. */
export const timed = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  record: (outcome: "ok" | "error", seconds: number, value: A | undefined) => void
) =>
  Effect.gen(function*() {
    const start = performance.now()
    const exit = yield* Effect.exit(effect)
    const elapsed = (performance.now() - start) / 1000
    record(exit._tag === "Success" ? "ok" : "error", elapsed, exit._tag === "Success" ? exit.value : undefined)
    return yield* exit
  })

/** Unsafe (synchronous) updates for code outside Effect: the HTTP observer. */
/** The labels of an HTTP request's series: a caller recording many requests keeps them per (method, route, status). */
export interface HttpLabels {
  readonly request: ReadonlyArray<MetricLabel.MetricLabel>
  readonly rejected: ReadonlyArray<MetricLabel.MetricLabel> | undefined
}

export const httpLabels = (method: string, route: string, status: number): HttpLabels => ({
  request: labels({ method, route, status: String(status) }),
  rejected: status === 429 ? labels({ route }) : undefined
})

/**
 * One request into the HTTP series, with labels made before: Effect's registry keeps a
 * metric's entry per label array, so the same array again skips hashing a new key.
 */
export const recordHttpLabelled = (tags: HttpLabels, elapsedSeconds: number) => {
  httpRequests.unsafeUpdate(1, tags.request)
  httpDuration.unsafeUpdate(elapsedSeconds, tags.request)
  if (tags.rejected !== undefined) rateLimitRejections.unsafeUpdate(1, tags.rejected)
}

export const inc = (counter: typeof httpRequests, tags: Record<string, string>, by = 1) => counter.unsafeUpdate(by, labels(tags))
export const observe = (histogram: typeof httpDuration, value: number, tags: Record<string, string> = {}) =>
  histogram.unsafeUpdate(value, labels(tags))

const ageSeconds = (now: number, iso: unknown): number => {
  if (typeof iso !== "string") return 0
  const t = Date.parse(iso)
  return Number.isFinite(t) ? Math.max(0, (now - t) / 1000) : 0
}

/** Per TSA provider: its latest token's SHA-256 and the earliest notAfter (epoch ms) of that token's certificates. */
export type TokenExpiries = Map<string, { readonly digest: string; readonly notAfter: number }>

/**
 * Updates the scrape-time gauges from the database and this instance's signer.
 * `expiries` remembers each TSA's parsed certificate expiry between scrapes.
 */
export const refreshGauges = (expiries: TokenExpiries) => Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const signer = yield* Signer
  const now = yield* Clock.currentTimeMillis
  for (const w of yield* Effect.flatMap(HealthChecks, (h) => h.workerStates)) {
    workerDegraded.unsafeUpdate(w.degraded ? 1 : 0, labels({ worker: w.name }))
  }
  buildInfo.unsafeUpdate(1, labels({ version: SERVICE_VERSION, node: process.version }))
  signingKeyInfo.unsafeUpdate(1, labels({ kid: yield* signer.currentKid }))

  const [t0] = yield* sql<{ n: number | string; oldest: string | null }>`
    SELECT count(*) AS n, min(registered_at) AS oldest FROM pending_seals`
  pendingT0.unsafeUpdate(Number(t0?.n ?? 0), [])
  pendingT0Age.unsafeUpdate(ageSeconds(now, t0?.oldest), [])

  const [t1] = yield* sql<{ n: number | string; oldest: string | null }>`
    SELECT count(*) AS n, min(b.sealed_at) AS oldest FROM batches b
    LEFT JOIN daily_roots d ON d.id = b.daily_root_id
    WHERE d.id IS NULL OR d.status <> 'confirmed'`
  awaitingBitcoin.unsafeUpdate(Number(t1?.n ?? 0), [])
  awaitingBitcoinAge.unsafeUpdate(ageSeconds(now, t1?.oldest), [])

  const [wh] = yield* sql<{ n: number | string }>`
    SELECT (SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'retrying'))
      + (SELECT count(*) FROM outbox WHERE dispatched_at IS NULL) AS n`
  webhookBacklog.unsafeUpdate(Number(wh?.n ?? 0), [])

  const latest = yield* sql<{ tsa_provider: string; tsa_token: Uint8Array }>`
    SELECT b.tsa_provider, b.tsa_token FROM batches b
    WHERE b.id IN (SELECT max(id) FROM batches GROUP BY tsa_provider)`
  for (const row of latest) {
    // By the token's digest, not the batch id: two instances in one process (tests) can
    // hold different tokens under the same provider and id.
    const digest = createHash("sha256").update(row.tsa_token).digest("hex")
    let cached = expiries.get(row.tsa_provider)
    if (cached?.digest !== digest) {
      try {
        const details = parseTimeStampToken(new Uint8Array(row.tsa_token))
        const notAfter = Math.min(...details.certificates.map((c) => Date.parse(c.not_after)))
        if (!Number.isFinite(notAfter)) continue
        cached = { digest, notAfter }
        expiries.set(row.tsa_provider, cached)
      } catch {
        continue
      }
    }
    tsaCertExpiry.unsafeUpdate((cached.notAfter - now) / 86_400_000, labels({ tsa: redactUrl(row.tsa_provider) }))
  }
})

const escapeLabel = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, "\\\"")
const escapeHelp = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")
const formatLabels = (tags: ReadonlyArray<MetricLabel.MetricLabel>, extra?: readonly [string, string]) => {
  const all = tags.map((t) => [t.key, t.value] as const).concat(extra ? [extra] : [])
  return all.length === 0 ? "" : "{" + all.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",") + "}"
}
const num = (n: number) => (n === Infinity ? "+Inf" : n === -Infinity ? "-Inf" : Number.isNaN(n) ? "NaN" : String(n))

/** A value read at scrape time and rendered beside the registry's metrics. */
export interface Sample {
  readonly name: string
  readonly type: "counter" | "gauge"
  readonly help: string
  readonly value: number
}

/** The Prometheus text exposition (version 0.0.4) of every `attestd_` metric in the registry, and of `samples`. */
export const renderPrometheus = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>, samples: ReadonlyArray<Sample>): string => {
  const families = new Map<string, { type: string; help: string; lines: Array<string> }>()
  const family = (name: string, type: string, help: string) => {
    let f = families.get(name)
    if (!f) families.set(name, f = { type, help, lines: [] })
    return f
  }
  for (const pair of pairs) {
    const key = pair.metricKey
    if (!key.name.startsWith("attestd_")) continue
    const help = Option.getOrElse(key.description, () => key.name)
    const state = pair.metricState
    if (MetricState.isCounterState(state)) {
      family(key.name, "counter", help).lines.push(`${key.name}${formatLabels(key.tags)} ${num(Number(state.count))}`)
    } else if (MetricState.isGaugeState(state)) {
      family(key.name, "gauge", help).lines.push(`${key.name}${formatLabels(key.tags)} ${num(Number(state.value))}`)
    } else if (MetricState.isHistogramState(state)) {
      const f = family(key.name, "histogram", help)
      let sawInf = false
      for (const [le, count] of state.buckets) {
        if (le === Infinity) sawInf = true
        f.lines.push(`${key.name}_bucket${formatLabels(key.tags, ["le", num(le)])} ${count}`)
      }
      if (!sawInf) f.lines.push(`${key.name}_bucket${formatLabels(key.tags, ["le", "+Inf"])} ${state.count}`)
      f.lines.push(`${key.name}_sum${formatLabels(key.tags)} ${num(state.sum)}`)
      f.lines.push(`${key.name}_count${formatLabels(key.tags)} ${state.count}`)
    }
  }
  for (const sample of samples) family(sample.name, sample.type, sample.help).lines.push(`${sample.name} ${num(sample.value)}`)
  const out: Array<string> = []
  for (const [name, f] of [...families].sort(([a], [b]) => a.localeCompare(b))) {
    out.push(`# HELP ${name} ${escapeHelp(f.help)}`, `# TYPE ${name} ${f.type}`, ...f.lines.sort())
  }
  return out.join("\n") + "\n"
}

/** One scrape: refresh the database gauges, then render the registry and this process's counters. */
export const scrape = (expiries: TokenExpiries) => Effect.gen(function*() {
  yield* refreshGauges(expiries).pipe(Effect.catchAllCause((cause) => Effect.logWarning("metrics: database gauges unavailable", cause)))
  return renderPrometheus(yield* Metric.snapshot, processCounters())
})

/** The port the metrics listener bound, if any (tests start it on port 0). */
export class MetricsListener extends Context.Tag("Platform/MetricsListener")<MetricsListener, { readonly port: Option.Option<number> }>() {}

/** The metrics listener on ATTESTD_METRICS_PORT (bound to HOST); nothing when the port is unset. */
export const MetricsServerLive = Layer.scoped(MetricsListener, Effect.gen(function*() {
  const config = yield* AppConfig
  if (Option.isNone(config.metricsPort)) return { port: Option.none<number>() }
  const runtime = yield* Effect.runtime<SqlClient.SqlClient | Signer | HealthChecks>()
  const run = Runtime.runPromise(runtime)
  const expiries: TokenExpiries = new Map()
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]
    if (req.method !== "GET" || path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found; try GET /metrics\n")
      return
    }
    run(scrape(expiries)).then(
      (text) => res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }).end(text),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("scrape failed\n")
    )
  })
  yield* Effect.async<void, Error>((resume) => {
    server.once("error", (e) => resume(Effect.fail(e)))
    server.listen(config.metricsPort.pipe(Option.getOrElse(() => 0)), config.host, () => resume(Effect.void))
  }).pipe(Effect.orDie)
  const address = server.address()
  if (address && typeof address === "object") {
    yield* Effect.logInfo(`metrics on http://${address.address}:${address.port}/metrics`)
  }
  yield* Effect.addFinalizer(() => Effect.async<void>((resume) => {
    server.close(() => resume(Effect.void))
    server.closeAllConnections()
  }))
  return { port: Option.some(address && typeof address === "object" ? address.port : 0) }
}))

/** Counts and times a TSA client's requests, by the TSA that answered (or each that failed). */
export const meteredTsa = <S extends { readonly timestamp: (d: Uint8Array) => Effect.Effect<{ readonly provider: string }, { readonly attempts: ReadonlyArray<{ readonly url: string }> }> }>(
  tsa: S
): S => ({
  ...tsa,
  timestamp: (digest: Uint8Array) =>
    timed(tsa.timestamp(digest).pipe(
      Effect.tapBoth({
        onSuccess: (stamp) => Effect.sync(() => inc(tsaRequests, { tsa: redactUrl(stamp.provider), outcome: "ok" })),
        onFailure: (e) => Effect.sync(() => e.attempts.forEach((a) => inc(tsaRequests, { tsa: redactUrl(a.url), outcome: "error" })))
      })
    ), (outcome, s) => observe(tsaDuration, s, { outcome }))
})

/** Counts a calendar client's submissions and upgrades, by calendar and outcome. */
export const meteredCalendar = <S extends {
  readonly submit: (url: string, digest: Uint8Array) => Effect.Effect<Uint8Array, unknown>
  readonly upgrade: (url: string, commitment: Uint8Array) => Effect.Effect<Uint8Array | null, unknown>
}>(calendar: S): S => ({
  ...calendar,
  submit: (url: string, digest: Uint8Array) =>
    calendar.submit(url, digest).pipe(Effect.tapBoth({
      onSuccess: () => Effect.sync(() => inc(calendarSubmissions, { calendar: redactUrl(url), outcome: "ok" })),
      onFailure: () => Effect.sync(() => inc(calendarSubmissions, { calendar: redactUrl(url), outcome: "error" }))
    })),
  upgrade: (url: string, commitment: Uint8Array) =>
    calendar.upgrade(url, commitment).pipe(Effect.tapBoth({
      onSuccess: (r) => Effect.sync(() => inc(calendarUpgrades, { calendar: redactUrl(url), outcome: r === null ? "pending" : "upgraded" })),
      onFailure: () => Effect.sync(() => inc(calendarUpgrades, { calendar: redactUrl(url), outcome: "error" }))
    }))
})
