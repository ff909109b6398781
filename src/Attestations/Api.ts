/** HTTP contract of attesting, verifying and looking up attestations. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Authentication, requiredScopes } from "../Auth/Api.js"
import { HashHex } from "../Domain/HashHex.js"
import { Jwk } from "../Domain/Jwk.js"
import {
  AuthErrorEnvelope,
  ForbiddenEnvelope,
  NotFoundEnvelope,
  RateLimitedEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { BATCH_MAX, Level, SOURCE_MAX } from "./Domain.js"

export const Source = Schema.String.pipe(
  // Counted in code points (characters), not UTF-16 units: 100 emoji fit.
  Schema.filter((s) => s.length <= SOURCE_MAX || [...s].length <= SOURCE_MAX, {
    message: () => `source must be at most ${SOURCE_MAX} characters`,
    jsonSchema: { maxLength: SOURCE_MAX }
  })
).annotations({ description: "Operational label, at most 100 characters; private to the calling key" })

/**
 * Any JSON object, passed through as parsed: decoding a Record would rebuild it
 * by assignment, and assigning a `__proto__` key sets the prototype instead of
 * keeping the key — extra_data is data, every key of it is kept (issue 11 §7).
 */
export const ExtraData = Schema.declare(
  (u: unknown): u is { readonly [key: string]: unknown } => typeof u === "object" && u !== null && !Array.isArray(u)
).annotations({
  identifier: "ExtraData",
  jsonSchema: { type: "object", properties: {}, required: [], additionalProperties: { $id: "/schemas/unknown", title: "unknown" } },
  description:
    "Free JSON object (at most 16 KiB serialized). With client_encrypted it is an opaque blob: any JSON object, stored and returned exactly as sent; the recommended layout (the one attestd's helpers write) is `{alg: \"A256GCM\", iv, ciphertext}` in Base64URL."
})

const Timestamp = Schema.String.annotations({ description: "ISO 8601, microseconds, +00:00" })

export const AttestPayload = Schema.Struct({
  hash_hex: HashHex,
  source: Schema.optional(Schema.NullOr(Source)),
  extra_data: Schema.optional(Schema.NullOr(ExtraData)),
  client_encrypted: Schema.optional(Schema.Boolean)
}).annotations({ identifier: "AttestRequest" })

export const AttestationItem = Schema.Struct({
  id: Schema.String,
  hash_hex: HashHex,
  timestamp: Timestamp,
  signature: Schema.String.annotations({ description: "Base64 DER ECDSA P-256 (low-S) signature" }),
  signing_key_id: Schema.String,
  format_version: Schema.String,
  status: Schema.Literal("created", "existing"),
  etag: Schema.String,
  claim_id: Schema.Int,
  source: Schema.NullOr(Schema.String),
  extra_data: Schema.NullOr(Schema.Unknown),
  client_encrypted: Schema.Boolean
}).annotations({ identifier: "AttestResponse" })

export const AttestBatchPayload = Schema.Struct({
  hashes: Schema.Array(HashHex).pipe(
    Schema.minItems(1),
    Schema.maxItems(BATCH_MAX, { message: () => `at most ${BATCH_MAX} hashes per call` })
  ),
  source: Schema.optional(Schema.NullOr(Source)),
  extra_data: Schema.optional(Schema.NullOr(ExtraData)),
  client_encrypted: Schema.optional(Schema.Boolean)
}).annotations({ identifier: "AttestBatchRequest" })

export const AttestBatchResponse = Schema.Struct({
  created: Schema.Int,
  existing: Schema.Int,
  attestations: Schema.Array(AttestationItem)
}).annotations({ identifier: "AttestBatchResponse" })

export class AttestationsApi extends HttpApiGroup.make("attestations")
  .add(
    HttpApiEndpoint.post("attest", "/attest")
      .setPayload(AttestPayload)
      .addSuccess(AttestationItem, { status: 201 })
      .addSuccess(AttestationItem)
      .annotate(OpenApi.Summary, "Attest a SHA-256 digest (scope attest)")
      .annotate(
        OpenApi.Description,
        "201 with status `created` for a new hash; 200 with status `existing` when the hash was already attested (idempotent)."
      )
      .annotate(OpenApi.Override, requiredScopes("attest"))
  )
  .add(
    HttpApiEndpoint.post("attestBatch", "/attest/batch")
      .setPayload(AttestBatchPayload)
      .addSuccess(AttestBatchResponse)
      .annotate(OpenApi.Summary, "Attest up to 100 digests (scope attest or batch)")
      .annotate(OpenApi.Override, requiredScopes("attest", "batch"))
  )
  .addError(ValidationErrorEnvelope)
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Attestation")
{}

