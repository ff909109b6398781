/**
 * Creating attestations (T0): sign, insert-or-get by hash, and give the caller's
 * key its own claim. Concurrent requests are group-committed (Batcher) in one
 * transaction, opened only when the group has something to write (a re-attest of
 * what the keys hold is answered from two reads); a unique hash constraint plus
 * insert-or-get makes re-attesting idempotent even when many requests for one new
 * hash race, here or on another instance. A registration without a key (a token
 * granted by the public time-stamping authority) goes through the same groups and
 * makes no claim.
 */
import * as Metrics from "../Platform/Metrics.js"
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Clock, Effect } from "effect"
import type { ApiKey } from "../Auth/Domain.js"
import { newAttestationId } from "../Domain/AttestationId.js"
import type { ServiceUnavailable } from "../Domain/Errors.js"
import { FORMAT_VERSION, t0Payload } from "../Domain/T0.js"
import { formatMicros, formatMillis } from "../Domain/Time.js"
import { makeBatcher } from "../Platform/Batcher.js"
import { Signer } from "../Platform/Signer.js"
import { retryingConflicts } from "../Platform/Sql.js"
import type { Attestation, Claim } from "./Domain.js"
import { AttestationRepo, claimRowOn, newEtag, type NewAttestationRow, type NewClaimRow } from "./Repo.js"

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

    /** One group: read what exists, and write only what does not, in one transaction. */
    const group = (inputs: ReadonlyArray<Submission>) =>
      Effect.gen(function*() {
        // Sorted, so concurrent transactions on Postgres take unique-index locks in one order.
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
        const readClaims = Effect.suspend(() =>
          Effect.forEach(unreadClaims(), ([keyId, seqs]) =>
            Effect.map(repo.liveClaims(keyId, [...seqs]), (claims) => {
              for (const c of claims) claimOf(keyId).set(c.attestationSeq, c)
            }), { discard: true })
        )
        const remember = (attestations: ReadonlyArray<Attestation>) => {
          for (const a of attestations) byHash.set(a.hashHex, a)
        }

        remember(yield* repo.findByHashes(allHashes))
        yield* readClaims
        const toInsert = allHashes.filter((h) => !byHash.has(h))
        const ours = new Set<string>()

        if (toInsert.length > 0 || unreadClaims().size > 0) {
          const rows = yield* newRows(toInsert)
          for (const r of rows) ours.add(r.id)
          yield* repo.withTransaction(Effect.gen(function*() {
            if (rows.length > 0) {
              const inserted = yield* repo.insertIfAbsent(rows)
              if (inserted.length > 0) Metrics.inc(Metrics.attestationsCreated, {}, inserted.length)
              remember(inserted)
              // Hashes another writer inserted first are not returned by the insert: read them.
              remember(yield* repo.findByHashes(toInsert.filter((h) => !byHash.has(h))))
            }
            const claimRows = yield* claimsToMake(inputs, byHash, claimOf)
            const made = yield* repo.insertClaimsIfAbsent(claimRows)
            for (const c of made) claimOf(c.apiKeyId).set(c.attestationSeq, c)
            // Claims another writer made live first are not returned by the insert: read those.
            yield* readClaims
          }))
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
        return Effect.forEach(hashes, (hash) =>
          Effect.map(signer.sign(t0Payload(hash, registeredAt), registeredAt), (signed): NewAttestationRow => ({
            id: newAttestationId(),
            hash_hex: hash,
            registered_at: registeredAt,
            signature: signed.signature,
            signing_key_id: signed.kid,
            format_version: FORMAT_VERSION
          })), { concurrency: signer.parallelism })
      })

    /** Each key's claim to make, once, on each digest whose claim it does not hold, in (seq, key) order. */
    const claimsToMake = (
      inputs: ReadonlyArray<Submission>,
      byHash: ReadonlyMap<string, Attestation>,
      claimOf: (keyId: string) => ReadonlyMap<number, Claim>
    ) =>
      Effect.map(Clock.currentTimeMillis, (millis) => {
        const now = formatMillis(millis)
        const out: Array<NewClaimRow> = []
        const seen = new Set<string>()
        for (const input of inputs) {
          const key = input.key
          if (key === null) continue
          for (const hash of input.hashes) {
            const seq = byHash.get(hash)!.seq
            const k = `${key.id}\u0000${seq}`
            if (claimOf(key.id).has(seq) || seen.has(k)) continue
            seen.add(k)
            out.push(claimRowOn({
              api_key_id: key.id,
              org_id: key.orgId,
              source: input.source,
              extra_data: input.extraData === null || input.extraData === undefined ? null : JSON.stringify(input.extraData),
              client_encrypted: input.clientEncrypted,
              etag: newEtag(),
              created_at: now,
              updated_at: now
            }, seq))
          }
        }
        return out.sort((a, b) => a.attestation_seq - b.attestation_seq || (a.api_key_id < b.api_key_id ? -1 : 1))
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
