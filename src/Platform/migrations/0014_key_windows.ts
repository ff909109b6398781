/**
 * Key custody (CONTRACT §8): every signing key has a role (`t0`, `tsa`) and a validity
 * window — `activated_at`, and `retired_at` once rotated out. The service's own keys
 * were active from their creation; an imported historical key (active false) spans the
 * signatures imported with it, and signs nothing new.
 */
import { ddl } from "./ddl.js"

const span = (fn: "MIN" | "MAX") =>
  `COALESCE((SELECT ${fn}(a.registered_at) FROM attestations a WHERE a.signing_key_id = signing_keys.kid), created_at)`

export default ddl(() => [
  `ALTER TABLE signing_keys ADD COLUMN role TEXT NOT NULL DEFAULT 't0'`,
  `ALTER TABLE signing_keys ADD COLUMN activated_at TEXT`,
  `ALTER TABLE signing_keys ADD COLUMN retired_at TEXT`,
  `UPDATE signing_keys SET activated_at = created_at WHERE active`,
  `UPDATE signing_keys SET activated_at = ${span("MIN")}, retired_at = ${span("MAX")} WHERE NOT active`
])
