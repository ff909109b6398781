/** Handlers of the T2 proof endpoints. */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { findAttestation } from "../Attestations/Http.js"
import type { Attestation } from "../Attestations/Domain.js"
import { NotFound } from "../Domain/Errors.js"
import { OtsCalendar } from "../Platform/Calendar/OtsCalendar.js"
import { SIMULATED_CALENDAR_LABEL } from "../Platform/Calendar/SimulatedCalendar.js"
import { OTS_CONTENT_TYPE } from "./Api.js"
import { AnchorProofs } from "./Proofs.js"

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
            daily_root: v.day.root as never,
            t1_to_t2_proof: v.t1ToT2Proof.map((s) => ({ hash: s.hash as never, position: s.position })),
            calendars: v.submissions.map((s) => ({
              url: s.calendarUrl,
              status: s.status,
              submitted_at: s.submittedAt,
              attempts: s.attempts,
              last_error: s.lastError
            })),
            bitcoin_block_height: v.day.bitcoinHeight,
            bitcoin_merkle_root: v.day.bitcoinMerkleRoot,
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
