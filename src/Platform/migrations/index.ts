/** Every migration, in order. Keys are `<id>_<name>` as @effect/sql's Migrator expects. */
import foundation from "./0001_foundation.js"
import sealing from "./0002_sealing.js"
import anchoring from "./0003_anchoring.js"
import claims from "./0004_claims.js"
import webhooks from "./0005_webhooks.js"
import organizations from "./0006_organizations.js"
import indexes from "./0007_indexes.js"
import simulatedChain from "./0008_simulated_chain.js"
import legacyIds from "./0009_legacy_ids.js"
import webhookCircuit from "./0010_webhook_circuit.js"
import webhookLeases from "./0011_webhook_leases.js"
import listingByTime from "./0012_listing_by_time.js"
import timestampTokens from "./0013_timestamp_tokens.js"
import keyWindows from "./0014_key_windows.js"
import leases from "./0015_leases.js"
import registry from "./0016_registry.js"

export const migrations = {
  "0001_foundation": foundation,
  "0002_sealing": sealing,
  "0003_anchoring": anchoring,
  "0004_claims": claims,
  "0005_webhooks": webhooks,
  "0006_organizations": organizations,
  "0007_indexes": indexes,
  "0008_simulated_chain": simulatedChain,
  "0009_legacy_ids": legacyIds,
  "0010_webhook_circuit": webhookCircuit,
  "0011_webhook_leases": webhookLeases,
  "0012_listing_by_time": listingByTime,
  "0013_timestamp_tokens": timestampTokens,
  "0014_key_windows": keyWindows,
  "0015_leases": leases,
  "0016_registry": registry
}
