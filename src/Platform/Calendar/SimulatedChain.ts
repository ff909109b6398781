/**
 * The demo instance's SIMULATED calendar and Bitcoin chain, kept in the
 * database (tables simulated_blocks and simulated_submissions) so a restart —
 * or another instance on the same Postgres — continues the same chain.
 *
 * Same protocol as the in-memory simulated calendar: submit answers with
 * `append <nonce>, sha256` and a pending attestation; once a commitment has
 * waited the confirmation delay, the next upgrade mines a block (a real 80-byte
 * header chained to the previous simulated block, regtest nBits) over every
 * commitment that has waited as long, and answers with the ops up to the header
 * merkle root and a Bitcoin attestation at its height.
 *
 * It is also the demo's Bitcoin header source and backs the
 * /v1/simulated-chain Esplora endpoints.
 */
import { randomBytes } from "node:crypto"
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Context, Effect, Layer, Schema } from "effect"
import { HashHex } from "../../Domain/HashHex.js"
import { Attestations, bytesToHex, chain, hexToBytes, leaf, Ops, serializeTimestamp } from "../../Domain/Ots.js"
import { formatMillis } from "../../Domain/Time.js"
import { column, DbBytes, DbInt, decodeRows } from "../Rows.js"
import { retryingConflicts } from "../Sql.js"
import { sha256 } from "@noble/hashes/sha2.js"
import { BitcoinHeaderSources, HeaderSourceError } from "../Bitcoin/HeaderSources.js"
import { CalendarError, MAX_SUBMIT_DIGEST_BYTES, OtsCalendar } from "./OtsCalendar.js"
import {
  mineSimulatedBlock,
  SIMULATED_CALENDAR_LABEL,
  SIMULATED_CALENDAR_URL,
  SIMULATED_GENESIS_PREV,
  SIMULATED_START_HEIGHT
} from "./SimulatedCalendar.js"

/** A simulated_blocks row: the block hash in display order, the 80-byte header as hex. */
const SimulatedBlock = Schema.Struct({ height: DbInt, hash: HashHex, header: Schema.String })
export type SimulatedBlock = typeof SimulatedBlock.Type
const blockRows = decodeRows(SimulatedBlock)
const submissionRows = decodeRows(Schema.Struct({
  proof: Schema.NullOr(DbBytes),
  submittedAtMs: column("submitted_at_ms", DbInt)
}))

export interface SimulatedChainService {
  readonly blocks: Effect.Effect<ReadonlyArray<SimulatedBlock>>
  readonly byHeight: (height: number) => Effect.Effect<SimulatedBlock | undefined>
  readonly byHash: (hash: string) => Effect.Effect<SimulatedBlock | undefined>
}

export class SimulatedChain extends Context.Tag("Platform/SimulatedChain")<SimulatedChain, SimulatedChainService>() {}

