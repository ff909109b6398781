/**
 * Per-attestation T2 proofs: the day's root and the batch-root-to-daily-root
 * path, and the standard `.ots` file whose file digest is the attestation's own
 * hash: leaf → batch root → daily root as OTS ops, then every calendar's ops.
 */
import { Effect } from "effect"
import type { Attestation } from "../Attestations/Domain.js"
import type { HashHex } from "../Domain/HashHex.js"
import { buildTree, type ProofStep } from "../Sealing/MerkleBuilder.js"
import {
  chain,
  hexToBytes,
  merge,
  merkleStepsToOps,
  parseTimestamp,
  serializeDetachedFile,
  type Timestamp
} from "../Domain/Ots.js"
import { SealingRepo } from "../Sealing/Repo.js"
import { AnchoringRepo, type DailyRoot, type Submission } from "./Repo.js"

export interface AnchorView {
  readonly day: DailyRoot
  readonly submissions: ReadonlyArray<Submission>
  readonly batchProof: ReadonlyArray<ProofStep<HashHex>>
  readonly t1ToT2Proof: ReadonlyArray<ProofStep<HashHex>>
  /** Every calendar's timestamp for the daily root, merged; undefined until one calendar answered. */
  readonly calendarTimestamp: Timestamp | undefined
}

export class AnchorProofs extends Effect.Service<AnchorProofs>()("Anchoring/AnchorProofs", {
  effect: Effect.gen(function*() {
    const anchoring = yield* AnchoringRepo
    const sealing = yield* SealingRepo

    /** The attestation's anchoring data, or undefined when its batch is not in a daily root yet. */
    const view = (a: Attestation) =>
      Effect.gen(function*() {
        if (a.batchId === null || a.leafIndex === null) return undefined
        const batch = yield* sealing.batchById(a.batchId)
        if (!batch || batch.dailyRootId === null || batch.dailyLeafIndex === null) return undefined
        const day = yield* anchoring.dailyRootById(batch.dailyRootId)
        if (!day) return undefined
        const submissions = yield* anchoring.submissions(day.id)
        const batchProof = yield* sealing.proof(batch, a.leafIndex)
        const t1ToT2Proof = buildTree(day.leaves).proof(batch.dailyLeafIndex)
        const digest = hexToBytes(day.root)
        const stamps = submissions.flatMap((s) => (s.timestamp ? [parseTimestamp(s.timestamp, digest)] : []))
        const calendarTimestamp = stamps.length === 0 ? undefined : stamps.reduce((x, y) => merge(x, y))
        return { day, submissions, batchProof, t1ToT2Proof, calendarTimestamp } as AnchorView
      }).pipe(Effect.orDie)

    /** The `.ots` file for the attestation (file digest = hash_hex). */
    const otsFile = (a: Attestation, v: AnchorView): Uint8Array =>
      serializeDetachedFile({
        fileHashOp: "sha256",
        digest: hexToBytes(a.hashHex),
        timestamp: chain([...merkleStepsToOps(v.batchProof), ...merkleStepsToOps(v.t1ToT2Proof)], v.calendarTimestamp!)
      })

    return { view, otsFile }
  }),
  dependencies: [AnchoringRepo.Default, SealingRepo.Default]
}) {}
