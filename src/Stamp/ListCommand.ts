/**
 * `attestd list`: the calling key's own attestations (GET /v1/attestations), newest first,
 * every page followed (or up to --max), printed as one JSON object
 * `{attestations: [{id, hash_hex, level, timestamp, source}], next_cursor}`; next_cursor is
 * non-null when --max stopped before the end. Exit 0 listed, 1 the server refused or failed,
 * 2 bad invocation.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Option } from "effect"
import { AttestdError, createClient, type ListAttestationsQuery } from "../Client/Client.js"
import { errorMessage } from "./Files.js"
import { keyOf, keyOption, serverOf, serverOption, shell, UsageError } from "./Command.js"

const PAGE_MAX = 1000

export const listCommand = Command.make(
  "list",
  {
    server: serverOption,
    key: keyOption,
    level: Options.choice("level", ["T0", "T1", "T2"]).pipe(Options.withDescription("only attestations at this level"), Options.optional),
    from: Options.text("from").pipe(Options.withDescription("only attestations at or after this instant (ISO 8601 with a time zone, e.g. 2026-11-01T00:00:00Z)"), Options.optional),
    to: Options.text("to").pipe(Options.withDescription("only attestations before this instant (ISO 8601 with a time zone)"), Options.optional),
    limit: Options.integer("limit").pipe(Options.withDescription(`items per request, 1 to ${PAGE_MAX} (default 100)`), Options.optional),
    max: Options.integer("max").pipe(Options.withDescription("stop after this many items; next_cursor then continues the listing"), Options.optional),
    cursor: Options.text("cursor").pipe(Options.withDescription("continue from the next_cursor of an earlier listing"), Options.optional)
  },
  (a) =>
    shell("list", async (io) => {
      const server = serverOf(a.server, io)
      const limit = Option.getOrUndefined(a.limit)
      if (limit !== undefined && (limit < 1 || limit > PAGE_MAX)) throw new UsageError(`--limit must be from 1 to ${PAGE_MAX}`)
      const max = Option.getOrUndefined(a.max)
      if (max !== undefined && max < 1) throw new UsageError("--max must be at least 1")
      const apiKey = keyOf(a.key, io)
      if (apiKey === undefined) throw new UsageError("no API key: give --key or set ATTESTD_API_KEY")
      const base: { -readonly [K in keyof ListAttestationsQuery]: ListAttestationsQuery[K] } = {}
      if (Option.isSome(a.level)) base.level = a.level.value as "T0" | "T1" | "T2"
      if (Option.isSome(a.from)) base.from = a.from.value
      if (Option.isSome(a.to)) base.to = a.to.value
      // The first page without retries: a wrong --server fails at once, with its reason.
      const first = createClient({ baseUrl: server, apiKey, retry: false })
      const rest = createClient({ baseUrl: server, apiKey })
      const items: Array<unknown> = []
      let cursor: string | null = Option.getOrNull(a.cursor)
      try {
        for (let page = 0;; page++) {
          const want = max === undefined ? limit : Math.min(limit ?? 100, max - items.length)
          const reply = await (page === 0 ? first : rest).listAttestations({
            ...base,
            ...(want !== undefined ? { limit: want } : {}),
            ...(cursor !== null ? { cursor } : {})
          })
          items.push(...reply.attestations)
          cursor = reply.next_cursor
          if (cursor === null || (max !== undefined && items.length >= max)) break
        }
      } catch (e) {
        if (e instanceof AttestdError && e.status === 400) throw new UsageError(e.message)
        throw new Error(errorMessage(e))
      }
      io.out(JSON.stringify({ attestations: items, next_cursor: cursor }))
      return 0
    })
).pipe(Command.withDescription("list your API key's own attestations (GET /v1/attestations, scope metadata:read), newest first, as JSON; exit 0 listed, 1 refused or failed, 2 bad invocation"))
