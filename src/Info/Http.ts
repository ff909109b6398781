/** Handlers for info, health, stats, keys and the test vectors. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Duration, Effect } from "effect"
import { Api } from "../Api.js"
import { PublicReads } from "../Attestations/PublicReads.js"
import { AttestationRepo } from "../Attestations/Repo.js"
import { NotFound } from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { Signer } from "../Platform/Signer.js"
import { SigningKeys } from "../Platform/SigningKeys.js"
import { derToPem, pemToDers } from "../Platform/Tsa/Rfc3161.js"
import { TsaClient } from "../Platform/Tsa/TsaClient.js"
import { HealthChecks } from "../Platform/HealthChecks.js"
import { SERVICE_VERSION } from "../Domain/Version.js"
import { testVectors } from "./TestVectors.js"
import { envelopeBody } from "../Http/Envelope.js"
import { ClockDiscipline } from "../Timestamping/Clock.js"

const CLOCK_NAMES = { Unmonitored: "unmonitored", Trusted: "disciplined", Untrusted: "untrusted" } as const

export const ASSURANCE = {
  identifier: "service-public-assurance-v1",
  t1_cms_pki_checks: "NOT_PERFORMED",
  t2_bitcoin_checks: "NOT_PERFORMED",
  qualification: "UNVERIFIED"
} as const

export const ASSURANCE_NOTICE =
    "Tier status recorded by this service is not a verification result. The service performs no live CMS/PKI checks of T1 tokens for you and no Bitcoin checks of T2 proofs; verify the evidence independently."

export const FEATURES = [
  "t0_signatures",
  "batch_attest",
  "batch_verify",
  "public_verification",
  "evidence_bundles",
  "legacy_numeric_ids",
  "rate_limits",
  "monthly_quotas",
  "ip_allowlists",
  "claims",
  "client_encrypted_extra_data",
  "tags",
  "share_tokens",
  "webhooks",
  "inventory_scan",
  "inventory_stats",
  "derived_lists",
  "brands"
] as const

export const InfoLive = HttpApiBuilder.group(Api, "info", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const keys = yield* SigningKeys
    const reads = yield* PublicReads
    const repo = yield* AttestationRepo
    const health = yield* HealthChecks
    const signer = yield* Signer
    // A constant document: encoded once, each request answers the same bytes.
    const vectors = new TextEncoder().encode(JSON.stringify(testVectors()))
    const tsa = yield* TsaClient
    const clock = yield* ClockDiscipline
    const tsaCertificates = {
      certificates: tsa.trustAnchorsPem === undefined ? [] : pemToDers(tsa.trustAnchorsPem).map((der) => ({ provider: tsa.provider, pem: derToPem(der) }))
    }
    return handlers
      .handle("info", () =>
        // Every published key, as GET /v1/keys lists them (retired ones too); current_signing_key_id signs.
        Effect.map(Effect.all([keys.listed, signer.currentKid, clock.state]), ([jwks, currentKid, clockState]) => ({
          name: "attestd" as const,
          version: SERVICE_VERSION,
          api_version: "v1" as const,
          mode: config.mode,
          environment: config.environment,
          features: [...FEATURES, ...health.features()],
          signing_key_ids: jwks.map((k) => k.kid),
          current_signing_key_id: currentKid,
          tiers: health.tiers(),
          assurance: ASSURANCE,
          assurance_notice: ASSURANCE_NOTICE,
          clock: CLOCK_NAMES[clockState._tag]
        })))
      .handle("healthz", () =>
        Effect.map(health.run.pipe(Effect.timeout(Duration.seconds(5)), Effect.orElseSucceed(() => ({ ok: false, degraded: false, checks: { timeout: "unhealthy" } }))), ({ ok, degraded, checks }) =>
          ok
            ? { status: degraded ? "degraded" as const : "ok" as const, checks }
            // Kept raw: the 503 body is the error envelope plus the probe's own `status` and `checks` at the top
            // level (what load balancers read), which ServiceUnavailableEnvelope cannot carry.
            : HttpServerResponse.unsafeJson(
              { ...envelopeBody("SERVICE_UNAVAILABLE", "one or more health checks failed", { checks }), status: "unhealthy", checks },
              { status: 503 }
            )))
      .handle("stats", () =>
        Effect.gen(function*() {
          const byLevel = yield* Effect.orDie(repo.countsByLevel)
          const counts = yield* health.counts
          return {
            total_attestations: byLevel.T0 + byLevel.T1 + byLevel.T2,
            by_level: byLevel,
            ...counts
          }
        }))
      // Public reads: the replica first (a key it does not list yet, from the primary).
      .handle("keys", () =>
        Effect.map(reads.find("keys", () => Effect.flatMap(SigningKeys, (keys) => keys.listed)), (jwks) => ({ keys: jwks ?? [] })))
      .handle("key", ({ path }) =>
        Effect.flatMap(
          reads.find(path.key_id.trim(), (kid) => Effect.flatMap(SigningKeys, (keys) => Effect.map(keys.listed, (jwks) => jwks.find((j) => j.kid === kid)))),
          (k) => k ? Effect.succeed(k) : Effect.fail(new NotFound({ message: `signing key ${path.key_id.slice(0, 80)} not found` }))
        ))
      .handle("tsaCertificates", () => Effect.succeed(tsaCertificates))
      .handle("testVectors", () => Effect.succeed(HttpServerResponse.uint8Array(vectors, { contentType: "application/json" })))
  }))
