/**
 * The T2 anchorer and OTS upgrader. At each ATTESTD_ANCHOR_INTERVAL boundary
 * (UTC-day aligned by default) the unanchored batch roots form a daily Merkle
 * v2 tree whose root is submitted to every calendar; a day counts as submitted
 * when at least one calendar answered, and failed calendars are retried. Every
 * ATTESTD_OTS_UPGRADE_INTERVAL the pending timestamps are upgraded; the first
 * Bitcoin attestation moves the day to T2 once the block's header, fetched from
 * the Bitcoin header sources (all agreeing), has that attestation's message as
 * merkle root and meets its own nBits target; otherwise the day stays below T2,
 * the `bitcoin` health check says why, and the next pass retries. Calendars are
 * asked concurrently with bounded timeouts, so one dead calendar stalls no other.
 * Each job holds a lease (Platform/Leases.ts) and writes through its fence, so one
 * instance anchors a day and a job whose lease was taken over writes nothing; while
 * the database is out of reach both pause (Platform/Outage.ts).
 */
import { Clock, Duration, Effect, Option } from "effect"
import { buildTree } from "../Sealing/MerkleBuilder.js"
import {
  bitcoinAttestations,
  bytesToHex,
  graft,
  hexToBytes,
  isComplete,
  parseTimestamp,
  pendingAttestations,
  serializeTimestamp,
  type Timestamp
} from "../Domain/Ots.js"
import { formatMillis } from "../Domain/Time.js"
import { headerBytes, meetsTarget, parseHeader } from "../Domain/BitcoinHeader.js"
import { BitcoinHeaderSources } from "../Platform/Bitcoin/HeaderSources.js"
import { HealthChecks, reasonOf, type CheckResult, type WorkerHealth } from "../Platform/HealthChecks.js"
import { OtsCalendar } from "../Platform/Calendar/OtsCalendar.js"
import { SIMULATED_CALENDAR_LABEL } from "../Platform/Calendar/SimulatedCalendar.js"
import { AppConfig } from "../Platform/Config.js"
import { type Fence, leaseDuration, Leases } from "../Platform/Leases.js"
import { makeOutageLog } from "../Platform/Outage.js"
import { redactUrl, redactUrls } from "../Platform/RedactUrl.js"
import { AnchoringRepo, type DailyRoot, type Submission } from "./Repo.js"

const ANCHOR_LEASE = "anchorer"
const UPGRADE_LEASE = "ots-upgrader"

export type AnchorOutcome =
  | { readonly _tag: "Anchored"; readonly dailyRootId: number; readonly batches: number; readonly submitted: number }
  | { readonly _tag: "Empty" }
  | { readonly _tag: "Busy" }

