/**
 * Handler of GET /v1/attestations: the calling key's own live claims, newest first.
 * The cursor is opaque to callers: Base64URL of `v1:<registered_at>|<seq>`, the last
 * row of the page before; anything else is a 400.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { requireScope } from "../Auth/Http.js"
import { ValidationError } from "../Domain/Errors.js"
import { formatMicros, parseMicros } from "../Domain/Time.js"
import { LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX } from "./ListApi.js"
import { type ListPosition, ListRepo } from "./ListRepo.js"

const base64url = {
  encode: (s: string) => btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""),
  decode: (s: string): string | undefined => {
    if (!/^[A-Za-z0-9_-]{1,200}$/.test(s)) return undefined
    try {
      return atob(s.replace(/-/g, "+").replace(/_/g, "/"))
    } catch {
      return undefined
    }
  }
}

export const encodeCursor = (p: ListPosition): string => base64url.encode(`v1:${p.registeredAt}|${p.seq}`)

export const decodeCursor = (cursor: string): ListPosition | undefined => {
  const m = /^v1:([^|]+)\|(\d{1,15})$/.exec(base64url.decode(cursor) ?? "")
  if (!m || parseMicros(m[1]!) === undefined) return undefined
  return { registeredAt: m[1]!, seq: Number(m[2]) }
}

/** An ISO 8601 instant with a time zone (`2026-11-27T10:00:00Z`, `…+00:00`, microseconds allowed) in the wire format, or undefined. */
export const wireInstant = (s: string): string | undefined => {
  const wire = parseMicros(s)
  if (wire !== undefined) return s
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?)(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})$/.exec(s)
  if (!m) return undefined
  const millis = Date.parse(`${m[1]}${m[3]}`)
  if (Number.isNaN(millis)) return undefined
  return formatMicros(BigInt(millis) * 1000n + BigInt((m[2] ?? "").padEnd(6, "0")))
}

const invalid = (param: string, message: string) => new ValidationError({ message, details: [{ path: [param], message }] })

export const AttestationListLive = HttpApiBuilder.group(Api, "attestationList", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ListRepo
    return handlers.handle("list", ({ urlParams }) =>
      Effect.gen(function*() {
        const key = yield* requireScope("metadata:read")
        let limit = LIST_LIMIT_DEFAULT
        if (urlParams.limit !== undefined) {
          if (!/^\d{1,4}$/.test(urlParams.limit) || Number(urlParams.limit) < 1 || Number(urlParams.limit) > LIST_LIMIT_MAX) {
            return yield* invalid("limit", `limit must be an integer from 1 to ${LIST_LIMIT_MAX}`)
          }
          limit = Number(urlParams.limit)
        }
        const after = urlParams.cursor === undefined ? undefined : decodeCursor(urlParams.cursor)
        if (urlParams.cursor !== undefined && after === undefined) return yield* invalid("cursor", "invalid cursor")
        const from = urlParams.from === undefined ? undefined : wireInstant(urlParams.from)
        if (urlParams.from !== undefined && from === undefined) return yield* invalid("from", "from must be an ISO 8601 instant with a time zone")
        const to = urlParams.to === undefined ? undefined : wireInstant(urlParams.to)
        if (urlParams.to !== undefined && to === undefined) return yield* invalid("to", "to must be an ISO 8601 instant with a time zone")
        const rows = yield* Effect.orDie(repo.page({ apiKeyId: key.id, limit, after, level: urlParams.level, from, to }))
        const shown = rows.slice(0, limit)
        const last = shown[shown.length - 1]
        return {
          attestations: shown.map((r) => ({ id: r.id, hash_hex: r.hash_hex, level: r.level, timestamp: r.registered_at, source: r.source })),
          next_cursor: rows.length > limit && last !== undefined ? encodeCursor({ registeredAt: last.registered_at, seq: last.seq }) : null
        }
      }))
  })).pipe(Layer.provide(ListRepo.Default))
