/** HTTP contract of the T2 proofs: anchoring data and the standard `.ots` file. */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AttestationPath, MerkleStep } from "../Attestations/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import { NotFoundEnvelope } from "../Http/Envelope.js"

export const OtsResponse = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("pending", "confirmed"),
  daily_root: HashHex,
  t1_to_t2_proof: Schema.Array(MerkleStep),
  calendars: Schema.Array(Schema.Struct({
    url: Schema.String,
    status: Schema.Literal("unsubmitted", "pending", "confirmed"),
    submitted_at: Schema.NullOr(Schema.String),
    attempts: Schema.Int,
    last_error: Schema.NullOr(Schema.String)
  })),
  bitcoin_block_height: Schema.NullOr(Schema.Int),
  bitcoin_merkle_root: Schema.NullOr(Schema.String).annotations({
    description: "Block header merkle root the proof commits to, in the byte order the OTS operations produce"
  }),
  confirmed_at: Schema.NullOr(Schema.String).annotations({ description: "When this server observed the confirmation (not the block time)" }),
  ots_available: Schema.Boolean,
  simulated: Schema.Boolean,
  note: Schema.String
}).annotations({ identifier: "OtsResponse" })

export const OTS_CONTENT_TYPE = "application/vnd.opentimestamps.v1"

export class AnchorsApi extends HttpApiGroup.make("anchors")
  .add(
    HttpApiEndpoint.get("ots", "/attestation/:id/ots")
      .setPath(AttestationPath)
      .addSuccess(OtsResponse)
      .annotate(OpenApi.Summary, "Bitcoin anchor data (404 until the attestation's batch is in a daily root)")
  )
  .add(
    HttpApiEndpoint.get("otsProof", "/attestation/:id/ots/proof")
      .setPath(AttestationPath)
      .addSuccess(HttpApiSchema.Uint8Array({ contentType: OTS_CONTENT_TYPE }))
      .annotate(OpenApi.Summary, "Standard OpenTimestamps .ots file whose file digest is the attestation's hash_hex")
      .annotate(
        OpenApi.Description,
        "Leaf→batch root→daily root Merkle steps as OTS append/prepend/sha256 ops, then the calendars' ops and attestations. Available (pending) once a calendar accepted the daily root."
      )
  )
  .addError(NotFoundEnvelope)
  .annotate(OpenApi.Title, "T2 proofs")
{}
