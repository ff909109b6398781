/**
 * The T1 sealer: at every ATTESTD_SEAL_INTERVAL boundary, every attestation
 * still at T0 and registered before the boundary goes into one Merkle batch
 * whose root the TSA timestamps; batch, nodes, T1 state and outbox events are
 * written in one transaction, so a crash leaves no batch or a whole one. A lease
 * (Platform/Leases.ts) lets one instance seal at a time, and its fencing token refuses
 * the batch of an instance whose lease was taken over meanwhile. While the database is
 * out of reach the sealer pauses (Platform/Outage.ts) and seals again when it answers.
 */
import { Cause, Clock, Duration, Effect, Exit, Option } from "effect"
import { buildTree } from "./MerkleBuilder.js"
import { formatMillis } from "../Domain/Time.js"
import { type CheckResult, HealthChecks, reasonOf } from "../Platform/HealthChecks.js"
import { type Fence, leaseDuration, Leases } from "../Platform/Leases.js"
import { makeOutageLog } from "../Platform/Outage.js"
import { AppConfig } from "../Platform/Config.js"
import { TsaClient } from "../Platform/Tsa/TsaClient.js"
import * as Metrics from "../Platform/Metrics.js"
import { SealingRepo } from "./Repo.js"

const SEALER_LEASE = "sealer"
const MAX_SKIPPED_WINDOWS = 7

export type SealOutcome =
  | { readonly _tag: "Sealed"; readonly batchId: number; readonly leaves: number }
  | { readonly _tag: "Empty" }
  | { readonly _tag: "Busy" }

export class Sealer extends Effect.Service<Sealer>()("Sealing/Sealer", {
  effect: Effect.gen(function*() {
    const repo = yield* SealingRepo
    const tsa = yield* TsaClient
    const config = yield* AppConfig
    const health = yield* HealthChecks
    const leases = yield* Leases
    const outage = yield* makeOutageLog("sealing")
    const leaseMs = leaseDuration(config.sealInterval)
    let tsaStatus: CheckResult = "ok"
    let lastError: string | undefined

    // the worker's own record: failing past two windows makes health degraded
    const sealing = yield* health.worker("sealing", config.sealInterval)
    yield* health.register({
      probe: { name: "tsa", check: Effect.sync(() => tsaStatus) },
      features: ["t1_rfc3161", "merkle_v2"],
      tier: ["T1", { tsa_provider: tsa.provider, seal_interval_ms: Duration.toMillis(config.sealInterval), tree_version: 2 }],
      counts: Effect.orDie(repo.counts)
    })

    /** Seals everything at T0 registered before `windowEndMillis`; the batch is written through `fence`. */
    const sealWindow = (windowEndMillis: number, fence: Fence) =>
      Effect.gen(function*() {
        const started = performance.now()
        const windowEnd = formatMillis(windowEndMillis)
        const leaves = yield* Effect.orDie(repo.pending(windowEnd))
        if (leaves.length === 0) return { _tag: "Empty" } as SealOutcome
        const big = leaves.length >= 100_000
        if (big) yield* Effect.logInfo(`sealing window ${windowEnd}: ${leaves.length} attestations read; building the Merkle tree`)
        const hashes = leaves.map((l) => l.hashHex)
        const tree = buildTree(hashes)
        if (big) yield* Effect.logInfo(`sealing window ${windowEnd}: tree of ${leaves.length} leaves built; timestamping ${tree.rootHex}`)
        const stamp = yield* tsa.timestamp(tree.root).pipe(
          Effect.tapError((e) =>
            Effect.sync(() => {
              tsaStatus = "degraded"
              lastError = e.message
            })
          )
        )
        tsaStatus = "ok"
        lastError = undefined
        // Every leaf was registered before the window end, so a genTime far before it means a wrong TSA clock.
        if (stamp.genTime.getTime() + 60_000 < windowEndMillis) {
          yield* Effect.logWarning(
            `TSA ${stamp.provider} genTime ${stamp.genTime.toISOString()} is more than a minute before the window end ${windowEnd}; its clock may be wrong`
          )
        }
        const sealedAt = formatMillis(yield* Clock.currentTimeMillis)
        const batchId = yield* fence(repo.recordSeal({
          windowEnd,
          tree,
          leaves,
          tsaToken: stamp.token,
          tsaProvider: stamp.provider,
          tsaGenTime: stamp.genTime.toISOString(),
          sealedAt,
          t1At: formatMillis(stamp.genTime.getTime())
        }))
        Metrics.observe(Metrics.sealDuration, (performance.now() - started) / 1000)
        Metrics.observe(Metrics.sealBatchSize, leaves.length)
        yield* Effect.logInfo(`sealed batch ${batchId}: ${leaves.length} attestations, root ${tree.rootHex}`)
        return { _tag: "Sealed", batchId, leaves: leaves.length } as SealOutcome
      })

    /** Busy: another instance holds the lease, took it over, or the database is out of reach (paused). */
    const sealExclusively = (windowEndMillis: number) =>
      Effect.map(
        outage.attempt(leases.exclusively(SEALER_LEASE, leaseMs, (fence) => sealWindow(windowEndMillis, fence))),
        (outcome) => Option.getOrElse(Option.flatten(outcome), () => ({ _tag: "Busy" }) as SealOutcome)
      )

    /** Sleeps to each window boundary and seals; after k failures in a row it skips 2^(k-1)-1 windows. */
    const run = Effect.gen(function*() {
      const interval = Duration.toMillis(config.sealInterval)
      let failures = 0
      let skip = 0
      while (true) {
        const now = yield* Clock.currentTimeMillis
        const boundary = (Math.floor(now / interval) + 1) * interval
        yield* Effect.sleep(Duration.millis(boundary - now))
        if (skip > 0) {
          skip--
          continue
        }
        const exit = yield* Effect.exit(sealExclusively(boundary))
        if (Exit.isSuccess(exit)) {
          failures = 0
          // Busy: another instance seals this window; its outcome is not this one's to report
          if (exit.value._tag !== "Busy") yield* sealing.succeeded
        } else if (Cause.isFailType(exit.cause) || Option.isSome(Cause.failureOption(exit.cause))) {
          yield* sealing.failed(lastError ?? "the TSA failed")
          failures++
          skip = Math.min(2 ** (failures - 1) - 1, MAX_SKIPPED_WINDOWS)
          yield* Effect.logWarning(
            `sealing failed (${failures} in a row); attestations stay at T0, next attempt in ${skip + 1} window(s): ${lastError}`
          )
        } else if (!Cause.isInterruptedOnly(exit.cause)) {
          // A batch for this window written by another instance, or a database fault: logged, retried next window.
          yield* sealing.failed(`sealing aborted: ${reasonOf(exit.cause)}`)
          yield* Effect.logWarning("sealing aborted; retrying next window", exit.cause)
        } else {
          return yield* Effect.interrupt
        }
      }
    })

    return { sealWindow: sealExclusively, run, tsaStatus: () => tsaStatus }
  }),
  dependencies: [SealingRepo.Default, HealthChecks.Default, Leases.Default]
}) {}
