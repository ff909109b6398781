/** The bearer-key middleware contract shared by every authenticated group. */
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as OpenApi from "@effect/platform/OpenApi"
import { Context, Schema } from "effect"
import { AuthErrorEnvelope, ForbiddenEnvelope, QuotaExceededEnvelope, RateLimitedEnvelope } from "../Http/Envelope.js"
import type { ShareToken } from "./ShareTokenRepo.js"
import type { AppConfigShape } from "../Platform/Config.js"
import type { ApiKey, Scope } from "./Domain.js"

/** Who is calling: an API key, or a share token (read-only, for the attestations it lists). */
export type Principal =
  | { readonly _tag: "ApiKey"; readonly key: ApiKey }
  | { readonly _tag: "ShareToken"; readonly token: ShareToken }

export class CurrentPrincipal extends Context.Tag("Auth/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

export const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    "API key (`atk_live_…` / `atk_test_…`) as `Authorization: Bearer <key>`; each operation names the scope it needs. Share tokens (`shr_…`) are accepted on GET …/metadata and GET …/tags for the attestations they list."
  )
)

/**
 * Documents the scopes an operation needs: OpenAPI 3.1 allows role names in a
 * non-OAuth security requirement; alternatives are OR-ed, as the checks are.
 */
export const requiredScopes = (...alternatives: ReadonlyArray<Scope>) => ({
  security: alternatives.map((scope) => ({ bearer: [scope] })),
  "x-required-scopes": alternatives
})

/**
 * An endpoint public or keyed by configuration (the time-stamping authority's
 * ATTESTD_TSA_ACCESS): keyed when the function says so for the running
 * configuration. Keyed, it takes the key as `Authorization: Bearer <key>` or as
 * the password of HTTP Basic (the user name is ignored: RFC 3161 clients that
 * can send credentials at all send Basic), holding one of the scopes it documents.
 */
export class ConfiguredAccess extends Context.Tag("Auth/ConfiguredAccess")<ConfiguredAccess, (config: AppConfigShape) => boolean>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Auth/Authentication", {
  // Every group behind this middleware documents these envelopes through it.
  failure: Schema.Union(AuthErrorEnvelope, ForbiddenEnvelope, RateLimitedEnvelope, QuotaExceededEnvelope),
  provides: CurrentPrincipal,
  security: { bearer }
}) {}
