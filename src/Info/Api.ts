/** HTTP contract of the public service endpoints: info, health, stats, keys, test vectors. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Jwk } from "../Domain/Jwk.js"
import { NotFoundEnvelope, ServiceUnavailableEnvelope } from "../Http/Envelope.js"

export const Assurance = Schema.Struct({
  identifier: Schema.Literal("service-public-assurance-v1"),
  t1_cms_pki_checks: Schema.Literal("NOT_PERFORMED"),
  t2_bitcoin_checks: Schema.Literal("NOT_PERFORMED"),
  qualification: Schema.Literal("UNVERIFIED")
})

export const InfoResponse = Schema.Struct({
  name: Schema.Literal("attestd"),
  version: Schema.String,
  api_version: Schema.Literal("v1"),
  mode: Schema.Literal("demo", "production"),
  environment: Schema.Literal("test", "production"),
  features: Schema.Array(Schema.String),
  signing_key_ids: Schema.Array(Schema.String),
  current_signing_key_id: Schema.String,
  tiers: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  assurance: Assurance,
  assurance_notice: Schema.String,
  clock: Schema.Literal("unmonitored", "disciplined", "untrusted").annotations({
    description: "The clock RFC 3161 tokens are stamped with: unmonitored (no ATTESTD_NTP_SERVERS, taken as trusted), " +
      "disciplined (the NTP servers agree within the tolerance) or untrusted (POST /v1/timestamp answers timeNotAvailable)"
  })
}).annotations({ identifier: "InfoResponse" })

export const HealthCheckDetail = Schema.Struct({
  status: Schema.Literal("ok", "degraded", "unhealthy"),
  reason: Schema.String,
  since: Schema.String.annotations({ description: "when the run of failures began" })
}).annotations({ identifier: "HealthCheckDetail" })

export const ClockCheckDetail = Schema.Struct({
  status: Schema.Literal("ok", "degraded"),
  offset_ms: Schema.NullOr(Schema.Number).annotations({
    description: "median offset (server − local) of the NTP servers that answered the last poll, ms; null when none did"
  }),
  half_round_trip_ms: Schema.NullOr(Schema.Number).annotations({ description: "half the median round trip, ms: what the offset may be wrong by" }),
  tolerance_ms: Schema.Number,
  checked_at: Schema.NullOr(Schema.String).annotations({ description: "when the last poll finished; null before the first" }),
  reason: Schema.optional(Schema.String)
}).annotations({
  identifier: "ClockCheckDetail",
  description: "checks.clock, present when ATTESTD_NTP_SERVERS is set: degraded while the clock is not trusted (POST /v1/timestamp answers timeNotAvailable; attests go on)"
})

export const HealthResponse = Schema.Struct({
  status: Schema.Literal("ok", "degraded", "unhealthy").annotations({
    description: "degraded (still HTTP 200): a background worker (sealing, anchoring, upgrading) has failed for longer than two of its windows, " +
      "or the clock is not trusted (no time-stamp tokens); the check says why"
  }),
  checks: Schema.Record({ key: Schema.String, value: Schema.Union(Schema.String, HealthCheckDetail, ClockCheckDetail) })
}).annotations({ identifier: "HealthResponse" })

export const StatsResponse = Schema.Struct({
  total_attestations: Schema.Int,
  by_level: Schema.Struct({ T0: Schema.Int, T1: Schema.Int, T2: Schema.Int }),
  batches: Schema.Int,
  daily_roots: Schema.Int
}).annotations({ identifier: "StatsResponse" })

export const TsaCertificatesResponse = Schema.Struct({
  certificates: Schema.Array(Schema.Struct({
    provider: Schema.String,
    pem: Schema.String.annotations({ description: "one X.509 certificate, PEM" })
  }))
}).annotations({ identifier: "TsaCertificatesResponse" })

export { Jwk }

export class InfoApi extends HttpApiGroup.make("info")
  .add(HttpApiEndpoint.get("info", "/info").addSuccess(InfoResponse).annotate(OpenApi.Summary, "API information"))
  .add(
    HttpApiEndpoint.get("healthz", "/healthz")
      .addSuccess(HealthResponse)
      .addError(ServiceUnavailableEnvelope)
      .annotate(OpenApi.Summary, "Health probe: 200 when healthy, 503 otherwise")
  )
  .add(HttpApiEndpoint.get("stats", "/stats").addSuccess(StatsResponse).annotate(OpenApi.Summary, "Aggregate counts"))
  .add(
    HttpApiEndpoint.get("keys", "/keys")
      .addSuccess(Schema.Struct({ keys: Schema.Array(Jwk) }))
      .annotate(OpenApi.Summary, "All active public signing keys (JWK)")
  )
  .add(
    HttpApiEndpoint.get("key", "/keys/:key_id")
      .setPath(Schema.Struct({ key_id: Schema.String }))
      .addSuccess(Jwk)
      .addError(NotFoundEnvelope)
      .annotate(OpenApi.Summary, "One public signing key (JWK)")
  )
  .add(
    HttpApiEndpoint.get("tsaCertificates", "/tsa/certificates")
      .addSuccess(TsaCertificatesResponse)
      .annotate(OpenApi.Summary, "The TSA trust anchors this instance validates every RFC 3161 token against (PEM)")
      .annotate(
        OpenApi.Description,
        "A trust input for verifiers: T1 is anchored when the token's certificate chains (at genTime) to one of these. Empty when the instance has no ATTESTD_TSA_CA_FILE. In demo mode: the embedded demo TSA's root."
      )
  )
  .add(
    HttpApiEndpoint.get("testVectors", "/test-vectors.json")
      .addSuccess(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
      .annotate(OpenApi.Summary, "Worked examples for client authors; explicitly NOT acceptance vectors")
  )
  .annotate(OpenApi.Title, "Service")
{}
