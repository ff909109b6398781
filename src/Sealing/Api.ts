/** HTTP contract of the T1 proofs: TSA token, parsed token details, Merkle inclusion proof. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AttestationPath, MerkleStep } from "../Attestations/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import { NotFoundEnvelope } from "../Http/Envelope.js"

export const TsaResponse = Schema.Struct({
  id: Schema.String,
  batch_id: Schema.Int,
  merkle_root: HashHex,
  tsa_provider: Schema.String,
  tsa_timestamp: Schema.String,
  tsa_token: Schema.String.annotations({ description: "Base64 DER TimeStampToken (CMS ContentInfo)" })
}).annotations({ identifier: "TsaResponse" })

export const TsaDetails = Schema.Struct({
  gen_time: Schema.String,
  serial_number: Schema.String,
  policy: Schema.String,
  tsa_name: Schema.NullOr(Schema.String),
  hash_algorithm: Schema.String,
  hashed_message: Schema.String,
  nonce: Schema.NullOr(Schema.String),
  accuracy: Schema.NullOr(Schema.Struct({
    seconds: Schema.optional(Schema.Number),
    millis: Schema.optional(Schema.Number),
    micros: Schema.optional(Schema.Number)
  })),
  certificates: Schema.Array(Schema.Struct({
    subject: Schema.String,
    issuer: Schema.String,
    serial_number: Schema.String,
    not_before: Schema.String,
    not_after: Schema.String
  }))
}).annotations({ identifier: "TsaDetails" })

export const MerkleResponse = Schema.Struct({
  id: Schema.String,
  batch_id: Schema.Int,
  leaf: HashHex,
  merkle_root: HashHex,
  merkle_proof: Schema.Array(MerkleStep),
  tree_version: Schema.Literal(2)
}).annotations({ identifier: "MerkleResponse" })

export class ProofsApi extends HttpApiGroup.make("proofs")
  .add(
    HttpApiEndpoint.get("tsa", "/attestation/:id/tsa")
      .setPath(AttestationPath)
      .addSuccess(TsaResponse)
      .annotate(OpenApi.Summary, "RFC 3161 timestamp of the attestation's batch (404 while T0)")
  )
  .add(
    HttpApiEndpoint.get("tsaDetails", "/attestation/:id/tsa/details")
      .setPath(AttestationPath)
      .addSuccess(TsaDetails)
      .annotate(OpenApi.Summary, "Parsed TSA token details (404 while T0)")
  )
  .add(
    HttpApiEndpoint.get("merkle", "/attestation/:id/merkle")
      .setPath(AttestationPath)
      .addSuccess(MerkleResponse)
      .annotate(OpenApi.Summary, "Merkle v2 inclusion proof, leaf to batch root (404 while T0)")
  )
  .addError(NotFoundEnvelope)
  .annotate(OpenApi.Title, "T1 proofs")
{}
