/**
 * The registry apart from its seal and anchor. An attestation's row (`registry`) is written
 * once, at T0, and never updated: sealing a window adds its leaves (`batch_leaves`) and
 * removes them from `pending_seals`, anchoring a day changes only its daily root. Sealing a
 * million attestations had rewritten a million rows and their five index entries each
 * (~20 s of the ~30 s seal on Postgres); inserting the leaves takes ~2 s.
 *
 * `attestations` is now a view over the three with the columns the row had: `level`,
 * `batch_id`, `leaf_index`, `t1_at` (kept on the batch), `t2_at` and `t2_block` (the daily
 * root's confirmation). `pending_seals` holds every row not yet sealed, with the time and digest
 * the seal reads (so a seal reads the backlog alone, not the registry's rows): a trigger adds
 * each registered row, so every writer (attest, import) leaves it pending.
 */
import { ddl } from "./ddl.js"

export default ddl((t) => [
  `CREATE TABLE batch_leaves (
    attestation_seq ${t.bigint} PRIMARY KEY,
    batch_id ${t.bigint} NOT NULL,
    leaf_index INTEGER NOT NULL
  )`,
  `CREATE INDEX batch_leaves_by_batch ON batch_leaves (batch_id, leaf_index)`,
  `CREATE TABLE pending_seals (
    seq ${t.bigint} PRIMARY KEY,
    registered_at TEXT NOT NULL,
    hash_hex TEXT NOT NULL
  )`,
  `ALTER TABLE batches ADD COLUMN t1_at TEXT`,
  `INSERT INTO batch_leaves (attestation_seq, batch_id, leaf_index)
    SELECT seq, batch_id, leaf_index FROM attestations WHERE batch_id IS NOT NULL ORDER BY seq`,
  `INSERT INTO pending_seals (seq, registered_at, hash_hex)
    SELECT seq, registered_at, hash_hex FROM attestations WHERE batch_id IS NULL ORDER BY seq`,
  `UPDATE batches SET t1_at = (SELECT MIN(a.t1_at) FROM attestations a WHERE a.batch_id = batches.id)`,
  `DROP INDEX attestations_pending_t0`,
  `DROP INDEX attestations_by_batch`,
  ...["level", "batch_id", "leaf_index", "t1_at", "t2_at", "t2_block"].map((c) => `ALTER TABLE attestations DROP COLUMN ${c}`),
  `ALTER TABLE attestations RENAME TO registry`,
  `CREATE VIEW attestations AS
    SELECT r.seq, r.id, r.hash_hex, r.registered_at, r.signature, r.signing_key_id, r.format_version,
      CASE WHEN l.batch_id IS NULL THEN 'T0' WHEN d.id IS NULL THEN 'T1' ELSE 'T2' END AS level,
      l.batch_id, l.leaf_index, b.t1_at, d.confirmed_at AS t2_at, d.bitcoin_height AS t2_block, r.legacy_id
    FROM registry r
    LEFT JOIN batch_leaves l ON l.attestation_seq = r.seq
    LEFT JOIN batches b ON b.id = l.batch_id
    LEFT JOIN daily_roots d ON d.id = b.daily_root_id AND d.status = 'confirmed'`,
  ...(t.dialect === "pg"
    ? [
      `CREATE FUNCTION registry_pending() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO pending_seals (seq, registered_at, hash_hex) SELECT seq, registered_at, hash_hex FROM registered;
          RETURN NULL;
        END $$`,
      `CREATE TRIGGER registry_pending AFTER INSERT ON registry
        REFERENCING NEW TABLE AS registered FOR EACH STATEMENT EXECUTE FUNCTION registry_pending()`
    ]
    : [
      `CREATE TRIGGER registry_pending AFTER INSERT ON registry
        BEGIN INSERT INTO pending_seals (seq, registered_at, hash_hex) VALUES (NEW.seq, NEW.registered_at, NEW.hash_hex); END`
    ])
])
