/** Handlers of share tokens. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Clock, Effect } from "effect"
import { Api } from "../Api.js"
import { findAttestation } from "../Attestations/Find.js"
import { requireScope } from "../Auth/Http.js"
import { hashSecret } from "../Auth/Domain.js"
import { ClaimRepo } from "../Claims/Repo.js"
import { excerpt, NotFound, ValidationError } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { newShareTokenId, newShareTokenSecret } from "./Domain.js"
import { type ShareToken, ShareTokenRepo, shareTokenState } from "../Auth/ShareTokenRepo.js"

const info = (t: ShareToken, now: string) => ({
  id: t.id,
  attestation_ids: t.attestationIds,
  recipient_label: t.recipientLabel,
  expires_at: t.expiresAt,
  max_uses: t.maxUses,
  uses: t.uses,
  created_at: t.createdAt,
  revoked_at: t.revokedAt,
  status: shareTokenState(t, now)
})

export const ShareTokensLive = HttpApiBuilder.group(Api, "shareTokens", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ShareTokenRepo
    const claims = yield* ClaimRepo
    const now = Effect.map(Clock.currentTimeMillis, formatMillis)

    const owned = (keyId: string, id: string) =>
      Effect.flatMap(Effect.orDie(repo.findOwned(keyId, id)), (t) =>
        t ? Effect.succeed(t) : Effect.fail(new NotFound({ message: `share token ${id.slice(0, 80)} not found` })))

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("share")
          const ids: Array<string> = []
          const missing: Array<string> = []
          for (const raw of new Set(payload.attestation_ids.map((s) => s.trim()))) {
            const a = yield* Effect.either(findAttestation(raw))
            const claim = a._tag === "Right" ? yield* Effect.orDie(claims.liveClaim(key.id, a.right.seq)) : undefined
            if (a._tag === "Left" || !claim) missing.push(raw)
            else if (!ids.includes(a.right.id)) ids.push(a.right.id)
          }
          if (missing.length > 0) {
            return yield* new ValidationError({
              message: "share tokens may only list attestations on which this key holds a claim",
              details: [{ path: ["attestation_ids"], message: "not claimed by this key", ids: missing.map((id) => excerpt(id)) }]
            })
          }
          const t = yield* Clock.currentTimeMillis
          const secret = newShareTokenSecret()
          const token = {
            id: newShareTokenId(),
            tokenHash: hashSecret(secret),
            apiKeyId: key.id,
            attestationIds: ids,
            recipientLabel: payload.recipient_label ?? null,
            expiresAt: formatMillis(t + payload.expires_in * 1000),
            maxUses: payload.max_uses ?? null,
            createdAt: formatMillis(t)
          }
          yield* Effect.orDie(repo.insert(token))
          return {
            id: token.id,
            share_token: secret,
            expires_at: token.expiresAt,
            attestation_ids: ids,
            recipient_label: token.recipientLabel,
            max_uses: token.maxUses
          }
        }))
      .handle("list", () =>
        Effect.gen(function*() {
          const key = yield* requireScope("share")
          const at = yield* now
          return { share_tokens: (yield* Effect.orDie(repo.listOwned(key.id))).map((t) => info(t, at)) }
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("share")
          return info(yield* owned(key.id, path.token_id), yield* now)
        }))
      .handle("revoke", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("share")
          const t = yield* owned(key.id, path.token_id)
          yield* Effect.orDie(repo.revoke(key.id, t.id, yield* now))
          return { id: t.id, revoked: true as const }
        }))
      .handle("accessLog", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("share")
          const t = yield* owned(key.id, path.token_id)
          return { access_log: yield* Effect.orDie(repo.accessLog(t.id)) }
        }))
  }))
