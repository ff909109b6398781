/** The bearer-key middleware contract shared by every authenticated group. */
import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import { AuthError, Forbidden, QuotaExceeded, RateLimited } from "../Domain/Errors.js"
import type { ApiKey } from "./Domain.js"

/** Who is calling: an API key (share tokens join in the claims issue). */
export type Principal = { readonly _tag: "ApiKey"; readonly key: ApiKey }

export class CurrentPrincipal extends Context.Tag("Auth/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

export const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    "API key (`atk_live_…` / `atk_test_…`) as `Authorization: Bearer <key>`. Each operation names the scope it needs."
  )
)

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Auth/Authentication", {
  failure: Schema.Union(AuthError, Forbidden, RateLimited, QuotaExceeded),
  provides: CurrentPrincipal,
  security: { bearer }
}) {}
