/**
 * The live-list check of the public match, shared by its handler and the edge:
 * the edge runs it before it reads the body (up to 4 MB of derived values), so
 * a match against an unknown, expired or revoked list costs one indexed lookup.
 */
import { Clock, Effect, Layer } from "effect"
import { excerpt, NotFound } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { BodyGates } from "../Http/BodyGates.js"
import { CensusRepo, type DerivedList } from "./Repo.js"

export const listStatus = (l: DerivedList, now: string): "active" | "expired" | "revoked" =>
  l.revokedAt !== null ? "revoked" : l.expiresAt <= now ? "expired" : "active"

/** A list that can be matched now, or 404 (unknown, expired and revoked lists look the same). */
export const liveList = (repo: CensusRepo, id: string) =>
  Effect.gen(function*() {
    const l = yield* Effect.orDie(repo.listById(id))
    const at = formatMillis(yield* Clock.currentTimeMillis)
    if (!l || listStatus(l, at) !== "active") return yield* new NotFound({ message: `derived list ${excerpt(id, 80)} not found` })
    return l
  })

export const DerivedListGatesLive = Layer.effect(
  BodyGates,
  Effect.map(CensusRepo, (repo) =>
    new Map([
      ["derivedListsPublic.match", (params: Readonly<Record<string, string>>) => Effect.asVoid(liveList(repo, params.list_id ?? ""))]
    ]))
)