export const VerifyPayload = Schema.Struct({ hash_hex: HashHex }).annotations({ identifier: "VerifyRequest" })

const VerifyFields = {
  exists: Schema.Boolean,
  hash_hex: HashHex,
  id: Schema.optional(Schema.String),
  timestamp: Schema.optional(Timestamp),
  level: Schema.optional(Level),
  verified_at: Schema.optional(Timestamp),
  source: Schema.optional(Schema.NullOr(Schema.String))
}

export const VerifyResponse = Schema.Struct(VerifyFields).annotations({ identifier: "VerifyResponse" })

export const VerifyBatchPayload = Schema.Struct({
  hashes: Schema.Array(HashHex).pipe(
    Schema.minItems(1),
    Schema.maxItems(BATCH_MAX, { message: () => `at most ${BATCH_MAX} hashes per call` })
  ),
  detailed: Schema.optional(Schema.Boolean)
}).annotations({ identifier: "VerifyBatchRequest" })

export const VerifyBatchItem = Schema.Struct({
  ...VerifyFields,
  certification_level: Schema.optional(Level),
  t0_timestamp: Schema.optional(Timestamp),
  t1_timestamp: Schema.optional(Schema.NullOr(Timestamp)),
  t2_timestamp: Schema.optional(Schema.NullOr(Timestamp)),
  claim: Schema.optional(Schema.NullOr(Schema.Struct({
    claim_id: Schema.Int,
    source: Schema.NullOr(Schema.String),
    extra_data: Schema.NullOr(Schema.Unknown),
    client_encrypted: Schema.Boolean,
    etag: Schema.String
  })))
}).annotations({ identifier: "VerifyBatchItem" })

export const VerifyBatchResponse = Schema.Struct({
  found: Schema.Int,
  count: Schema.Int,
  results: Schema.Array(VerifyBatchItem)
}).annotations({ identifier: "VerifyBatchResponse" })

export class VerificationApi extends HttpApiGroup.make("verification")
  .add(
    HttpApiEndpoint.post("verify", "/verify")
      .setPayload(VerifyPayload)
      .addSuccess(VerifyResponse)
      .annotate(OpenApi.Summary, "Verify whether a digest is attested (public)")
      .annotate(OpenApi.Description, "A valid bearer key adds the caller's own `source` where it owns a claim.")
  )
  .add(
    HttpApiEndpoint.post("verifyBatch", "/verify/batch")
      .setPayload(VerifyBatchPayload)
      .addSuccess(VerifyBatchResponse)
      .annotate(OpenApi.Summary, "Verify up to 100 digests (public; detailed=true needs an API key)")
  )
  .addError(ValidationErrorEnvelope)
  .addError(AuthErrorEnvelope)
  .addError(ForbiddenEnvelope)
  .addError(RateLimitedEnvelope)
  .annotate(OpenApi.Title, "Verification")
{}

export const AttestationPath = Schema.Struct({
  id: Schema.String.annotations({
    description: "att_… handle, or the legacy numeric handle of an imported historical attestation; surrounding whitespace is trimmed"
  })
})

/** Only imported historical attestations carry one (CONTRACT §2); API-created ones never do. */
const LegacyId = Schema.optional(Schema.Int.annotations({
  description: "Numeric handle of an imported historical attestation (attestd import); absent on every other attestation"
}))

export const PublicAttestation = Schema.Struct({
  id: Schema.String,
  hash_hex: HashHex,
  timestamp: Timestamp,
  signature: Schema.String,
  format_version: Schema.String,
  signing_key_id: Schema.String,
  legacy_id: LegacyId
}).annotations({ identifier: "PublicAttestation" })