export class Anchorer extends Effect.Service<Anchorer>()("Anchoring/Anchorer", {
  effect: Effect.gen(function*() {
    const repo = yield* AnchoringRepo
    const calendar = yield* OtsCalendar
    const config = yield* AppConfig
    const health = yield* HealthChecks
    const headerSources = yield* BitcoinHeaderSources
    const leases = yield* Leases
    const anchorOutage = yield* makeOutageLog("anchoring")
    const upgradeOutage = yield* makeOutageLog("OTS upgrading")
    let calendarStatus: CheckResult = "ok"
    let bitcoinStatus: CheckResult = "ok"
    /** Shown under tiers.T2.bitcoin (healthz and info): the sources and the last header problem. */
    const bitcoinDetail: { sources: ReadonlyArray<string>; simulated: boolean; last_error: string | null } = {
      sources: headerSources.sources,
      simulated: headerSources.simulated,
      last_error: null
    }

    yield* health.register({
      probe: { name: "calendars", check: Effect.sync(() => calendarStatus) },
    })
    // the workers' own records: failing past two of their windows makes health degraded
    const anchoring = yield* health.worker("anchoring", config.anchorInterval)
    const upgrading = yield* health.worker("upgrading", config.otsUpgradeInterval)
    yield* health.register({
      probe: { name: "bitcoin", check: Effect.sync(() => bitcoinStatus) },
      features: ["t2_opentimestamps", ...(calendar.simulated ? ["t2_simulated_calendar"] : [])],
      tier: ["T2", {
        calendars: redactUrls(calendar.urls),
        simulated: calendar.simulated,
        ...(calendar.simulated ? { note: SIMULATED_CALENDAR_LABEL } : {}),
        anchor_interval_ms: Duration.toMillis(config.anchorInterval),
        upgrade_interval_ms: Duration.toMillis(config.otsUpgradeInterval),
        bitcoin: bitcoinDetail
      }],
      counts: Effect.orDie(repo.counts)
    })

    const now = Effect.map(Clock.currentTimeMillis, formatMillis)

    /** Submits the daily root to every calendar that has not answered yet, concurrently. */
    const submitPending = (day: DailyRoot, subs: ReadonlyArray<Submission>, fence: Fence) =>
      Effect.forEach(
        subs.filter((s) => s.status === "unsubmitted"),
        (s) =>
          calendar.submit(s.calendarUrl, hexToBytes(day.root)).pipe(
            Effect.flatMap((ts) => Effect.flatMap(now, (at) => fence(repo.recordSubmitted(day.id, s.calendarUrl, ts, at)))),
            Effect.as(true),
            Effect.catchTag("CalendarError", (e) =>
              Effect.zipRight(
                Effect.logWarning(`calendar ${redactUrl(s.calendarUrl)} refused daily root ${day.id}: ${e.message}`),
                Effect.as(Effect.flatMap(now, (at) => fence(repo.recordFailure(day.id, s.calendarUrl, e.message, at))), false)
              ))
          ),
        { concurrency: "unbounded" }
      )

    /** Builds and records the day's root over every unanchored batch sealed before the boundary. */
    const anchorWindow = (windowEndMillis: number, fence: Fence) =>
      Effect.gen(function*() {
        const windowEnd = formatMillis(windowEndMillis)
        const batches = yield* Effect.orDie(repo.unanchoredBatches(windowEnd))
        if (batches.length === 0) return { _tag: "Empty" } as AnchorOutcome
        const tree = buildTree(batches.map((b) => b.merkleRoot))
        const dailyRootId = yield* fence(repo.createDailyRoot({
          windowEnd,
          tree,
          batches,
          calendars: calendar.urls,
          now: yield* now
        }))
        const day = (yield* Effect.orDie(repo.dailyRootById(dailyRootId)))!
        const results = yield* submitPending(day, yield* Effect.orDie(repo.submissions(dailyRootId)), fence)
        const submitted = results.filter((r) => r).length
        calendarStatus = submitted > 0 ? "ok" : "degraded"
        yield* (submitted > 0 ? anchoring.succeeded : anchoring.failed(`no calendar accepted daily root ${dailyRootId}`))
        yield* Effect.logInfo(
          `daily root ${dailyRootId} over ${batches.length} batch(es): ${tree.rootHex}; ${submitted}/${results.length} calendar(s) answered`
        )
        return { _tag: "Anchored", dailyRootId, batches: batches.length, submitted } as AnchorOutcome
      })

    /** Asks a calendar for the upgrade of each pending attestation of one submission; returns the new timestamp. */
    const upgradeSubmission = (day: DailyRoot, s: Submission) =>
      Effect.gen(function*() {
        const digest = hexToBytes(day.root)
        let ts: Timestamp = parseTimestamp(s.timestamp!, digest)
        let changed = false
        for (const p of pendingAttestations(ts, digest)) {
          const reply = yield* calendar.upgrade(s.calendarUrl, p.commitment)
          if (reply === null) continue
          ts = graft(ts, digest, p.commitment, parseTimestamp(reply, p.commitment))
          changed = true
        }
        return { ts, changed }
      })

    /** The anchoring block's header from the sources, checked against the attestation; a string says why not. */
    const checkedHeader = (anchor: { readonly height: number; readonly merkleRoot: string }) =>
      headerSources.header(anchor.height).pipe(
        Effect.map(({ header }) => {
          const h = parseHeader(header)
          if (h.merkleRoot !== anchor.merkleRoot) {
            return `block ${anchor.height}: header merkle root ${h.merkleRoot} is not the attested message ${anchor.merkleRoot}`
          }
          if (!meetsTarget(headerBytes(header))) return `block ${anchor.height}: header does not meet its nBits target`
          return { header: header.toLowerCase() }
        }),
        Effect.catchAll((e) => Effect.succeed(e.message))
      )

    /** One upgrade pass over every open day: retries failed submissions, upgrades pending ones, confirms. */
    const upgradeOnce = (fence: Fence) => Effect.gen(function*() {
      const open = yield* Effect.orDie(repo.openRoots)
      let confirmed = 0
      let degraded = false
      let unheld = 0
      let upgradeFailures = 0
      let headerProblem: string | null = null
      for (const day of open) {
        const subs = yield* Effect.orDie(repo.submissions(day.id))
        if (subs.some((s) => s.status === "unsubmitted")) yield* submitPending(day, subs, fence)
        const pending = (yield* Effect.orDie(repo.submissions(day.id))).filter((s) => s.timestamp !== null)
        if (pending.length === 0) {
          degraded = true // no calendar holds this day yet
          unheld++
        }
        const upgrades = yield* Effect.forEach(
          pending,
          (s) =>
            upgradeSubmission(day, s).pipe(
              Effect.map((r) => ({ s, ...r })),
              Effect.catchAll((e) =>
                Effect.as(Effect.logWarning(`upgrade from ${redactUrl(s.calendarUrl)} failed: ${e.message}`), undefined)
              )
            ),
          { concurrency: "unbounded" }
        )
        const at = yield* now
        let anchor: { height: number; merkleRoot: string } | undefined
        for (const u of upgrades) {
          if (!u) continue
          const complete = isComplete(u.ts)
          if (u.changed) yield* fence(repo.recordUpgrade(day.id, u.s.calendarUrl, serializeTimestamp(u.ts), complete, at))
          const [btc] = bitcoinAttestations(u.ts, hexToBytes(day.root))
          if (btc && (!anchor || btc.height < anchor.height)) anchor = { height: btc.height, merkleRoot: bytesToHex(btc.commitment) }
        }
        if (upgrades.some((u) => u === undefined)) {
          degraded = true
          upgradeFailures++
        }
        if (anchor) {
          const checked = yield* checkedHeader(anchor)
          if (typeof checked === "string") {
            headerProblem = checked
            yield* Effect.logWarning(`daily root ${day.id} stays below T2: ${checked}`)
            continue
          }
          yield* fence(repo.confirm(day.id, { ...anchor, header: checked.header, at }))
          confirmed++
          yield* Effect.logInfo(`daily root ${day.id} confirmed in Bitcoin block ${anchor.height}${calendar.simulated ? " (simulated)" : ""}`)
        }
      }
      if (open.length > 0) calendarStatus = degraded ? "degraded" : "ok"
      if (open.length > 0) {
        yield* (unheld > 0 ? anchoring.failed(`no calendar holds ${unheld} daily root(s)`) : anchoring.succeeded)
      }
      const upgradeProblem = upgradeFailures > 0
        ? `calendar upgrades failed for ${upgradeFailures} daily root(s)`
        : headerProblem !== null
        ? `Bitcoin header check: ${headerProblem}`
        : undefined
      yield* (upgradeProblem !== undefined ? upgrading.failed(upgradeProblem) : upgrading.succeeded)
      if (open.length > 0 || headerProblem !== null) {
        bitcoinStatus = headerProblem === null ? "ok" : "degraded"
        bitcoinDetail.last_error = headerProblem
      }
      return { open: open.length, confirmed }
    })

    /** Busy: another instance holds the lease, took it over, or the database is out of reach (paused). */
    const anchorExclusively = (windowEndMillis: number) =>
      Effect.map(
        anchorOutage.attempt(leases.exclusively(ANCHOR_LEASE, leaseDuration(config.anchorInterval), (fence) => anchorWindow(windowEndMillis, fence))),
        (outcome) => Option.getOrElse(Option.flatten(outcome), () => ({ _tag: "Busy" }) as AnchorOutcome)
      )

    const upgradeExclusively = Effect.map(
      upgradeOutage.attempt(leases.exclusively(UPGRADE_LEASE, leaseDuration(config.otsUpgradeInterval), upgradeOnce)),
      (outcome) => Option.getOrElse(Option.flatten(outcome), () => ({ open: 0, confirmed: 0 }))
    )

    const logged = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, worker: WorkerHealth) =>
      Effect.catchAllCause(effect, (cause) =>
        Effect.zipRight(
          worker.failed(`${what} failed: ${reasonOf(cause)}`),
          Effect.logWarning(`${what} failed; retrying next time`, cause)
        ))

    const anchorLoop = Effect.gen(function*() {
      const interval = Duration.toMillis(config.anchorInterval)
      while (true) {
        const t = yield* Clock.currentTimeMillis
        const boundary = (Math.floor(t / interval) + 1) * interval
        yield* Effect.sleep(Duration.millis(boundary - t))
        yield* logged("anchoring", anchorExclusively(boundary), anchoring)
      }
    })

    const upgradeLoop = Effect.gen(function*() {
      while (true) {
        yield* Effect.sleep(config.otsUpgradeInterval)
        yield* logged("OTS upgrade", upgradeExclusively, upgrading)
      }
    })

    return {
      anchorWindow: anchorExclusively,
      upgradeOnce: upgradeExclusively,
      run: Effect.all([anchorLoop, upgradeLoop], { concurrency: 2, discard: true }),
      calendarStatus: () => calendarStatus
    }
  }),
  dependencies: [AnchoringRepo.Default, HealthChecks.Default, Leases.Default]
}) {}
