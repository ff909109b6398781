/**
 * Indexes found by the benchmarks: the tags of a query's result page (by key
 * and attestation), and the delivery-history trim per webhook.
 */
import { ddl } from "./ddl.js"

export default ddl(() => [
  `CREATE INDEX tags_by_key_attestation ON tags (api_key_id, attestation_seq)`,
  `CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (webhook_id, id) WHERE status IN ('succeeded', 'failed')`
])