export const StatusResponse = Schema.Struct({
  id: Schema.String,
  hash_hex: HashHex,
  level: Level,
  t0_timestamp: Timestamp,
  t1_timestamp: Schema.NullOr(Timestamp),
  t2_timestamp: Schema.NullOr(Timestamp),
  t2_bitcoin_block: Schema.NullOr(Schema.Int),
  signature_available: Schema.Boolean,
  merkle_proof_available: Schema.Boolean,
  ots_available: Schema.Boolean,
  legacy_id: LegacyId
}).annotations({ identifier: "StatusResponse" })

export const SignatureResponse = Schema.Struct({
  id: Schema.String,
  signature: Schema.String,
  algorithm: Schema.Literal("ECDSA-P256-SHA256"),
  signing_key_id: Schema.String,
  format_version: Schema.String,
  registered_at: Timestamp,
  signed_payload: Schema.String.annotations({ description: "format_version|hash_hex|registered_at" }),
  legacy_id: LegacyId
}).annotations({ identifier: "SignatureResponse" })

export const MerkleStep = Schema.Struct({
  hash: HashHex,
  position: Schema.Literal("left", "right")
}).annotations({ identifier: "MerkleStep" })

export const EvidenceT0 = Schema.Struct({
  signature: Schema.String,
  algorithm: Schema.Literal("ECDSA-P256-SHA256"),
  publicKeyId: Schema.String,
  registeredAt: Timestamp,
  formatVersion: Schema.String,
  publicKey: Schema.optional(Jwk.annotations({ description: "The signing key as JWK, for offline verification; check its kid against GET /v1/keys" }))
})

export const EvidenceT1 = Schema.Struct({
  batchId: Schema.Int,
  merkleRoot: HashHex,
  merkleProof: Schema.Array(MerkleStep),
  tsaProvider: Schema.String,
  tsaTimestamp: Schema.String,
  tsaToken: Schema.String
})

export const BitcoinBlockHeaderHex = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{160}$/))

export const EvidenceT2 = Schema.Struct({
  dailyRoot: HashHex,
  t1ToT2Proof: Schema.Array(MerkleStep),
  bitcoinBlockHeight: Schema.Int,
  bitcoinBlockHash: Schema.Null,
  bitcoinTxid: Schema.Null,
  bitcoinBlockHeader: Schema.optional(BitcoinBlockHeaderHex.annotations({
    description:
      "The 80-byte header (lowercase hex) of the block the OTS proof reaches: its merkle root field is the message the OTS operations reach, its double SHA-256 meets its nBits target. Check its place in the chain against a Bitcoin source of your choice."
  })),
  confirmedAt: Schema.String,
  otsProof: Schema.String,
  simulated: Schema.optional(Schema.Boolean)
})

export const Evidence = Schema.Struct({
  id: Schema.String,
  hash_hex: HashHex,
  level: Level,
  t0: EvidenceT0,
  t1: Schema.optional(EvidenceT1),
  t2: Schema.optional(EvidenceT2),
  legacy_id: LegacyId
}).annotations({ identifier: "EvidenceBundle" })

export class LookupApi extends HttpApiGroup.make("lookup")
  .add(
    HttpApiEndpoint.get("attestation", "/attestation/:id")
      .setPath(AttestationPath)
      .addSuccess(PublicAttestation)
      .annotate(OpenApi.Summary, "Public attestation: cryptographic proof only")
  )
  .add(
    HttpApiEndpoint.get("status", "/attestation/:id/status")
      .setPath(AttestationPath)
      .addSuccess(StatusResponse)
      .annotate(OpenApi.Summary, "Trust level and tier timestamps")
  )
  .add(
    HttpApiEndpoint.get("signature", "/attestation/:id/signature")
      .setPath(AttestationPath)
      .addSuccess(SignatureResponse)
      .annotate(OpenApi.Summary, "T0 ECDSA signature and the exact signed payload")
  )
  .add(
    HttpApiEndpoint.get("evidence", "/attestation/:id/evidence")
      .setPath(AttestationPath)
      .addSuccess(Evidence)
      .annotate(OpenApi.Summary, "Evidence bundle (t0; t1 and t2 once reached)")
  )
  .addError(NotFoundEnvelope)
  .addError(ValidationErrorEnvelope)
  .annotate(OpenApi.Title, "Lookup and proofs")
{}
