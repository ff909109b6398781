/**
 * The HttpApi side of authentication: the bearer security handler and scope checks.
 * The Authenticator service itself lives in ./Authenticator.ts.
 */
import { Effect, Either, Layer, Redacted } from "effect"
import { Forbidden } from "../Domain/Errors.js"
import { RequestMetas } from "./RequestMeta.js"
import { Authentication, CurrentPrincipal, type Principal } from "./Api.js"
import { Authenticator } from "./Authenticator.js"
import { type ApiKey, hasScope, type Scope } from "./Domain.js"

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.map(Effect.all([Authenticator, RequestMetas]), ([auth, metas]) => ({
    // The edge has already authenticated requests with a body (before reading it): count them once.
    bearer: (token: Redacted.Redacted<string>) =>
      Effect.flatMap(metas.current, (meta) =>
        meta.principal !== undefined ? Effect.succeed(meta.principal) : auth.authenticate(Redacted.value(token).trim()))
  }))
)

/**
 * The key of `principal` when it holds `scope`, else 403 FORBIDDEN. Pure, for
 * callers that hold the principal (the edge).
 */
export const keyWithScope = (principal: Principal, scope: Scope): Either.Either<ApiKey, Forbidden> =>
  principal._tag === "ApiKey" && hasScope(principal.key, scope)
    ? Either.right(principal.key)
    : Either.left(
      principal._tag === "ShareToken"
        ? new Forbidden({ message: "share tokens are read-only and limited to metadata and tags reads" })
        : new Forbidden({ message: `this key lacks the ${scope} scope`, details: { required_scope: scope } })
    )

/** The key of `principal` when it holds one of `scopes`, else 403 FORBIDDEN. */
export const keyWithAnyScope = (principal: Principal, scopes: ReadonlyArray<Scope>): Either.Either<ApiKey, Forbidden> =>
  principal._tag === "ApiKey" && scopes.some((s) => hasScope(principal.key, s))
    ? Either.right(principal.key)
    : Either.left(
      new Forbidden({ message: `this key lacks any of the scopes ${scopes.join(", ")}`, details: { required_scope: scopes } })
    )

/** The calling key when it holds `scope`, else 403 FORBIDDEN. */
export const requireScope = (scope: Scope) => Effect.flatMap(CurrentPrincipal, (principal) => keyWithScope(principal, scope))

/** The calling key when it holds one of `scopes`. */
export const requireAnyScope = (scopes: ReadonlyArray<Scope>) =>
  Effect.flatMap(CurrentPrincipal, (principal) => keyWithAnyScope(principal, scopes))
