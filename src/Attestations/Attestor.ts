/**
 * Creating attestations (T0): sign, insert-or-get by hash, and give the caller's
 * key its own claim. Concurrent requests are group-committed (Batcher) in one atomic
 * write (AttestationRepo.register), made only when the group has something to write (a
 * re-attest of what the keys hold is answered from two reads); a unique hash constraint
 * plus insert-or-get makes re-attesting idempotent even when many requests for one new
 * hash race, here or on another instance. A registration without a key (a token
 * granted by the public time-stamping authority) goes through the same groups and
 * makes no claim.
 */
import * as Metrics from "../Platform/Metrics.js"
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Clock, Effect } from "effect"
import type { ApiKey } from "../Auth/Domain.js"
import { newAttestationIds } from "../Domain/AttestationId.js"
import type { ServiceUnavailable } from "../Domain/Errors.js"
import { FORMAT_VERSION, t0Payload } from "../Domain/T0.js"
import { formatMicros, formatMillis } from "../Domain/Time.js"
import { makeBatcher } from "../Platform/Batcher.js"
import { Signer } from "../Platform/Signer.js"
import { retryingConflicts } from "../Platform/Sql.js"
import type { Attestation, Claim } from "./Domain.js"
import { AttestationRepo, type ClaimToMake, newEtags, type NewAttestationRow } from "./Repo.js"

/** How many times a group writes what it still lacks (Attestor's group). */
const MAX_PASSES = 5

export interface AttestInput {
  readonly key: ApiKey
  /** Distinct digests. */
  readonly hashes: ReadonlyArray<string>
  readonly source: string | null
  readonly extraData: unknown
  readonly clientEncrypted: boolean
}

export interface Attested {
  readonly attestation: Attestation
  readonly created: boolean
  readonly claim: Claim
}

/** An attestation registered without a key: nobody holds a claim on it through this request. */
export interface Registered {
  readonly attestation: Attestation
  readonly created: boolean
}

/** What a group commits: an attest by a key, or a registration by nobody (key null, no claim). */
interface Submission extends Omit<AttestInput, "key"> {
  readonly key: ApiKey | null
}

interface Committed extends Registered {
  readonly claim: Claim | undefined
}

