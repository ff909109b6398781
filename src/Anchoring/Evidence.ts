/** The T2 part of an attestation's evidence bundle: its confirmed daily root, Bitcoin block and .ots proof. */
import { Effect, Layer } from "effect"
import { AnchoredEvidence } from "../Attestations/Evidence.js"
import type { Attestation } from "../Attestations/Domain.js"
import { OtsCalendar } from "../Platform/Calendar/OtsCalendar.js"
import { AnchorProofs } from "./Proofs.js"

export const AnchoredEvidenceLive = Layer.effect(
  AnchoredEvidence,
  Effect.gen(function*() {
    const anchors = yield* AnchorProofs
    const calendar = yield* OtsCalendar
    return {
      t2: (a: Attestation) =>
        Effect.map(anchors.view(a), (v) =>
          v && v.day.status === "confirmed" && v.calendarTimestamp
            ? {
              dailyRoot: v.day.root,
              t1ToT2Proof: v.t1ToT2Proof,
              bitcoinBlockHeight: v.day.bitcoinHeight!,
              bitcoinBlockHash: null,
              bitcoinTxid: null,
              ...(v.day.bitcoinHeader !== null ? { bitcoinBlockHeader: v.day.bitcoinHeader } : {}),
              confirmedAt: v.day.confirmedAt!,
              otsProof: Buffer.from(anchors.otsFile(a, v)).toString("base64"),
              ...(calendar.simulated ? { simulated: true } : {})
            }
            : undefined),
      otsAvailable: (a: Attestation) => Effect.map(anchors.view(a), (v) => v?.calendarTimestamp !== undefined)
    }
  })
).pipe(Layer.provide(AnchorProofs.Default))
