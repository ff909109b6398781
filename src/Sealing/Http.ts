/** Handlers of the T1 proof endpoints. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { findAttestation } from "../Attestations/Find.js"
import type { Attestation } from "../Attestations/Domain.js"
import { NotFound } from "../Domain/Errors.js"
import { parseTimeStampToken } from "../Platform/Tsa/Rfc3161.js"
import { redactUrl } from "../Platform/RedactUrl.js"
import { SealingRepo } from "./Repo.js"

/** The attestation's batch, or 404 while it is still at T0. */
export const sealedBatch = (a: Attestation) =>
  Effect.gen(function*() {
    const repo = yield* SealingRepo
    const batch = a.batchId === null ? undefined : yield* Effect.orDie(repo.batchById(a.batchId))
    if (!batch || a.leafIndex === null) {
      return yield* new NotFound({ message: `attestation ${a.id} is not sealed yet (level ${a.level})`, details: { level: a.level } })
    }
    return { batch, leafIndex: a.leafIndex }
  })

export const ProofsLive = HttpApiBuilder.group(Api, "proofs", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* SealingRepo
    return handlers
      .handle("tsa", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const { batch } = yield* sealedBatch(a)
          return {
            id: a.id,
            batch_id: batch.id,
            merkle_root: batch.merkleRoot,
            tsa_provider: redactUrl(batch.tsaProvider),
            tsa_timestamp: batch.tsaGenTime,
            tsa_token: Buffer.from(batch.tsaToken).toString("base64")
          }
        }))
      .handle("tsaDetails", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const { batch } = yield* sealedBatch(a)
          return parseTimeStampToken(batch.tsaToken)
        }))
      .handle("merkle", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const { batch, leafIndex } = yield* sealedBatch(a)
          const proof = yield* Effect.orDie(repo.proof(batch, leafIndex))
          return {
            id: a.id,
            batch_id: batch.id,
            leaf: a.hashHex,
            merkle_root: batch.merkleRoot,
            merkle_proof: proof,
            tree_version: 2 as const
          }
        }))
  }))
