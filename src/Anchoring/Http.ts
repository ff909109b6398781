/** Handlers of the T2 proof endpoints. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Option } from "effect"
import { Api } from "../Api.js"
import { findAttestation } from "../Attestations/Find.js"
import type { Attestation } from "../Attestations/Domain.js"
import { NotFound } from "../Domain/Errors.js"
import { OtsCalendar } from "../Platform/Calendar/OtsCalendar.js"
import { SIMULATED_CALENDAR_LABEL } from "../Platform/Calendar/SimulatedCalendar.js"
import { OTS_CONTENT_TYPE } from "./Api.js"
import { AnchorProofs } from "./Proofs.js"
import { SimulatedChain } from "../Platform/Calendar/SimulatedChain.js"
import { redactUrl } from "../Platform/RedactUrl.js"

const notAnchored = (a: Attestation) =>
  new NotFound({ message: `attestation ${a.id} is not in a daily root yet (level ${a.level})`, details: { level: a.level } })

export const AnchorsLive = HttpApiBuilder.group(Api, "anchors", (handlers) =>
  Effect.gen(function*() {
    const proofs = yield* AnchorProofs
    const calendar = yield* OtsCalendar
    const note = calendar.simulated
      ? `${SIMULATED_CALENDAR_LABEL} The Bitcoin block here is simulated: this is not a real anchor.`
      : "T2 status recorded by the service is not a verification result; verify the proof against Bitcoin independently."
    return handlers
      .handle("ots", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const v = yield* proofs.view(a)
          if (!v) return yield* notAnchored(a)
          return {
            id: a.id,
            status: v.day.status,
            daily_root: v.day.root,
            t1_to_t2_proof: v.t1ToT2Proof,
            calendars: v.submissions.map((s) => ({
              url: redactUrl(s.calendarUrl),
              status: s.status,
              submitted_at: s.submittedAt,
              attempts: s.attempts,
              last_error: s.lastError
            })),
            bitcoin_block_height: v.day.bitcoinHeight,
            bitcoin_merkle_root: v.day.bitcoinMerkleRoot,
            bitcoin_block_header: v.day.bitcoinHeader,
            confirmed_at: v.day.confirmedAt,
            ots_available: v.calendarTimestamp !== undefined,
            simulated: calendar.simulated,
            note
          }
        }))
      .handle("otsProof", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const v = yield* proofs.view(a)
          if (!v || !v.calendarTimestamp) return yield* notAnchored(a)
          return HttpServerResponse.uint8Array(proofs.otsFile(a, v), {
            contentType: OTS_CONTENT_TYPE,
            headers: { "content-disposition": `attachment; filename="${a.id}.ots"` }
          })
        }))
  }))

const SIMULATED_CHAIN_NOTE =
  "SIMULATED Bitcoin chain of this demo instance: real 80-byte headers (regtest difficulty) over simulated blocks, not the Bitcoin blockchain."

export const SimulatedChainLive = HttpApiBuilder.group(Api, "simulatedChain", (handlers) =>
  Effect.gen(function*() {
    const chain = yield* Effect.serviceOption(SimulatedChain)
    const demoOnly = new NotFound({ message: "no simulated chain: this instance is not in demo mode with its simulated calendar", details: {} })
    const withChain = <A>(f: (c: SimulatedChain["Type"]) => Effect.Effect<A, NotFound>) =>
      Option.match(chain, { onNone: () => Effect.fail(demoOnly), onSome: f })
    const missing = (what: string) => new NotFound({ message: `${what} is not in the simulated chain`, details: {} })
    return handlers
      .handle("blockHeight", ({ path }) =>
        withChain((c) =>
          Effect.flatMap(c.byHeight(path.height), (b) => (b ? Effect.succeed(b.hash) : Effect.fail(missing(`block ${path.height}`))))
        ))
      .handle("blockHeader", ({ path }) =>
        withChain((c) =>
          Effect.flatMap(c.byHash(path.hash), (b) => (b ? Effect.succeed(b.header) : Effect.fail(missing(`block ${path.hash}`))))
        ))
      .handle("headers", () =>
        withChain((c) =>
          Effect.map(c.blocks, (blocks) => ({
            simulated: true as const,
            note: SIMULATED_CHAIN_NOTE,
            headers: blocks
          }))
        ))
  }))
