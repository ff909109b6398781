/**
 * Whose claim a request may read or change: the calling key's own (with the
 * scope), or — for reads — the creating key's claim through a share token that
 * lists the attestation, each use counted atomically and logged.
 */
import { Clock, Effect } from "effect"
import type { Attestation } from "../Attestations/Domain.js"
import { CurrentPrincipal } from "../Auth/Api.js"
import { requireScope } from "../Auth/Http.js"
import type { Scope } from "../Auth/Domain.js"
import { AuthError, Forbidden } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { RequestMetas } from "../Auth/RequestMeta.js"
import { ShareTokenRepo } from "../Auth/ShareTokenRepo.js"

export const readerKeyId = (a: Attestation, scope: Scope) =>
  Effect.gen(function*() {
    const principal = yield* CurrentPrincipal
    if (principal._tag === "ApiKey") return (yield* requireScope(scope)).id
    const token = principal.token
    if (!token.attestationIds.includes(a.id)) {
      return yield* new Forbidden({ message: "this share token does not cover that attestation" })
    }
    const repo = yield* ShareTokenRepo
    const now = formatMillis(yield* Clock.currentTimeMillis)
    if (!(yield* Effect.orDie(repo.consume(token.id, now)))) {
      return yield* new AuthError({ message: "share token is expired, revoked or exhausted" })
    }
    const meta = yield* (yield* RequestMetas).current
    yield* Effect.orDie(repo.logAccess(token.id, { at: now, client_ip: meta.clientIp, attestation_id: a.id, path: meta.path }))
    return token.apiKeyId
  })