export class Attestor extends Effect.Service<Attestor>()("Attestations/Attestor", {
  scoped: Effect.gen(function*() {
    const repo = yield* AttestationRepo
    const signer = yield* Signer
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    /**
     * One group: read what exists, and write only what does not (the attestations and the
     * claims on them, in one atomic write). What another writer registered or claimed first
     * meanwhile is read back, and a claim on a digest it registered is written in a second
     * pass. Nothing leaves the registry, so two passes suffice unless a claim another writer
     * made is deleted again at once; the passes are bounded all the same.
     */
    const group = (inputs: ReadonlyArray<Submission>) =>
      Effect.gen(function*() {
        // Sorted, so concurrent writers on Postgres take unique-index locks in one order.
        const allHashes = [...new Set(inputs.flatMap((i) => i.hashes))].sort()
        const byHash = new Map<string, Attestation>()
        const claimsByKey = new Map<string, Map<number, Claim>>()
        const claimOf = (keyId: string) => {
          let m = claimsByKey.get(keyId)
          if (!m) claimsByKey.set(keyId, m = new Map())
          return m
        }
        /** Per key, the seqs of its digests that exist and whose claim the group does not hold yet. */
        const unreadClaims = () => {
          const out = new Map<string, Set<number>>()
          for (const input of inputs) {
            if (input.key === null) continue
            for (const hash of input.hashes) {
              const seq = byHash.get(hash)?.seq
              if (seq === undefined || claimOf(input.key.id).has(seq)) continue
              let seqs = out.get(input.key.id)
              if (!seqs) out.set(input.key.id, seqs = new Set())
              seqs.add(seq)
            }
          }
          return out
        }
        /** Reads the attestations of `hashes` the group does not know and the claims on them it does not hold. */
        const read = (hashes: ReadonlyArray<string>) =>
          Effect.gen(function*() {
            for (const a of yield* repo.findByHashes(hashes.filter((h) => !byHash.has(h)))) byHash.set(a.hashHex, a)
            yield* Effect.forEach(unreadClaims(), ([keyId, seqs]) =>
              Effect.map(repo.liveClaims(keyId, [...seqs]), (claims) => {
                for (const c of claims) claimOf(keyId).set(c.attestationSeq, c)
              }), { discard: true })
          })

        yield* read(allHashes)
        const ours = new Set<string>()
        for (let pass = 1;; pass++) {
          const toInsert = allHashes.filter((h) => !byHash.has(h))
          const claims = yield* claimsToMake(inputs, byHash, claimOf)
          if (toInsert.length === 0 && claims.length === 0) break
          if (pass > MAX_PASSES) {
            return yield* Effect.dieMessage(`a group of attests still had ${toInsert.length} digest(s) and ${claims.length} claim(s) to write after ${MAX_PASSES} passes`)
          }
          const written = yield* repo.register(yield* newRows(toInsert), claims)
          if (written.attestations.length > 0) Metrics.inc(Metrics.attestationsCreated, {}, written.attestations.length)
          for (const a of written.attestations) {
            ours.add(a.id)
            byHash.set(a.hashHex, a)
          }
          for (const c of written.claims) claimOf(c.apiKeyId).set(c.attestationSeq, c)
          // what another writer registered or claimed first: read it (no statement when there is none)
          yield* read(toInsert)
        }

        const announced = new Set<string>()
        return inputs.map((input) =>
          input.hashes.map((hash): Committed => {
            const attestation = byHash.get(hash)!
            const created = ours.has(attestation.id) && !announced.has(attestation.id)
            if (created) announced.add(attestation.id)
            return { attestation, created, claim: input.key === null ? undefined : claimOf(input.key.id).get(attestation.seq) }
          })
        )
      })

    /** Rows for new attestations of `hashes`, each signed now with the current key. */
    const newRows = (hashes: ReadonlyArray<string>) =>
      Effect.flatMap(Clock.currentTimeNanos, (nanos) => {
        const registeredAt = formatMicros(nanos / 1000n)
        const ids = newAttestationIds(hashes.length)
        return Effect.forEach(hashes, (hash, i) =>
          Effect.map(signer.sign(t0Payload(hash, registeredAt), registeredAt), (signed): NewAttestationRow => ({
            id: ids[i]!,
            hash_hex: hash,
            registered_at: registeredAt,
            signature: signed.signature,
            signing_key_id: signed.kid,
            format_version: FORMAT_VERSION
          })), { concurrency: signer.parallelism })
      })

    /**
     * Each key's claim to make, once, on each digest whose claim it does not hold: by its
     * seq when the attestation exists, by its digest when the same write registers it.
     */
    const claimsToMake = (
      inputs: ReadonlyArray<Submission>,
      byHash: ReadonlyMap<string, Attestation>,
      claimOf: (keyId: string) => ReadonlyMap<number, Claim>
    ) =>
      Effect.map(Clock.currentTimeMillis, (millis) => {
        const now = formatMillis(millis)
        const toMake: Array<{ readonly input: Submission; readonly key: ApiKey; readonly hash: string; readonly seq: number | null }> = []
        const seen = new Set<string>()
        for (const input of inputs) {
          const key = input.key
          if (key === null) continue
          for (const hash of input.hashes) {
            const seq = byHash.get(hash)?.seq ?? null
            const k = `${key.id}\u0000${hash}`
            if ((seq !== null && claimOf(key.id).has(seq)) || seen.has(k)) continue
            seen.add(k)
            toMake.push({ input, key, hash, seq })
          }
        }
        const etags = newEtags(toMake.length)
        return toMake.map(({ hash, input, key, seq }, i): ClaimToMake => ({
          hash_hex: hash,
          attestation_seq: seq,
          api_key_id: key.id,
          org_id: key.orgId,
          source: input.source,
          extra_data: input.extraData === null || input.extraData === undefined ? null : JSON.stringify(input.extraData),
          client_encrypted: input.clientEncrypted,
          etag: etags[i]!,
          created_at: now,
          updated_at: now
        }))
      })

    const submit = yield* makeBatcher<Submission, ReadonlyArray<Committed>, SqlError.SqlError | ServiceUnavailable>({
      // A group rolled back by a conflict runs again from its reads, with nothing of the failed attempt.
      process: (inputs) => retryingConflicts(group(inputs)),
      maxBatch: 64,
      workers: isPg ? 2 : 1
    })

    const committed = (submission: Submission) => Effect.catchTag(submit(submission), "SqlError", Effect.die)

    return {
      /** The attestations of `input.hashes`, in order, with the caller's claim on each. */
      attest: (input: AttestInput): Effect.Effect<ReadonlyArray<Attested>, ServiceUnavailable> =>
        Effect.map(committed(input), (results) => results.map((r) => ({ ...r, claim: r.claim! }))),
      /** The attestations of `hashes`, in order, registered without a key: no claim is made. */
      register: (hashes: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<Registered>, ServiceUnavailable> =>
        Effect.map(
          committed({ key: null, hashes, source: null, extraData: null, clientEncrypted: false }),
          (results) => results.map(({ attestation, created }) => ({ attestation, created }))
        )
    }
  }),
  dependencies: [AttestationRepo.Default, Signer.Default]
}) {}
