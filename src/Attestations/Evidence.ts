/**
 * Evidence bundles (spec 2.7): t0 from the attestation itself, t1 from its
 * sealed batch, t2 from its anchored day (camelCase inside, snake_case at the top).
 * Sealing and Anchoring build on Attestations, so they plug their tiers in
 * here (SealedEvidence, AnchoredEvidence) instead of being imported.
 */
import { Context, Effect } from "effect"
import { T0_ALGORITHM } from "../Domain/T0.js"
import { SigningKeys } from "../Platform/SigningKeys.js"
import type { EvidenceT1, EvidenceT2 } from "./Api.js"
import { type Attestation, legacyOf } from "./Domain.js"

export const t0Evidence = (a: Attestation) => ({
  signature: a.signature,
  algorithm: T0_ALGORITHM,
  publicKeyId: a.signingKeyId,
  registeredAt: a.registeredAt,
  formatVersion: a.formatVersion
})

/** An attestation's T1 evidence (its batch, Merkle proof and TSA token), once sealed. */
export class SealedEvidence extends Context.Tag("Attestations/SealedEvidence")<SealedEvidence, {
  readonly t1: (a: Attestation) => Effect.Effect<typeof EvidenceT1.Type | undefined>
}>() {}

/** An attestation's T2 evidence (its daily root, Bitcoin block and .ots proof), once confirmed. */
export class AnchoredEvidence extends Context.Tag("Attestations/AnchoredEvidence")<AnchoredEvidence, {
  readonly t2: (a: Attestation) => Effect.Effect<typeof EvidenceT2.Type | undefined>
  /** whether a calendar has answered for the attestation's daily root (an .ots file can be served) */
  readonly otsAvailable: (a: Attestation) => Effect.Effect<boolean>
}>() {}

export class Evidence extends Effect.Service<Evidence>()("Attestations/Evidence", {
  effect: Effect.gen(function*() {
    const sealed = yield* SealedEvidence
    const anchored = yield* AnchoredEvidence
    const keys = yield* SigningKeys

    const bundle = (a: Attestation) =>
      Effect.gen(function*() {
        const t1 = yield* sealed.t1(a)
        const t2 = a.level === "T2" ? yield* anchored.t2(a) : undefined
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
      otsAvailable: (a: Attestation) => (a.level === "T0" ? Effect.succeed(false) : anchored.otsAvailable(a))
    }
  }),
  dependencies: [SigningKeys.Default]
}) {}
