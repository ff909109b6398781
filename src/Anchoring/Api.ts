/** HTTP contract of the T2 proofs: anchoring data and the standard `.ots` file. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AttestationPath, BitcoinBlockHeaderHex, MerkleStep } from "../Attestations/Api.js"
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
  bitcoin_block_header: Schema.NullOr(BitcoinBlockHeaderHex).annotations({
    description: "The 80-byte header (lowercase hex) of the anchoring block, as fetched from the Bitcoin header sources and checked (null until confirmed)"
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

export const SimulatedChainHeaders = Schema.Struct({
  simulated: Schema.Literal(true),
  note: Schema.String,
  headers: Schema.Array(Schema.Struct({
    height: Schema.Int,
    hash: HashHex.annotations({ description: "Block hash, display order (as Esplora shows it)" }),
    header: BitcoinBlockHeaderHex
  }))
}).annotations({ identifier: "SimulatedChainHeaders" })

const BlockHeightPath = Schema.Struct({ height: Schema.NumberFromString.pipe(Schema.int(), Schema.between(0, 2_147_483_647)) })
const BlockHashPath = Schema.Struct({ hash: HashHex })

/**
 * Demo mode only (404 otherwise): the simulated Bitcoin chain of this
 * instance, over the Esplora endpoints a header source answers, and as one list.
 */
export class SimulatedChainApi extends HttpApiGroup.make("simulatedChain")
  .add(
    HttpApiEndpoint.get("blockHeight", "/simulated-chain/block-height/:height")
      .setPath(BlockHeightPath)
      .addSuccess(HttpApiSchema.Text({ contentType: "text/plain" }))
      .annotate(OpenApi.Summary, "SIMULATED chain (demo only): block hash at a height, display order (Esplora GET /block-height/{h})")
  )
  .add(
    HttpApiEndpoint.get("blockHeader", "/simulated-chain/block/:hash/header")
      .setPath(BlockHashPath)
      .addSuccess(HttpApiSchema.Text({ contentType: "text/plain" }))
      .annotate(OpenApi.Summary, "SIMULATED chain (demo only): 80-byte block header as hex (Esplora GET /block/{hash}/header)")
  )
  .add(
    HttpApiEndpoint.get("headers", "/simulated-chain/headers")
      .addSuccess(SimulatedChainHeaders)
      .annotate(OpenApi.Summary, "SIMULATED chain (demo only): every block header, for verifiers of demo proofs")
  )
  .addError(NotFoundEnvelope)
  .annotate(OpenApi.Title, "Simulated Bitcoin chain (demo)")
{}
