/** Handlers of organisation inventory and derived lists. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Clock, Effect } from "effect"
import { createHash } from "node:crypto"
import { Api } from "../Api.js"
import { requireScope } from "../Auth/Http.js"
import { type ApiKey, digestsEqual, hashSecret, type Scope } from "../Auth/Domain.js"
import { RateLimiter } from "../Auth/RateLimiter.js"
import { AuthError, Forbidden, NotFound, RateLimited, ValidationError } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { RequestMetas } from "../Auth/RequestMeta.js"
import { AppConfig } from "../Platform/Config.js"
import { Signer } from "../Platform/Signer.js"
import {
  DERIVED_LIST_MAX_ITEMS,
  derivedValue,
  MATCHES_PER_HOUR,
  newListId,
  newListKey,
  newScanId,
  orgIdHash,
  SCANS_PER_HOUR,
  signedListPayload
} from "./Domain.js"
import { listStatus, liveList as liveListOf } from "./ListGate.js"
import { CensusRepo, type DerivedList } from "./Repo.js"

/** The calling key when it holds `scope` and belongs to an organisation. */
const orgKey = (scope: Scope) =>
  Effect.flatMap(requireScope(scope), (key) =>
    key.orgId === null
      ? Effect.fail(new Forbidden({ message: "this operation needs a key that belongs to an organisation (org_id)" }))
      : Effect.succeed(key as ApiKey & { readonly orgId: string }))

const info = (l: DerivedList, now: string) => ({
  id: l.id,
  label: l.label,
  item_count: l.itemCount,
  created_at: l.createdAt,
  expires_at: l.expiresAt,
  revoked_at: l.revokedAt,
  status: listStatus(l, now),
  signing_key_id: l.signingKeyId
})

const hourly = (limiter: RateLimiter["Type"], bucket: string, limit: number, what: string) =>
  Effect.gen(function*() {
    const verdict = yield* limiter.hit(bucket, limit, 3600)
    if (!verdict.allowed) {
      return yield* new RateLimited({ message: `${what}: at most ${limit} per hour`, rateLimit: verdict })
    }
  })

export const CensusLive = HttpApiBuilder.group(Api, "census", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* CensusRepo
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const signer = yield* Signer
    const now = Effect.map(Clock.currentTimeMillis, formatMillis)

    const orgList = (orgId: string, id: string) =>
      Effect.flatMap(Effect.orDie(repo.listById(id)), (l) =>
        l && l.orgId === orgId ? Effect.succeed(l) : Effect.fail(new NotFound({ message: `derived list ${id.slice(0, 80)} not found` })))

    return handlers
      .handle("scan", ({ payload }) =>
        Effect.gen(function*() {
          const key = yield* orgKey("scan")
          if (payload.hashes.length > config.scanMaxHashes) {
            return yield* new ValidationError({
              message: `at most ${config.scanMaxHashes} hashes per scan`,
              details: [{ path: ["hashes"], message: `${payload.hashes.length} given` }]
            })
          }
          yield* hourly(limiter, `scan:${key.id}`, SCANS_PER_HOUR, "scans")
          const hashes = [...new Set(payload.hashes)]
          const matches = yield* Effect.orDie(repo.scan(key.orgId, key.id, hashes))
          return {
            scan_id: newScanId(),
            matched: matches.length,
            total_scanned: hashes.length,
            match_rate: hashes.length === 0 ? 0 : matches.length / hashes.length,
            matches
          }
        }))
      .handle("inventoryStats", () =>
        Effect.gen(function*() {
          const key = yield* orgKey("batch")
          const s = yield* Effect.orDie(repo.stats(key.orgId))
          return {
            org_id_hash: orgIdHash(key.orgId),
            total_claims: s.totalClaims,
            unique_hashes: s.uniqueHashes,
            first_claim: s.firstClaim,
            last_claim: s.lastClaim,
            claims_by_month: s.claimsByMonth
          }
        }))
      .handle("createList", ({ payload }) =>
        Effect.gen(function*() {
          const key = yield* orgKey("census")
          if ((payload.hashes === undefined) === (payload.tag_filter === undefined)) {
            return yield* new ValidationError({ message: "send exactly one of hashes or tag_filter" })
          }
          const hashes = payload.hashes !== undefined
            ? [...new Set(payload.hashes)]
            : yield* Effect.orDie(repo.hashesByTags(key.orgId, key.id, payload.tag_filter!.and, DERIVED_LIST_MAX_ITEMS + 1))
          if (hashes.length > DERIVED_LIST_MAX_ITEMS) {
            return yield* new ValidationError({ message: `a derived list holds at most ${DERIVED_LIST_MAX_ITEMS} items` })
          }
          const listKey = newListKey()
          const values = [...new Set(hashes.map((h) => derivedValue(listKey, h)))].sort()
          const payloadText = signedListPayload(values)
          const t = yield* Clock.currentTimeMillis
          const signed = yield* signer.sign(payloadText, formatMillis(t))
          const list = {
            id: newListId(),
            apiKeyId: key.id,
            orgId: key.orgId,
            label: payload.label ?? null,
            keyHash: hashSecret(listKey),
            itemCount: values.length,
            signingKeyId: signed.kid,
            signature: signed.signature,
            signedPayloadSha256: createHash("sha256").update(payloadText, "utf8").digest("hex"),
            createdAt: formatMillis(t),
            expiresAt: formatMillis(t + payload.expires_in_hours * 3600_000)
          }
          yield* Effect.orDie(repo.createList(list, values))
          return {
            id: list.id,
            list_key: listKey,
            item_count: list.itemCount,
            expires_at: list.expiresAt,
            label: list.label
          }
        }))
      .handle("lists", () =>
        Effect.gen(function*() {
          const key = yield* orgKey("census")
          const at = yield* now
          return { derived_lists: (yield* Effect.orDie(repo.listsOfOrg(key.orgId))).map((l) => info(l, at)) }
        }))
      .handle("getList", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* orgKey("census")
          return info(yield* orgList(key.orgId, path.list_id), yield* now)
        }))
      .handle("listAccessLog", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* orgKey("census")
          const l = yield* orgList(key.orgId, path.list_id)
          return { access_log: yield* Effect.orDie(repo.accessLog(l.id)) }
        }))
      .handle("revokeList", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* orgKey("census")
          const l = yield* orgList(key.orgId, path.list_id)
          yield* Effect.orDie(repo.revokeList(l.id, yield* now))
          return { id: l.id, revoked: true as const }
        }))
  }))

