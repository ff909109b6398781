/** The T1 part of an attestation's evidence bundle: its sealed batch, Merkle proof and TSA token. */
import { Effect, Layer } from "effect"
import { SealedEvidence } from "../Attestations/Evidence.js"
import type { Attestation } from "../Attestations/Domain.js"
import { redactUrl } from "../Platform/RedactUrl.js"
import { SealingRepo } from "./Repo.js"

export const SealedEvidenceLive = Layer.effect(
  SealedEvidence,
  Effect.gen(function*() {
    const sealing = yield* SealingRepo
    return {
      t1: (a: Attestation) =>
        Effect.gen(function*() {
          if (a.batchId === null || a.leafIndex === null) return undefined
          const batch = yield* sealing.batchById(a.batchId)
          if (!batch) return undefined
          const proof = yield* sealing.proof(batch, a.leafIndex)
          return {
            batchId: batch.id,
            merkleRoot: batch.merkleRoot,
            merkleProof: proof,
            // batches sealed before providers were stored redacted may hold a query
            tsaProvider: redactUrl(batch.tsaProvider),
            tsaTimestamp: batch.tsaGenTime,
            tsaToken: Buffer.from(batch.tsaToken).toString("base64")
          }
        }).pipe(Effect.orDie)
    }
  })
).pipe(Layer.provide(SealingRepo.Default))