export const makeSimulatedChain = (opts: { readonly confirmDelayMs: number; readonly url?: string }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const url = opts.url ?? SIMULATED_CALENDAR_URL

    const blocks = Effect.orDie(blockRows(sql`SELECT height, hash, header FROM simulated_blocks ORDER BY height`))
    const byHeight = (height: number) =>
      blockRows(sql`SELECT height, hash, header FROM simulated_blocks WHERE height = ${height}`).pipe(
        Effect.map((rows) => rows[0]),
        Effect.orDie
      )
    const byHash = (hash: string) =>
      blockRows(sql`SELECT height, hash, header FROM simulated_blocks WHERE hash = ${hash}`).pipe(
        Effect.map((rows) => rows[0]),
        Effect.orDie
      )

    const fail = (u: string, message: string) => new CalendarError({ url: u, message })

    const submit = (u: string, digest: Uint8Array) =>
      Effect.gen(function*() {
        if (u !== url) return yield* fail(u, `unknown simulated calendar (expected ${url})`)
        if (digest.length < 1 || digest.length > MAX_SUBMIT_DIGEST_BYTES) {
          return yield* fail(u, `digest must be 1..${MAX_SUBMIT_DIGEST_BYTES} bytes`)
        }
        const nonce = new Uint8Array(randomBytes(16))
        const joined = new Uint8Array(digest.length + nonce.length)
        joined.set(digest)
        joined.set(nonce, digest.length)
        const commitment = bytesToHex(sha256(joined))
        const now = yield* Clock.currentTimeMillis
        yield* sql`INSERT INTO simulated_submissions (commitment, calendar_url, submitted_at_ms)
          VALUES (${commitment}, ${url}, ${now})`.pipe(Effect.mapError((e) => fail(u, `simulated chain: ${e.message}`)))
        return serializeTimestamp(chain([Ops.append(nonce), Ops.sha256], leaf(Attestations.pending(url))))
      })

    /** Mines one block over every commitment that has waited the confirmation delay. */
    const mine = (now: number) =>
      retryingConflicts(sql.withTransaction(Effect.gen(function*() {
        const due = yield* sql<{ commitment: string }>`SELECT commitment FROM simulated_submissions
          WHERE height IS NULL AND submitted_at_ms <= ${now - opts.confirmDelayMs} ORDER BY submitted_at_ms, commitment`
        if (due.length === 0) return
        const [tip] = yield* blockRows(sql`SELECT height, hash, header FROM simulated_blocks ORDER BY height DESC LIMIT 1`)
        const height = tip ? tip.height + 1 : SIMULATED_START_HEIGHT
        const block = mineSimulatedBlock({
          height,
          prevHash: tip?.hash ?? SIMULATED_GENESIS_PREV,
          timeSec: Math.floor(now / 1000),
          commitments: due.map((d) => hexToBytes(d.commitment))
        })
        yield* sql`INSERT INTO simulated_blocks (height, hash, header, created_at)
          VALUES (${height}, ${block.hash}, ${block.header}, ${formatMillis(now)})`
        for (const [i, d] of due.entries()) {
          yield* sql`UPDATE simulated_submissions SET height = ${height}, proof = ${Buffer.from(block.proofs[i]!)}
            WHERE commitment = ${d.commitment}`
        }
      })))

    const proofOf = (commitment: string) =>
      Effect.map(
        submissionRows(sql`SELECT proof, submitted_at_ms FROM simulated_submissions WHERE commitment = ${commitment}`),
        (rows) => rows[0]
      )

    const upgrade = (u: string, commitment: Uint8Array) =>
      Effect.gen(function*() {
        if (u !== url) return yield* fail(u, `unknown simulated calendar (expected ${url})`)
        const key = bytesToHex(commitment)
        const now = yield* Clock.currentTimeMillis
        const row = yield* proofOf(key)
        if (row === undefined) return null
        if (row.proof !== null) return row.proof
        if (now - row.submittedAtMs < opts.confirmDelayMs) return null
        yield* mine(now)
        const after = yield* proofOf(key)
        return after?.proof ?? null
      }).pipe(Effect.catchTag("SqlError", (e) => Effect.fail(fail(u, `simulated chain: ${e.message}`))))

    const calendar = { urls: [url], simulated: true, label: SIMULATED_CALENDAR_LABEL, submit, upgrade }
    const chainService: SimulatedChainService = { blocks, byHeight, byHash }
    const sources = {
      sources: [url],
      simulated: true,
      header: (height: number) =>
        Effect.flatMap(byHeight(height), (b) =>
          b === undefined
            ? Effect.fail(new HeaderSourceError({ message: `block ${height} is not in the simulated chain`, disagreement: false }))
            : Effect.succeed({ hash: b.hash, header: b.header }))
    }
    return { calendar, chain: chainService, sources }
  })

/** The demo's calendar, header source and chain, all over the database. */
export const layerSimulatedChain = (opts: { readonly confirmDelayMs: number; readonly url?: string }) =>
  Layer.unwrapEffect(Effect.map(makeSimulatedChain(opts), (s) =>
    Layer.mergeAll(
      Layer.succeed(OtsCalendar, s.calendar),
      Layer.succeed(SimulatedChain, s.chain),
      Layer.succeed(BitcoinHeaderSources, s.sources)
    )))
