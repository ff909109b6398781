/** The whole HTTP contract: every group, served under /v1 and as unprefixed aliases. */
import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
import { AttestationsApi, LookupApi, VerificationApi } from "./Attestations/Api.js"
import { AttestationListApi } from "./Attestations/ListApi.js"
import { InfoApi } from "./Info/Api.js"
import { ProofsApi } from "./Sealing/Api.js"
import { AnchorsApi, SimulatedChainApi } from "./Anchoring/Api.js"
import { ClaimsApi } from "./Claims/Api.js"
import { TagsApi } from "./Tags/Api.js"
import { ShareTokensApi } from "./ShareTokens/Api.js"
import { WebhooksApi } from "./Webhooks/Api.js"
import { CensusApi, DerivedListsPublicApi } from "./Census/Api.js"
import { BrandApi } from "./Brand/Api.js"
import { TimestampingApi } from "./Timestamping/Api.js"
import { SERVICE_VERSION } from "./Domain/Version.js"
import { InternalErrorEnvelope, PayloadTooLargeEnvelope, ServiceUnavailableEnvelope } from "./Http/Envelope.js"
import { openApiFixups } from "./Server/OpenApiFixups.js"

export class Api extends HttpApi.make("attestd")
  .add(AttestationsApi)
  .add(VerificationApi)
  .add(LookupApi)
  .add(AttestationListApi)
  .add(ProofsApi)
  .add(AnchorsApi)
  .add(SimulatedChainApi)
  .add(ClaimsApi)
  .add(TagsApi)
  .add(ShareTokensApi)
  .add(WebhooksApi)
  .add(CensusApi)
  .add(DerivedListsPublicApi)
  .add(BrandApi)
  .add(TimestampingApi)
  .add(InfoApi)
  .addError(PayloadTooLargeEnvelope)
  .addError(InternalErrorEnvelope)
  .addError(ServiceUnavailableEnvelope)
  .annotate(OpenApi.Title, "attestd")
  .annotate(OpenApi.Version, SERVICE_VERSION)
  .annotate(
    OpenApi.Description,
    "Content-blind attestation service. Every path is served under /v1 (the stable contract) and without the prefix as a compatibility alias. Errors use the envelope {error: true, code, message, details}; every response carries X-Request-Id."
  )
  .annotate(OpenApi.Transform, openApiFixups)
{}
