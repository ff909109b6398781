/** Resolves an attestation reference from a path (id, hash or legacy id) or fails with 404. */
import { Effect } from "effect"
import { parseAttestationRef } from "../Domain/AttestationId.js"
import { NotFound } from "../Domain/Errors.js"
import { AttestationRepo } from "./Repo.js"

export const findAttestation = (rawId: string) =>
  Effect.gen(function*() {
    const ref = parseAttestationRef(rawId)
    const notFound = new NotFound({ message: `attestation ${rawId.trim().slice(0, 80)} not found` })
    if (!ref) return yield* notFound
    const repo = yield* AttestationRepo
    const found = yield* Effect.orDie(repo.findByRef(ref))
    if (!found) return yield* notFound
    return found
  })