export const DerivedListsPublicLive = HttpApiBuilder.group(Api, "derivedListsPublic", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* CensusRepo
    const limiter = yield* RateLimiter
    const metas = yield* RequestMetas

    const liveList = (id: string) => liveListOf(repo, id)

    return handlers
      .handle("match", ({ path, payload }) =>
        Effect.gen(function*() {
          const l = yield* liveList(path.list_id)
          const meta = yield* metas.current
          const at = formatMillis(yield* Clock.currentTimeMillis)
          const log = (outcome: string, matched: number | null, total: number | null) =>
            Effect.orDie(repo.logAccess(l.id, { at, clientIp: meta.clientIp, outcome, matched, total }))
          // Wrong keys are limited per client address, so strangers cannot spend the list's own budget.
          if (!/^[0-9a-f]{64}$/.test(payload.list_key) || !digestsEqual(hashSecret(payload.list_key), l.keyHash)) {
            const failures = yield* limiter.hit(`matchfail:${l.id}:${meta.clientIp}`, MATCHES_PER_HOUR, 3600)
            yield* log(failures.allowed ? "unauthorized" : "rate_limited", null, null)
            if (!failures.allowed) {
              return yield* new RateLimited({ message: `too many failed matches from this address`, rateLimit: failures })
            }
            return yield* new AuthError({ message: "wrong list_key for this derived list" })
          }
          const verdict = yield* limiter.hit(`match:${l.id}`, MATCHES_PER_HOUR, 3600)
          if (!verdict.allowed) {
            yield* log("rate_limited", null, null)
            return yield* new RateLimited({ message: `at most ${MATCHES_PER_HOUR} matches per hour per list`, rateLimit: verdict })
          }
          const values = [...new Set(payload.values)]
          const matched = yield* Effect.orDie(repo.countMatches(l.id, values))
          yield* log("ok", matched, values.length)
          return { matched, total: values.length }
        }))
      .handle("signature", ({ path }) =>
        Effect.map(liveList(path.list_id), (l) => ({
          list_id: l.id,
          signing_key_id: l.signingKeyId,
          signature: l.signature,
          signed_payload_sha256: l.signedPayloadSha256
        })))
  }))
