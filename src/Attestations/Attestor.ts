/**
 * Creating attestations (T0): sign, insert-or-get by hash, and give the caller's
 * key its own claim. Concurrent requests are group-committed in one transaction,
 * opened only when the group has something to write (a re-attest of what the keys
 * hold is answered from two reads); a unique hash constraint plus insert-or-get
 * makes re-attesting idempotent even when many requests for one new hash race,
 * here or on another instance.
 */
import * as Metrics from "../Platform/Metrics.js"
import { SqlClient } from "@effect/sql"
import { Effect, type Either } from "effect"
import type { ApiKey } from "../Auth/Domain.js"
import { newAttestationId } from "../Domain/AttestationId.js"
import { FORMAT_VERSION, t0Payload } from "../Domain/T0.js"
import { formatMicros, formatMillis } from "../Domain/Time.js"
import { makeGroupCommit } from "../Platform/GroupCommit.js"
import { PgDirect } from "../Platform/PgDirect.js"
import { Signer } from "../Platform/Signer.js"
import { SqliteNow } from "../Platform/SqliteClient.js"
import { done, type Program, runEffect, runNow, type Step } from "../Platform/Steps.js"
import type { Attestation, Claim } from "./Domain.js"
import { makeRecentDigests } from "./RecentDigests.js"
import {
  AttestationRepo,
  claimRowOn,
  type InsertedWithClaims,
  newEtag,
  type NewAttestationRow,
  type NewClaimByHash,
  type NewClaimRow
} from "./Repo.js"

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

/** What a group's program runs its statements and its transaction with: Effects, or values computed now (Steps.ts). */
interface GroupStore {
  readonly findByHashes: (hashes: ReadonlyArray<string>) => Step<ReadonlyArray<Attestation>>
  readonly liveClaims: (keyId: string, seqs: ReadonlyArray<number>) => Step<ReadonlyArray<Claim>>
  readonly insertIfAbsent: (rows: ReadonlyArray<NewAttestationRow>) => Step<ReadonlyArray<Attestation>>
  readonly insertClaimsIfAbsent: (rows: ReadonlyArray<NewClaimRow>) => Step<ReadonlyArray<Claim>>
  /** New attestations and their claims in one statement, its own transaction (Postgres only; Repo). */
  readonly insertWithClaims?:
    | ((rows: ReadonlyArray<NewAttestationRow>, claims: ReadonlyArray<NewClaimByHash>) => Step<InsertedWithClaims>)
    | undefined
  readonly transaction: <A>(body: () => Program<A>) => Step<A>
}

/** One group's state while its program runs, and the helpers over it (Attestor's `program`). */
interface Group {
  readonly store: GroupStore
  readonly byHash: Map<string, Attestation>
  readonly claimOf: (keyId: string) => Map<number, Claim>
  /** Per key, the seqs (of the hashes `known` can place) whose claim the group does not hold yet: what liveClaims must read. */
  readonly seqsByKey: (known: (hash: string) => number | undefined) => Map<string, Set<number>>
  /** Rows for new attestations of `hashes`, signed now. */
  readonly newRows: (hashes: ReadonlyArray<string>) => Array<NewAttestationRow>
  readonly inserted: (attestations: ReadonlyArray<Attestation>) => void
  /** Each key's claim to make, once, on each digest of `wanted` whose claim it does not hold: its digest and its fields. */
  readonly claimsToMake: (wanted: (hash: string) => boolean) => Array<NewClaimByHash>
}

// The program's generator functions are written once, here, and take the group as an
// argument: a generator function made per group (written inside `program`) keeps what it
// closes over alive through every scavenge (Steps.stepOf; README, Performance:
// "Generators made per call").

/** The claims `wanted` names (per key, the seqs), read into the group. */
function* readClaims(g: Group, wanted: ReadonlyMap<string, ReadonlySet<number>>): Program<void> {
  for (const [keyId, seqs] of wanted) {
    for (const c of yield* g.store.liveClaims(keyId, [...seqs])) g.claimOf(keyId).set(c.attestationSeq, c)
  }
}

/** New attestations of `hashes` and their claims, in the one statement (its own transaction), kept as written. */
function* writeWithClaims(
  g: Group,
  insertWithClaims: NonNullable<GroupStore["insertWithClaims"]>,
  hashes: ReadonlyArray<string>
): Program<void> {
  const wanted = new Set(hashes)
  const made = yield* insertWithClaims(g.newRows(hashes), g.claimsToMake((h) => wanted.has(h)))
  g.inserted(made.attestations)
  for (const c of made.claims) g.claimOf(c.apiKeyId).set(c.attestationSeq, c)
}

