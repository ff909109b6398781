/** Monthly quotas: hashes submitted for attestation, per key, per UTC month. */
import * as SqlClient from "@effect/sql/SqlClient"
import { Clock, Effect } from "effect"
import { QuotaExceeded } from "../Domain/Errors.js"
import { secondsToNextUtcMonth, utcMonth } from "../Domain/Time.js"
import type { ApiKey } from "./Domain.js"

export class Quota extends Effect.Service<Quota>()("Auth/Quota", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    /** Adds `units` to this month's usage, or fails with QUOTA_EXCEEDED and changes nothing. */
    const consume = (key: ApiKey, units: number): Effect.Effect<void, QuotaExceeded> =>
      key.monthlyQuota === null || units <= 0 ? Effect.void : consumeCounted(key, key.monthlyQuota, units)
    const consumeCounted = (key: ApiKey, quota: number, units: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const month = utcMonth(now)
        const exceeded = new QuotaExceeded({
          message: `monthly quota of ${quota} hashes exhausted for ${month}`,
          details: { quota, month },
          retryAfter: secondsToNextUtcMonth(now)
        })
        if (units > quota) return yield* exceeded
        const rows = yield* sql<{ used: number | string }>`
          INSERT INTO quota_usage (api_key_id, month, used) VALUES (${key.id}, ${month}, ${units})
          ON CONFLICT (api_key_id, month) DO UPDATE SET used = quota_usage.used + excluded.used
          WHERE quota_usage.used + excluded.used <= ${quota}
          RETURNING used`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* exceeded
      })
    return { consume }
  })
}) {}
