/**
 * A circuit per webhook: failed attempts in a row, how many times in a row the
 * circuit opened (the open period grows with it), and until when it is open.
 * An index finds a webhook's queued deliveries (to delay them while open).
 */
import { ddl } from "./ddl.js"

export default ddl(() => [
  `ALTER TABLE webhooks ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0`,
  `ALTER TABLE webhooks ADD COLUMN circuit_opens INTEGER NOT NULL DEFAULT 0`,
  `ALTER TABLE webhooks ADD COLUMN circuit_open_until TEXT`,
  `CREATE INDEX webhook_deliveries_queued ON webhook_deliveries (webhook_id, next_attempt_at) WHERE status IN ('pending', 'retrying')`
])
