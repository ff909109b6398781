/** Handlers of webhooks. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Clock, Effect } from "effect"
import { Api } from "../Api.js"
import { requireScope } from "../Auth/Http.js"
import { excerpt, NotFound, ValidationError } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { AppConfig } from "../Platform/Config.js"
import { checkWebhookUrl, newSigningSecret, newWebhookId, WEBHOOKS_PER_KEY } from "./Domain.js"
import { WebhookRepo } from "./Repo.js"

export const WebhooksLive = HttpApiBuilder.group(Api, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* WebhookRepo
    const config = yield* AppConfig
    const production = config.mode === "production"
    const notFound = (id: string) => new NotFound({ message: `webhook ${id.slice(0, 80)} not found` })

    return handlers
      .handle("register", ({ payload }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("webhook")
          if ((yield* Effect.orDie(repo.countOwned(key.id))) >= WEBHOOKS_PER_KEY) {
            return yield* new ValidationError({
              message: `a key may hold at most ${WEBHOOKS_PER_KEY} webhooks; delete one first`,
              details: [{ path: [], message: `limit of ${WEBHOOKS_PER_KEY} webhooks per key reached` }]
            })
          }
          const check = yield* Effect.promise(() => checkWebhookUrl(payload.url.trim(), production, config.webhookPorts))
          if (!check.ok) {
            // the reason may name the host: cut, as every excerpt of caller input
            const reason = excerpt(check.reason, 160)
            return yield* new ValidationError({ message: `webhook url refused: ${reason}`, details: [{ path: ["url"], message: reason }] })
          }
          const webhook = {
            id: newWebhookId(),
            apiKeyId: key.id,
            url: check.url.toString(),
            events: [...new Set(payload.events)],
            label: payload.label ?? null,
            failureCount: 0,
            createdAt: formatMillis(yield* Clock.currentTimeMillis),
            signingSecret: newSigningSecret()
          }
          yield* Effect.orDie(repo.create(webhook))
          return {
            id: webhook.id,
            url: webhook.url,
            events: webhook.events,
            label: webhook.label,
            signing_secret: webhook.signingSecret
          }
        }))
      .handle("list", () =>
        Effect.gen(function*() {
          const key = yield* requireScope("webhook")
          const hooks = yield* Effect.orDie(repo.listOwned(key.id))
          return {
            webhooks: hooks.map((w) => ({
              id: w.id,
              url: w.url,
              label: w.label,
              events: w.events,
              failure_count: w.failureCount,
              created_at: w.createdAt
            }))
          }
        }))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("webhook")
          const removed = yield* Effect.orDie(repo.remove(key.id, path.webhook_id, formatMillis(yield* Clock.currentTimeMillis)))
          if (!removed) return yield* notFound(path.webhook_id)
          return { deleted: true as const }
        }))
      .handle("deliveries", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("webhook")
          const w = yield* Effect.orDie(repo.findOwned(key.id, path.webhook_id))
          if (!w) return yield* notFound(path.webhook_id)
          const list = yield* Effect.orDie(repo.deliveries(w.id))
          return {
            deliveries: list.map((d) => ({
              id: d.id,
              event_type: d.eventType,
              status: d.status,
              response_code: d.responseCode,
              attempts: d.attempts,
              created_at: d.createdAt,
              last_attempt_at: d.lastAttemptAt,
              next_attempt_at: d.status === "pending" || d.status === "retrying" ? d.nextAttemptAt : null
            }))
          }
        }))
  }))
