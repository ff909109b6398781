/** Resolves an attestation reference from a path (id, hash or legacy id) or fails with 404. */
import { Effect } from "effect"
import { type AttestationRef, parseAttestationRef } from "../Domain/AttestationId.js"
import { NotFound } from "../Domain/Errors.js"
import type { Attestation } from "./Domain.js"
import { PublicReads, type PublicReadServices } from "./PublicReads.js"
import { AttestationRepo } from "./Repo.js"

const notFound = (rawId: string) => new NotFound({ message: `attestation ${rawId.trim().slice(0, 80)} not found` })

const byRef = (ref: AttestationRef) => Effect.flatMap(AttestationRepo, (repo) => Effect.orDie(repo.findByRef(ref)))

export const findAttestation = (rawId: string) =>
  Effect.gen(function*() {
    const ref = parseAttestationRef(rawId)
    if (!ref) return yield* notFound(rawId)
    const found = yield* byRef(ref)
    if (!found) return yield* notFound(rawId)
    return found
  })

/**
 * A public read of the attestation `rawId` names and of what `then` reads about it, both on
 * one database: the read replica, or the primary when the replica does not hold it; or 404.
 */
export const findPublicAttestation = <A>(rawId: string, then: (a: Attestation) => Effect.Effect<A, never, PublicReadServices>) =>
  Effect.gen(function*() {
    const ref = parseAttestationRef(rawId)
    if (!ref) return yield* notFound(rawId)
    const reads = yield* PublicReads
    const found = yield* reads.find(ref, (ref) => Effect.flatMap(byRef(ref), (a) => (a ? then(a) : Effect.succeed(undefined))))
    if (found === undefined) return yield* notFound(rawId)
    return found
  })
