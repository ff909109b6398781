/**
 * Claiming due webhook deliveries counts each webhook's attempts in flight (queued
 * deliveries whose lease has not lapsed); this index finds them without reading the
 * whole queue, so a claim's cost does not grow with a backlog (WebhookRepo.claimDue).
 */
import { ddl } from "./ddl.js"

export default ddl(() => [
  `CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (claimed_until, webhook_id) WHERE status IN ('pending', 'retrying')`
])
