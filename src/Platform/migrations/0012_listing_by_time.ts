/**
 * A key's attestations newest first (GET /v1/attestations, `attestd list`) is ordered by
 * registered_at, a column of attestations while the key is a column of claims, so no index
 * of claims gives that order: without this one, a key's listing read and sorted all its claims
 * (1.4 s at 200,000 on Postgres, growing with the registry). With it, a key that holds much of
 * the registry walks attestations newest first and stops at the page; a key that holds little
 * still reads its claims by claims_by_key (docs/scale.md). A B-tree, not BRIN: the order, not
 * only the range, is what the listing needs.
 */
import { ddl } from "./ddl.js"

export default ddl(() => [
  `CREATE INDEX attestations_by_time ON attestations (registered_at, seq)`
])
