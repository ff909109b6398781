/**
 * Legacy numeric handles belong to imported historical attestations only
 * (CONTRACT §2): a nullable, unique `legacy_id`; the row sequence number is
 * no longer a public handle, so the registry cannot be walked by number.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `ALTER TABLE attestations ADD COLUMN legacy_id ${t.bigint}`,
  `CREATE UNIQUE INDEX attestations_legacy_id ON attestations (legacy_id) WHERE legacy_id IS NOT NULL`
])
