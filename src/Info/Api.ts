/** HTTP contract of the public service endpoints: info, health, stats, keys, test vectors. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
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
  assurance_notice: Schema.String
}).annotations({ identifier: "InfoResponse" })

export const HealthCheckDetail = Schema.Struct({
  status: Schema.Literal("ok", "degraded", "unhealthy"),
  reason: Schema.String,
  since: Schema.String.annotations({ description: "when the run of failures began" })
}).annotations({ identifier: "HealthCheckDetail" })

export const HealthResponse = Schema.Struct({
  status: Schema.Literal("ok", "degraded", "unhealthy").annotations({
    description: "degraded (still HTTP 200): a background worker (sealing, anchoring, upgrading) has failed for longer than two of its windows; its check says why and since when"
  }),
  checks: Schema.Record({ key: Schema.String, value: Schema.Union(Schema.String, HealthCheckDetail) })
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
