/**
 * What verify reads: the attestations of some digests and the live claims a key holds on them,
 * as one public read (PublicReads: the replica first, the primary for what it misses).
 *
 * Concurrent verifies share one read: each waits one turn of the event loop in a Batcher,
 * and the digests gathered are looked up together, one statement per key among them. A
 * lookup by `= ANY($1)` costs Postgres and its client about what one by `=` costs, so under
 * load a verify costs a fraction of a round trip.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlError from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { HashHex } from "../Domain/HashHex.js"
import { makeBatcher } from "../Platform/Batcher.js"
import type { AttestationStatus, Claim } from "./Domain.js"
import { PublicReads } from "./PublicReads.js"
import { AttestationRepo } from "./Repo.js"

/** An attestation (status or whole row) and the live claim of the key the read was made for, if it holds one. */
export interface WithClaim<A> {
  readonly a: A
  readonly claim: Claim | undefined
}

export type Found = WithClaim<AttestationStatus>

/**
 * The rows `read` gives for some digests and the live claims `keyId` holds on them, by hash:
 * one public read, so a row and its claim come from the same database.
 */
export const readWithClaims = <A extends { readonly seq: number; readonly hashHex: string }>(
  reads: PublicReads["Type"],
  hashes: ReadonlyArray<string>,
  keyId: string | undefined,
  read: (repo: AttestationRepo, part: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<A>, SqlError.SqlError>
): Effect.Effect<ReadonlyMap<string, WithClaim<A>>> =>
  reads.lookup(hashes, (part) =>
    Effect.gen(function*() {
      const repo = yield* AttestationRepo
      const found = yield* Effect.orDie(read(repo, part))
      const claims = keyId === undefined || found.length === 0
        ? new Map<number, Claim>()
        : new Map((yield* Effect.orDie(repo.liveClaims(keyId, found.map((a) => a.seq)))).map((c) => [c.attestationSeq, c]))
      return new Map(found.map((a): [string, WithClaim<A>] => [a.hashHex, { a, claim: claims.get(a.seq) }]))
    }))

interface Asked {
  readonly hash: string
  readonly keyId: string | undefined
}

export class StatusReads extends Effect.Service<StatusReads>()("Attestations/StatusReads", {
  scoped: Effect.gen(function*() {
    const reads = yield* PublicReads
    const sql = yield* SqlClient.SqlClient

    const lookup = (hashes: ReadonlyArray<string>, keyId: string | undefined) =>
      readWithClaims(reads, hashes, keyId, (repo, part) => repo.statusByHashes(part))

    const one = yield* makeBatcher<Asked, Found | undefined, never>({
      process: (asked) =>
        Effect.gen(function*() {
          const byKey = new Map<string | undefined, Set<string>>()
          for (const { hash, keyId } of asked) byKey.set(keyId, (byKey.get(keyId) ?? new Set()).add(hash))
          const found = new Map<string | undefined, ReadonlyMap<string, Found>>()
          for (const [keyId, hashes] of byKey) found.set(keyId, yield* lookup([...hashes], keyId))
          return asked.map(({ hash, keyId }) => found.get(keyId)!.get(hash))
        }),
      maxBatch: 256,
      // on Postgres, the next batch forms while one waits on the database
      workers: sql.onDialectOrElse({ pg: () => 2, orElse: () => 1 })
    })

    return {
      /** One digest's status and the live claim `keyId` holds on it; undefined when it is not attested. */
      status: (hash: HashHex, keyId: string | undefined): Effect.Effect<Found | undefined> => one({ hash, keyId })
    }
  })
}) {}
