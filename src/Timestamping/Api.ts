/** HTTP contract of the RFC 3161 time-stamping authority (CONTRACT §6). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { ConfiguredAccess } from "../Auth/Api.js"
import { Evidence } from "../Attestations/Api.js"
import {
  AuthErrorEnvelope,
  ForbiddenEnvelope,
  NotFoundEnvelope,
  QuotaExceededEnvelope,
  RateLimitedEnvelope,
  UnsupportedMediaTypeEnvelope,
  ValidationErrorEnvelope
} from "../Http/Envelope.js"
import { HashHex } from "../Domain/HashHex.js"
import type { AppConfigShape } from "../Platform/Config.js"

export const TIMESTAMP_QUERY = "application/timestamp-query"
export const TIMESTAMP_REPLY = "application/timestamp-reply"
export const PEM_CERTIFICATE_CHAIN = "application/pem-certificate-chain"

/** Whether POST /v1/timestamp needs a key: ATTESTD_TSA_ACCESS=key with time-stamping on (off, it is a plain 404). */
export const keyedTimestamping = (config: AppConfigShape): boolean =>
  config.timestamping.enabled && config.timestamping.access === "key"

const OID = /^[0-2](\.(0|[1-9][0-9]*))+$/

export const TimestampJsonRequest = Schema.Struct({
  artifact_hash: Schema.String.pipe(Schema.pattern(/^(?:[0-9a-fA-F]{2}){1,128}$/, {
    message: () => ({ message: "must be the digest in hex (64, 96 or 128 characters for sha256, sha384, sha512)", override: true })
  })).annotations({ description: "The digest to time-stamp, hex; its length must fit hash_algorithm (else a badDataFormat rejection)" }),
  hash_algorithm: Schema.Literal("sha256", "sha384", "sha512"),
  nonce: Schema.optional(Schema.String.pipe(Schema.pattern(/^[0-9]{1,64}$/)).annotations({
    description: "A decimal integer, echoed in the token"
  })),
  cert_req: Schema.optional(Schema.Boolean).annotations({ description: "Embed the TSA certificate in the token (default false, as RFC 3161's certReq)" }),
  tsa_policy_oid: Schema.optional(Schema.String.pipe(Schema.pattern(OID)).annotations({
    description: "The policy asked for: one this TSA accepts (else an unacceptedPolicy rejection)"
  }))
}).annotations({ identifier: "TimestampJsonRequest" })

const DerTimeStampReq = HttpApiSchema.Uint8Array({ contentType: TIMESTAMP_QUERY }).annotations({
  description: "DER TimeStampReq (RFC 3161 §2.4.1), as `openssl ts -query`, jarsigner, osslsigncode or signtool send it"
})

const DerTimeStampResp = HttpApiSchema.Uint8Array({ contentType: TIMESTAMP_REPLY }).annotations({
  description:
    "DER TimeStampResp (RFC 3161 §2.4.2), granted (status 0) or refused (status 2, `rejection`, with a failInfo — badAlg, badRequest, badDataFormat, unacceptedPolicy, unacceptedExtension, timeNotAvailable, systemFailure — and a statusString); HTTP 200 either way"
})

export const TimestampLookup = Schema.Struct({
  serial_number: Schema.String.annotations({ description: "The token's serial, lowercase hex without leading zeros" }),
  gen_time: Schema.String.annotations({ description: "The token's genTime, ISO 8601 UTC with milliseconds" }),
  policy: Schema.String,
  hash_algorithm: Schema.Literal("sha256", "sha384", "sha512"),
  hashed_message: Schema.String.annotations({ description: "The message imprint, lowercase hex" }),
  token: Schema.String.annotations({ description: "Base64 DER TimeStampToken (CMS ContentInfo)" }),
  token_sha256: HashHex.annotations({ description: "SHA-256 of the token's DER: the digest attested for it" }),
  token_attestation_id: Schema.String.annotations({ description: "The attestation of token_sha256 (its evidence is …/evidence)" }),
  imprint_attestation_id: Schema.NullOr(Schema.String).annotations({
    description: "The attestation of the imprint itself when it is SHA-256, else null"
  })
}).annotations({ identifier: "TimestampLookup" })

const SerialPath = Schema.Struct({
  serial: Schema.String.annotations({ description: "The token's serial, hex, with or without leading zeros" })
})

export class TimestampingApi extends HttpApiGroup.make("timestamping")
  .add(
    HttpApiEndpoint.post("timestamp", "/timestamp")
      .setPayload(Schema.Union(DerTimeStampReq, TimestampJsonRequest))
      .addSuccess(DerTimeStampResp)
      .addError(ValidationErrorEnvelope)
      .addError(UnsupportedMediaTypeEnvelope)
      .addError(AuthErrorEnvelope)
      .addError(ForbiddenEnvelope)
      .addError(RateLimitedEnvelope)
      .addError(QuotaExceededEnvelope)
      .annotate(ConfiguredAccess, keyedTimestamping)
      .annotate(OpenApi.Override, {
        security: [{}, { bearer: ["timestamp"] }, { basic: ["timestamp"] }],
        "x-required-scopes": ["timestamp"]
      })
      .annotate(OpenApi.Summary, "RFC 3161 time-stamp: a standard TimeStampToken, itself attested and anchored")
      .annotate(
        OpenApi.Description,
        "Any RFC 3161 client can use this URL as its TSA (`openssl ts`, `jarsigner -tsa`, `osslsigncode -ts`, signtool, Bouncy Castle). The reply is always `application/timestamp-reply`, HTTP 200 for granted and refused alike (the reason travels in the TimeStampResp); the Accept header is ignored. Another Content-Type: 415; a body over 64 KiB: 413; ATTESTD_TIMESTAMPING=off: 404. The SHA-256 of every granted token (and a SHA-256 imprint itself) is attested, so it seals into T1 and T2: see GET /v1/timestamp/{serial}. Access: public by default (counted by the per-address public limit); with ATTESTD_TSA_ACCESS=key an API key with the `timestamp` scope, as Bearer or as the password of HTTP Basic."
      )
  )
  .add(
    HttpApiEndpoint.get("certificateChain", "/timestamp/certchain")
      .addSuccess(HttpApiSchema.Text({ contentType: PEM_CERTIFICATE_CHAIN }))
      .annotate(OpenApi.Summary, "The TSA's certificate chain (PEM, its own certificate first): the trust input for verifying its tokens")
  )
  .add(
    HttpApiEndpoint.get("lookup", "/timestamp/:serial")
      .setPath(SerialPath)
      .addSuccess(TimestampLookup)
      .annotate(OpenApi.Summary, "A token this TSA granted, by serial, with the attestations that register it")
  )
  .add(
    HttpApiEndpoint.get("evidence", "/timestamp/:serial/evidence")
      .setPath(SerialPath)
      .addSuccess(Evidence)
      .annotate(OpenApi.Summary, "The evidence bundle of the token's own attestation (t0; t1 and t2 once reached)")
  )
  .addError(NotFoundEnvelope)
  .annotate(OpenApi.Title, "RFC 3161 time-stamping authority")
{}
