/** Handlers of tags. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Clock, Effect } from "effect"
import { Api } from "../Api.js"
import { findAttestation } from "../Attestations/Find.js"
import { requireScope } from "../Auth/Http.js"
import { readerKeyId } from "../Claims/Access.js"
import { ClaimRepo } from "../Claims/Repo.js"
import { NotFound, ValidationError } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { TAG_QUERY_LIMIT_DEFAULT, TAGS_PER_CLAIM_MAX } from "./Domain.js"
import { ClaimGone, TagRepo, TooManyTags } from "./Repo.js"

const encodeCursor = (after: number) => Buffer.from(`s:${after}`).toString("base64url")
const decodeCursor = (cursor: string) => {
  const m = /^s:(\d{1,16})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"))
  return m ? Number(m[1]) : undefined
}

export const TagsLive = HttpApiBuilder.group(Api, "tags", (handlers) =>
  Effect.gen(function*() {
    const tags = yield* TagRepo
    const claims = yield* ClaimRepo

    const ownClaim = (rawId: string, keyId: string) =>
      Effect.gen(function*() {
        const a = yield* findAttestation(rawId)
        const claim = yield* Effect.orDie(claims.liveClaim(keyId, a.seq))
        if (!claim) return yield* new NotFound({ message: `you hold no claim on attestation ${a.id}` })
        return claim
      })

    return handlers
      .handle("putTags", ({ path, payload }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("tags:write")
          const claim = yield* ownClaim(path.id, key.id)
          const keys = payload.tags.map((t) => t.key)
          if (new Set(keys).size !== keys.length) {
            return yield* new ValidationError({ message: "each tag key may appear once per request", details: [{ path: ["tags"], message: "duplicate key" }] })
          }
          const now = formatMillis(yield* Clock.currentTimeMillis)
          const result = yield* tags.upsert(claim, payload.tags, TAGS_PER_CLAIM_MAX, now).pipe(
            Effect.catchAll((e): Effect.Effect<never, ValidationError | NotFound> => {
              if (e instanceof TooManyTags) {
                return Effect.fail(
                  new ValidationError({
                    message: `at most ${TAGS_PER_CLAIM_MAX} tags per attestation per key; nothing was changed`,
                    details: [{ path: ["tags"], message: `would exceed ${TAGS_PER_CLAIM_MAX}` }]
                  })
                )
              }
              if (e instanceof ClaimGone) return Effect.fail(new NotFound({ message: "you hold no claim on this attestation" }))
              return Effect.die(e)
            })
          )
          return { tags: result }
        }))
      .handle("getTags", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const keyId = yield* readerKeyId(a, "tags:read")
          const claim = yield* Effect.orDie(claims.liveClaim(keyId, a.seq))
          if (!claim) return yield* new NotFound({ message: `no claim on attestation ${a.id}` })
          return { tags: yield* Effect.orDie(tags.forClaim(claim.id)) }
        }))
      .handle("deleteTag", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("tags:write")
          const claim = yield* ownClaim(path.id, key.id)
          if (!(yield* Effect.orDie(tags.remove(claim.id, path.key)))) {
            return yield* new NotFound({ message: `no tag ${path.key.slice(0, 80)} on this claim` })
          }
          return { deleted: true as const }
        }))
      .handle("queryTags", ({ payload }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("tags:read")
          const after = payload.cursor === undefined ? 0 : decodeCursor(payload.cursor)
          if (after === undefined) return yield* new ValidationError({ message: "invalid cursor", details: [{ path: ["cursor"], message: "invalid" }] })
          const limit = payload.limit ?? TAG_QUERY_LIMIT_DEFAULT
          const page = yield* Effect.orDie(tags.query(key.id, payload.filter.and, after, limit))
          return {
            attestations: page.items,
            count: page.items.length,
            next_cursor: page.nextAfter === undefined ? null : encodeCursor(page.nextAfter)
          }
        }))
  }))
