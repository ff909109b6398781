// A group's write for the ceiling server (scripts/bench/ceiling-server.mjs): the statements attestd
// runs for new digests (BEGIN, the inserts of attestations, then of their claims, COMMIT),
// through `run(sql, params) → rows`. The same code serves the server's event loop and, with
// CEILING_SQLITE_WRITER=thread, its writer thread (ceiling-writer.mjs).

/** SQLite's settings, as attestd's (WAL, synchronous = FULL, the WAL limit). */
export const SQLITE_PRAGMAS = ["journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON", "busy_timeout = 10000", "wal_autocheckpoint = 10000"]

/** `run` over a better-sqlite3 connection, its statements prepared once: the rows of a statement that returns some, else better-sqlite3's `{ changes, lastInsertRowid }`. */
export const sqliteRun = (db) => {
  const cache = new Map()
  const prepared = (sql) => cache.get(sql) ?? cache.set(sql, db.prepare(sql)).get(sql)
  return async (sql, params = []) => {
    const s = prepared(sql)
    return s.reader ? s.all(...params) : s.run(...params)
  }
}

const valuesOf = (isPg, count, width) =>
  Array.from({ length: count }, (_, r) => `(${Array.from({ length: width }, (_, c) => (isPg ? `$${r * width + c + 1}` : "?")).join(",")})`).join(",")

/**
 * Inserts `rows` (id, hash, signature) registered `at` under `kid`, and a claim for each request
 * ({ hash, keyId, orgId, etag }) whose digest this insert created, in one transaction.
 * Returns the inserted attestations ({ seq, id, hash_hex }) and claims ({ id, attestation_seq }).
 */
export const writeGroup = async (run, { isPg, rows, at, kid, requests, now }) => {
  // One multi-row insert per table on Postgres (a round trip each), RETURNING what it inserted; on
  // SQLite one single-row insert per row, as attestd runs a group now (SQLite inserts faster from a
  // prepared single-row statement than from a multi-row VALUES), with no RETURNING: a row changed
  // means inserted, and its key is the rowid SQLite gives back (README, Performance).
  const insert = async (items, statement, returning, params, keys) => {
    if (items.length === 0) return []
    if (isPg) return run(`${statement(items.length)} RETURNING ${returning}`, items.flatMap(params))
    const out = []
    for (const item of items) {
      const info = await run(statement(1), params(item))
      if (info.changes === 1) out.push(keys(item, Number(info.lastInsertRowid)))
    }
    return out
  }
  await run("BEGIN")
  try {
    const inserted = await insert(rows, (n) =>
      `INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version) VALUES ${valuesOf(isPg, n, 6)}
       ON CONFLICT (hash_hex) DO NOTHING`, "seq, id, hash_hex", (r) => [r.id, r.hash, at, r.signature, kid, "2.0.0"],
      (r, seq) => ({ seq, id: r.id, hash_hex: r.hash }))
    const seqByHash = new Map(inserted.map((a) => [a.hash_hex, Number(a.seq)]))
    const claims = requests.filter((c) => seqByHash.has(c.hash))
    const claimIds = await insert(claims, (n) =>
      `INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
       VALUES ${valuesOf(isPg, n, 9)} ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING`,
      "id, attestation_seq", (c) => [seqByHash.get(c.hash), c.keyId, c.orgId, null, null, isPg ? false : 0, c.etag, now, now],
      (c, id) => ({ id, attestation_seq: seqByHash.get(c.hash) }))
    await run("COMMIT")
    return { inserted, claimIds }
  } catch (e) {
    await run("ROLLBACK").catch(() => {})
    throw e
  }
}
