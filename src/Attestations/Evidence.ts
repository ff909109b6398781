/**
 * Evidence bundles (spec 2.7): t0 from the attestation itself, t1 from its
 * sealed batch (camelCase inside, snake_case at the top).
 */
import { Effect } from "effect"
import { T0_ALGORITHM } from "../Domain/T0.js"
import { SealingRepo } from "../Sealing/Repo.js"
import { AnchorProofs } from "../Anchoring/Proofs.js"
import { OtsCalendar } from "../Platform/Calendar/OtsCalendar.js"
import { SigningKeys } from "../Platform/SigningKeys.js"
import { type Attestation, legacyOf } from "./Domain.js"

export const t0Evidence = (a: Attestation) => ({
  signature: a.signature,
  algorithm: T0_ALGORITHM,
  publicKeyId: a.signingKeyId,
  registeredAt: a.registeredAt,
  formatVersion: a.formatVersion
})

export class Evidence extends Effect.Service<Evidence>()("Attestations/Evidence", {
  effect: Effect.gen(function*() {
    const sealing = yield* SealingRepo
    const anchors = yield* AnchorProofs
    const calendar = yield* OtsCalendar
    const keys = yield* SigningKeys

    const t1Evidence = (a: Attestation) =>
      Effect.gen(function*() {
        if (a.batchId === null || a.leafIndex === null) return undefined
        const batch = yield* sealing.batchById(a.batchId)
        if (!batch) return undefined
        const proof = yield* sealing.proof(batch, a.leafIndex)
        return {
          batchId: batch.id,
          merkleRoot: batch.merkleRoot as never,
          merkleProof: proof.map((s) => ({ hash: s.hash as never, position: s.position })),
          tsaProvider: batch.tsaProvider,
          tsaTimestamp: batch.tsaGenTime,
          tsaToken: Buffer.from(batch.tsaToken).toString("base64")
        }
      })

    const bundle = (a: Attestation) =>
      Effect.gen(function*() {
        const t1 = yield* Effect.orDie(t1Evidence(a))
        const v = a.level === "T2" ? yield* anchors.view(a) : undefined
        const t2 = v && v.day.status === "confirmed" && v.calendarTimestamp
          ? {
            dailyRoot: v.day.root as never,
            t1ToT2Proof: v.t1ToT2Proof.map((s) => ({ hash: s.hash as never, position: s.position })),
            bitcoinBlockHeight: v.day.bitcoinHeight!,
            bitcoinBlockHash: null,
            bitcoinTxid: null,
            ...(v.day.bitcoinHeader !== null ? { bitcoinBlockHeader: v.day.bitcoinHeader } : {}),
            confirmedAt: v.day.confirmedAt!,
            otsProof: Buffer.from(anchors.otsFile(a, v)).toString("base64"),
            ...(calendar.simulated ? { simulated: true } : {})
          }
          : undefined
        // The key itself rides along so the bundle verifies offline; compare its kid with GET /v1/keys.
        const publicKey = yield* keys.byKid(a.signingKeyId)
        return {
          id: a.id,
          hash_hex: a.hashHex,
          level: a.level,
          t0: { ...t0Evidence(a), ...(publicKey ? { publicKey } : {}) },
          ...(t1 ? { t1 } : {}),
          ...(t2 ? { t2 } : {}),
          ...legacyOf(a)
        }
      })

    return {
      bundle,
      otsAvailable: (a: Attestation) =>
        a.level === "T0" ? Effect.succeed(false) : Effect.map(anchors.view(a), (v) => v?.calendarTimestamp !== undefined)
    }
  }),
  dependencies: [SealingRepo.Default, AnchorProofs.Default, SigningKeys.Default]
}) {}