/** Inside the group's transaction: the attestations of `toInsert`, then every claim a key asked for and does not hold. */
function* insertWithTheirClaims(g: Group, toInsert: ReadonlyArray<string>): Program<void> {
  const { byHash, store } = g
  if (toInsert.length > 0) {
    g.inserted(yield* store.insertIfAbsent(g.newRows(toInsert)))
    // Hashes another writer inserted first are not returned by the insert: read them.
    const lost = toInsert.filter((h) => !byHash.has(h))
    for (const a of yield* store.findByHashes(lost)) byHash.set(a.hashHex, a)
  }

  const claimRows: Array<NewClaimRow> = g.claimsToMake(() => true).map((claim) => claimRowOn(claim, byHash.get(claim.hash_hex)!.seq))
  claimRows.sort((a, b) => a.attestation_seq - b.attestation_seq || (a.api_key_id < b.api_key_id ? -1 : 1))
  for (const c of yield* store.insertClaimsIfAbsent(claimRows)) g.claimOf(c.apiKeyId).set(c.attestationSeq, c)
  // Claims another writer made live first are not returned by the insert: read those.
  yield* readClaims(g, g.seqsByKey((hash) => byHash.get(hash)!.seq))
}

export class Attestor extends Effect.Service<Attestor>()("Attestations/Attestor", {
  scoped: Effect.gen(function*() {
    const repo = yield* AttestationRepo
    const signer = yield* Signer
    const sql = yield* SqlClient.SqlClient
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    // The clock of the runtime the group's fibers run on (GroupCommit), read synchronously on both paths.
    const clock = yield* Effect.clock
    const recent = makeRecentDigests()

    /**
     * One group: read what exists, and write only what does not. Re-attesting what
     * the keys already hold (the attestations exist, the claims are live) is answered
     * from the two reads, with no transaction. New digests alone are written, on
     * Postgres, with their claims in one statement; anything else in a transaction.
     * On Postgres a group of digests this instance has not attested lately (most
     * likely new) is written first and read after, for what the statement skipped:
     * one round trip for a group of new digests, against two read first and five for
     * a read, BEGIN, two inserts and COMMIT. The reads need no transaction: an
     * attestation's answered fields never change, and whatever another writer adds
     * between the reads and the inserts, the inserts skip (ON CONFLICT DO NOTHING)
     * and read back.
     *
     * Written once over `store` (Steps.ts): it runs on SQLite now, in the turn of the
     * event loop that flushes the group; on Postgres with callbacks on a pool client;
     * and in a fiber through @effect/sql when neither can.
     */
    function* program(store: GroupStore, inputs: ReadonlyArray<AttestInput>): Program<Array<Array<Attested>>> {
      // Sorted, so concurrent transactions on Postgres take unique-index locks in one order.
      const allHashes = [...new Set(inputs.flatMap((i) => i.hashes))].sort()
      const byHash = new Map<string, Attestation>()

      const claimsByKey = new Map<string, Map<number, Claim>>()
      const claimOf = (keyId: string) => {
        let m = claimsByKey.get(keyId)
        if (!m) claimsByKey.set(keyId, m = new Map())
        return m
      }
      const seqsByKey = (known: (hash: string) => number | undefined) => {
        const out = new Map<string, Set<number>>()
        for (const input of inputs) {
          for (const hash of input.hashes) {
            const seq = known(hash)
            if (seq === undefined || claimOf(input.key.id).has(seq)) continue
            let seqs = out.get(input.key.id)
            if (!seqs) out.set(input.key.id, seqs = new Set())
            seqs.add(seq)
          }
        }
        return out
      }
      const ours = new Set<string>()
      const newRows = (hashes: ReadonlyArray<string>): Array<NewAttestationRow> => {
        const registeredAt = formatMicros(clock.unsafeCurrentTimeNanos() / 1000n)
        return hashes.map((hash) => {
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
      }
      const inserted = (attestations: ReadonlyArray<Attestation>) => {
        if (attestations.length > 0) Metrics.inc(Metrics.attestationsCreated, {}, attestations.length)
        for (const a of attestations) byHash.set(a.hashHex, a)
      }
      const claimsToMake = (wanted: (hash: string) => boolean): Array<NewClaimByHash> => {
        const now = formatMillis(clock.unsafeCurrentTimeMillis())
        const out: Array<NewClaimByHash> = []
        const seen = new Set<string>()
        for (const input of inputs) {
          for (const hash of input.hashes) {
            const seq = byHash.get(hash)?.seq
            const k = `${input.key.id}\u0000${hash}`
            if (!wanted(hash) || (seq !== undefined && claimOf(input.key.id).has(seq)) || seen.has(k)) continue
            seen.add(k)
            out.push({
              hash_hex: hash,
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
        return out
      }

      const g: Group = { store, byHash, claimOf, seqsByKey, newRows, inserted, claimsToMake }
      const { insertWithClaims } = store

      // Digests none of which this instance attested lately are most likely new: where new
      // digests are written with their claims in one statement (Postgres), that statement goes
      // first, one round trip for the whole group, and what it skipped (digests that existed)
      // is read after it. Any other group is read first (RecentDigests).
      if (insertWithClaims !== undefined && !allHashes.some(recent.has)) yield* writeWithClaims(g, insertWithClaims, allHashes)
      const unread = allHashes.filter((h) => !byHash.has(h))
      if (unread.length > 0) for (const a of yield* store.findByHashes(unread)) byHash.set(a.hashHex, a)

      // the claims the keys already hold on the attestations that exist
      const existing = (hash: string) => byHash.get(hash)?.seq
      yield* readClaims(g, seqsByKey(existing))
      const missing = allHashes.filter((h) => !byHash.has(h))

      // Only new digests to write, and a store that writes them with their claims in one
      // statement (Postgres): that statement is its own transaction, one round trip for
      // what BEGIN, two inserts and COMMIT take otherwise. What it leaves (a digest
      // another writer inserted first) goes the general way below.
      if (insertWithClaims !== undefined && missing.length > 0 && seqsByKey(existing).size === 0) {
        yield* writeWithClaims(g, insertWithClaims, missing)
      }

      // a hash to insert, or an attestation some key asked for and holds no live claim on
      const toInsert = allHashes.filter((h) => !byHash.has(h))
      if (toInsert.length > 0 || seqsByKey(existing).size > 0) {
        yield* store.transaction(() => insertWithTheirClaims(g, toInsert))
      }

      if (insertWithClaims !== undefined) for (const hash of allHashes) recent.remember(hash)
      const announced = new Set<string>()
      return inputs.map((input) =>
        input.hashes.map((hash): Attested => {
          const attestation = byHash.get(hash)!
          const created = ours.has(attestation.id) && !announced.has(attestation.id)
          if (created) announced.add(attestation.id)
          return { attestation, created, claim: claimsByKey.get(input.key.id)!.get(attestation.seq)! }
        })
      )
    }

    const fiberStore: GroupStore = {
      ...repo.groupStatements,
      transaction: (body) => repo.withTransaction(runEffect(body))
    }
    const process = (inputs: ReadonlyArray<AttestInput>) =>
      runEffect<Array<Array<Attested>>, unknown>(() => program(fiberStore, inputs)).pipe(Effect.orDie)

    /**
     * The group now, on SQLite's connection (SqliteNow), when no fiber's transaction
     * holds it: no fiber and no @effect/sql statement per group. UNDECIDED, with
     * nothing written, when it cannot: the group then runs as `process` (GroupCommit).
     */
    const sqliteNow = yield* SqliteNow
    const processNow = sqliteNow && ((inputs: ReadonlyArray<AttestInput>) =>
      sqliteNow.runNow((run) => {
        const now = repo.groupStatementsNow(run)
        const store: GroupStore = {
          findByHashes: (hashes) => done(now.findByHashes(hashes)),
          liveClaims: (keyId, seqs) => done(now.liveClaims(keyId, seqs)),
          insertIfAbsent: (rows) => done(now.insertIfAbsent(rows)),
          insertClaimsIfAbsent: (rows) => done(now.insertClaimsIfAbsent(rows)),
          transaction: (body) => done(run.transaction(() => runNow(body())))
        }
        return runNow(program(store, inputs))
      }))

    /**
     * The group with callbacks, on one client of Postgres's pool (PgDirect): the
     * statements and the transaction of `process`, with no fiber and no @effect/sql
     * statement around each. When it fails, the group runs as `process` (GroupCommit).
     */
    const pgDirect = yield* PgDirect
    const processThen = pgDirect &&
      ((inputs: ReadonlyArray<AttestInput>, k: (outcome: Either.Either<ReadonlyArray<Array<Attested>>, unknown>) => void) =>
        pgDirect.runThen((run) => program({ ...repo.groupStatementsThen(run), transaction: run.transaction }, inputs), k))

    const submit = yield* makeGroupCommit({ process, processNow, processThen, maxBatch: 64, workers: isPg ? 2 : 1 })

    return {
      attest: (input: AttestInput) => submit(input),
      /** attest without a fiber: `done` gets the outcome from the group's batch (it must not throw; GroupCommit). */
      attestThen: submit.enqueue
    }
  }),
  dependencies: [AttestationRepo.Default, Signer.Default]
}) {}
