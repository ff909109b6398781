/**
 * Evidence bundles (spec 2.7): the T0 part from the attestation itself; the T1
 * and T2 parts come from the sealing and anchoring stores once those tiers exist.
 */
import { Effect } from "effect"
import { T0_ALGORITHM } from "../Domain/T0.js"
import type { Attestation } from "./Domain.js"

export const t0Evidence = (a: Attestation) => ({
  signature: a.signature,
  algorithm: T0_ALGORITHM,
  publicKeyId: a.signingKeyId,
  registeredAt: a.registeredAt,
  formatVersion: a.formatVersion
})

export class Evidence extends Effect.Service<Evidence>()("Attestations/Evidence", {
  succeed: {
    bundle: (a: Attestation) =>
      Effect.succeed({
        id: a.id,
        hash_hex: a.hashHex as never,
        level: a.level,
        t0: t0Evidence(a)
      }),
    otsAvailable: (_a: Attestation) => Effect.succeed(false)
  }
}) {}
