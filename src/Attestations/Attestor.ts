/**
 * Creating attestations (T0): sign, insert-or-get by hash, and give the caller's
 * key its own claim. Concurrent requests are group-committed in one transaction;
 * a unique hash constraint plus insert-or-get makes re-attesting idempotent even
 * when many requests for one new hash race, here or on another instance.
 */
import * as Metrics from "../Platform/Metrics.js"
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import type { ApiKey } from "../Auth/Domain.js"
import { newAttestationId } from "../Domain/AttestationId.js"
import { FORMAT_VERSION, t0Payload } from "../Domain/T0.js"
import { formatMicros, formatMillis } from "../Domain/Time.js"
import { makeGroupCommit } from "../Platform/GroupCommit.js"
import { Signer } from "../Platform/Signer.js"
import type { Attestation, Claim } from "./Domain.js"
import { AttestationRepo, newEtag, type NewAttestationRow, type NewClaimRow } from "./Repo.js"

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

export class Attestor extends Effect.Service<Attestor>()("Attestations/Attestor", {
  scoped: Effect.gen(function*() {
    const repo = yield* AttestationRepo
    const signer = yield* Signer
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })

    const process = (inputs: ReadonlyArray<AttestInput>) =>
      repo.withTransaction(Effect.gen(function*() {
        // Sorted, so concurrent transactions on Postgres take unique-index locks in one order.
        const allHashes = [...new Set(inputs.flatMap((i) => i.hashes))].sort()
        const byHash = new Map<string, Attestation>()
        for (const a of yield* repo.findByHashes(allHashes)) byHash.set(a.hashHex, a)

        const missing = allHashes.filter((h) => !byHash.has(h))
        const ours = new Set<string>()
        if (missing.length > 0) {
          const registeredAt = formatMicros((yield* Clock.currentTimeNanos) / 1000n)
          const rows: Array<NewAttestationRow> = missing.map((hash) => {
            const id = newAttestationId()
            ours.add(id)
            return {
              id,
              hash_hex: hash,
              registered_at: registeredAt,
              signature: signer.sign(t0Payload(hash, registeredAt)),
              signing_key_id: signer.currentKid,
              format_version: FORMAT_VERSION
            }
          })
          const inserted = yield* repo.insertIfAbsent(rows)
          if (inserted.length > 0) Metrics.inc(Metrics.attestationsCreated, {}, inserted.length)
          for (const a of inserted) byHash.set(a.hashHex, a)
          // Hashes another writer inserted first are not returned by the insert: read them.
          const lost = missing.filter((h) => !byHash.has(h))
          for (const a of yield* repo.findByHashes(lost)) byHash.set(a.hashHex, a)
        }

        const now = formatMillis(yield* Clock.currentTimeMillis)
        const claimRows: Array<NewClaimRow> = []
        const seen = new Set<string>()
        for (const input of inputs) {
          for (const hash of input.hashes) {
            const seq = byHash.get(hash)!.seq
            const k = `${input.key.id}\u0000${seq}`
            if (seen.has(k)) continue
            seen.add(k)
            claimRows.push({
              attestation_seq: seq,
              api_key_id: input.key.id,
              org_id: input.key.orgId,
              source: input.source,
              extra_data: input.extraData === null || input.extraData === undefined ? null : JSON.stringify(input.extraData),
              client_encrypted: input.clientEncrypted,
              etag: newEtag(),
              created_at: now,
              updated_at: now
            })
          }
        }
        claimRows.sort((a, b) => a.attestation_seq - b.attestation_seq || (a.api_key_id < b.api_key_id ? -1 : 1))
        const claimsByKey = new Map<string, Map<number, Claim>>()
        const claimOf = (keyId: string) => {
          let m = claimsByKey.get(keyId)
          if (!m) claimsByKey.set(keyId, m = new Map())
          return m
        }
        for (const c of yield* repo.insertClaimsIfAbsent(claimRows)) claimOf(c.apiKeyId).set(c.attestationSeq, c)
        // Claims a key already held are not returned by the insert: read those.
        const existingByKey = new Map<string, Array<number>>()
        for (const r of claimRows) {
          if (claimOf(r.api_key_id).has(r.attestation_seq)) continue
          let seqs = existingByKey.get(r.api_key_id)
          if (!seqs) existingByKey.set(r.api_key_id, seqs = [])
          seqs.push(r.attestation_seq)
        }
        for (const [keyId, seqs] of existingByKey) {
          for (const c of yield* repo.liveClaims(keyId, seqs)) claimOf(keyId).set(c.attestationSeq, c)
        }

        const announced = new Set<string>()
        return inputs.map((input) =>
          input.hashes.map((hash): Attested => {
            const attestation = byHash.get(hash)!
            const created = ours.has(attestation.id) && !announced.has(attestation.id)
            if (created) announced.add(attestation.id)
            return { attestation, created, claim: claimsByKey.get(input.key.id)!.get(attestation.seq)! }
          })
        )
      })).pipe(Effect.orDie)

    const submit = yield* makeGroupCommit({ process, maxBatch: 64, workers: isPg ? 2 : 1 })

    return {
      attest: (input: AttestInput) => submit(input)
    }
  }),
  dependencies: [AttestationRepo.Default, Signer.Default]
}) {}
