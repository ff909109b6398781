// Tag AND-query benchmark on Postgres (BENCH_ONLY=tags).
//
//   BENCH_ONLY=tags node scripts/bench.mjs        (or: node scripts/bench/tags.mjs)
//
// Loads, with INSERT ... SELECT FROM generate_series: BENCH_TAGS_ATTESTATIONS (100,000)
// attestations; key A claims each of them with 10 plaintext tags (1,000,000 tags), key B
// claims the same attestations with 2 tags (env, region: the same key/value pairs under
// another api_key_id, 200,000 tags); then ANALYZE. Tag values are hash-derived
// (uncorrelated): value = key || '-' || abs(hashtext(i || key)) % cardinality, with
// cardinalities env 2, region 10, status 5, team 20, quarter 8, priority 4, project 100,
// owner 500, customer 1000, sku 10000.
//
// For 1-, 2- and 3-condition AND queries (limit 100, first page) and a sparse 2-condition one,
// TagRepo.query runs through a ManagedRuntime over AppLive; the SQL it sends is captured from
// its `sql.execute` spans (db.query.text) and checked against the statement rebuilt with the
// same template as src/Tags/Repo.ts (which supplies the parameters). Printed: EXPLAIN (ANALYZE,
// BUFFERS) of both statements TagRepo.query issues (the AND query, then the page's tags),
// whether any plan has a Seq Scan on tags / uses tags_query, and wall times (median of
// BENCH_TAGS_RUNS (20) after 5 warm-ups): TagRepo.query end to end, and each statement alone.
// Then, unless BENCH_TAGS_WHATIF=0, a what-if on the benchmark database only: the page-tags
// statement again after CREATE INDEX ON tags (api_key_id, attestation_seq).
import { randomBytes } from "node:crypto"
import { envInt, runAsScript, table } from "./lib.mjs"
import { defaultDist, directDb, distImport, fmt, loadPending, makeRuntime, openStore, quietWait } from "./seal.mjs"
import { median, quantile } from "./stats.mjs"

const TAG_KEYS = [
  ["env", 2],
  ["region", 10],
  ["status", 5],
  ["team", 20],
  ["quarter", 8],
  ["priority", 4],
  ["project", 100],
  ["owner", 500],
  ["customer", 1000],
  ["sku", 10000]
]
const KEY_A = "key_tags_a"
const KEY_B = "key_tags_b"

export const QUERIES = [
  { name: "1 condition", conditions: [{ key: "region", value: "region-3" }] },
  { name: "2 conditions", conditions: [{ key: "region", value: "region-3" }, { key: "status", value: "status-1" }] },
  {
    name: "3 conditions",
    conditions: [{ key: "region", value: "region-3" }, { key: "status", value: "status-1" }, { key: "env", value: "env-0" }]
  },
  { name: "2 cond., sparse", conditions: [{ key: "customer", value: "customer-7" }, { key: "team", value: "team-3" }] }
]

const loadTags = async (store, n) => {
  await loadPending(store, n, Date.now())
  const db = await directDb(store)
  try {
    const now = new Date().toISOString().slice(0, 23) + "000+00:00"
    await db.exec("SET synchronous_commit = off")
    await db.exec("SET maintenance_work_mem = '256MB'")
    for (const id of [KEY_A, KEY_B]) {
      await db.query(`INSERT INTO api_keys (id, key_hash, label, scopes, created_at) VALUES ($1, $2, $1, '["tags:write"]', $3)`, [
        id,
        randomBytes(32).toString("hex"),
        now
      ])
    }
    // claims: key A id = i, key B id = n + i, both on attestation i
    await db.query(
      `INSERT INTO claims (id, attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
       SELECT i, i, $2, NULL, NULL, NULL, FALSE, md5('a' || i), $3, $3 FROM generate_series(1, $1::bigint) AS i
       UNION ALL
       SELECT $1::bigint + i, i, $4, NULL, NULL, NULL, FALSE, md5('b' || i), $3, $3 FROM generate_series(1, $1::bigint) AS i`,
      [n, KEY_A, now, KEY_B]
    )
    await db.query(`SELECT setval(pg_get_serial_sequence('claims', 'id'), $1::bigint)`, [2 * n])
    const values = TAG_KEYS.map(([k, c]) => `('${k}', ${c})`).join(", ")
    await db.query(
      `INSERT INTO tags (claim_id, api_key_id, attestation_seq, key, value, updated_at)
       SELECT i, $2, i, k.key, k.key || '-' || (abs(hashtext(i::text || k.key)) % k.card), $3
       FROM generate_series(1, $1::bigint) AS i CROSS JOIN (VALUES ${values}) AS k(key, card)`,
      [n, KEY_A, now]
    )
    await db.query(
      `INSERT INTO tags (claim_id, api_key_id, attestation_seq, key, value, updated_at)
       SELECT $1::bigint + i, $2, i, k.key, k.key || '-' || (abs(hashtext(i::text || k.key)) % k.card), $3
       FROM generate_series(1, $1::bigint) AS i CROSS JOIN (VALUES ('env', 2), ('region', 10)) AS k(key, card)`,
      [n, KEY_B, now]
    )
    await db.exec("VACUUM ANALYZE attestations")
    await db.exec("VACUUM ANALYZE claims")
    await db.exec("VACUUM ANALYZE tags")
    const [t] = await db.query("SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE api_key_id = $1) AS a FROM tags", [KEY_A])
    return { tags: Number(t.n), tagsA: Number(t.a) }
  } finally {
    await db.close()
  }
}

/** The two statements of TagRepo.query, rebuilt with the template of src/Tags/Repo.ts and compiled by the app's SqlClient. */
const rebuild = (sql, apiKeyId, conditions, after, limit) => {
  const [first, ...rest] = conditions
  const joins = rest.map((c, i) => {
    const t = sql(`t${i + 1}`)
    return sql`JOIN tags ${t} ON ${t}.api_key_id = t0.api_key_id AND ${t}.attestation_seq = t0.attestation_seq
            AND ${t}.key = ${c.key} AND ${t}.value = ${c.value}`
  })
  const main = sql`
          SELECT a.seq, a.id, a.hash_hex FROM tags t0 ${sql.join(" ", false, "")(joins)}
          JOIN attestations a ON a.seq = t0.attestation_seq
          WHERE t0.api_key_id = ${apiKeyId} AND t0.key = ${first.key} AND t0.value = ${first.value}
            AND t0.attestation_seq > ${after}
          ORDER BY t0.attestation_seq LIMIT ${limit + 1}`
  const pageTags = (seqs) => sql`SELECT * FROM tags
          WHERE api_key_id = ${apiKeyId} AND ${sql.in("attestation_seq", seqs)} ORDER BY key`
  return { main: main.compile(), pageTags: (seqs) => pageTags(seqs).compile() }
}

const norm = (s) => s.replace(/\s+/g, " ").trim()


/** Runs the tags benchmark (Postgres only); returns { load, queries, text }. */
export async function benchTags({
  attestations = envInt("BENCH_TAGS_ATTESTATIONS", 100_000),
  runs = envInt("BENCH_TAGS_RUNS", 20),
  limit = 100,
  dist = defaultDist(),
  log = console.log
} = {}) {
  const { Effect, Tracer } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const { TagRepo } = await distImport(dist, "Tags/Repo.js")
  const store = await openStore({ kind: "pg", section: "tags", dist })
  let runtime
  let db
  try {
    let t0 = performance.now()
    const load = await loadTags(store, attestations)
    load.ms = performance.now() - t0
    log(`  loaded ${attestations.toLocaleString("en-US")} attestations, ${load.tags.toLocaleString("en-US")} tags (${load.tagsA.toLocaleString("en-US")} for key A) and analyzed in ${(load.ms / 1000).toFixed(1)} s`)
    runtime = await makeRuntime(store, dist, {})
    db = await directDb(store)
    await quietWait(log)

    const queries = []
    for (const q of QUERIES) {
      // TagRepo.query, capturing the SQL of its sql.execute spans
      const spans = []
      const page = await runtime.runPromise(
        Effect.flatMap(Effect.tracer, (base) => {
          const tracer = Tracer.make({
            span: (...a) => {
              const s = base.span(...a)
              if (a[0] === "sql.execute") spans.push(s)
              return s
            },
            context: base.context
          })
          return Effect.withTracer(Effect.flatMap(TagRepo, (r) => r.query(KEY_A, q.conditions, 0, limit)), tracer)
        })
      )
      const sent = spans.map((s) => s.attributes.get("db.query.text"))
      const seqs = page.items.map((it) => Number(it.id.replace(/^att_bench0*/, "")))
      const rebuilt = await runtime.runPromise(Effect.map(SqlClient.SqlClient, (sql) => {
        const r = rebuild(sql, KEY_A, q.conditions, 0, limit)
        return { main: r.main, pageTags: r.pageTags(seqs) }
      }))
      // with an empty page TagRepo.query sends only the AND query
      const issued = seqs.length === 0 ? 1 : 2
      const exact = sent.length === issued && sent[0] === rebuilt.main[0] && (issued === 1 || sent[1] === rebuilt.pageTags[0])
      if (!exact) {
        log(`  WARNING: the SQL TagRepo.query sent differs from the rebuilt statements (${sent.length} statements); explaining the rebuilt ones`)
        for (const s of sent) log(`    sent: ${norm(s)}`)
      }
      const statements = [
        { what: "AND query", sql: rebuilt.main[0], params: rebuilt.main[1] },
        { what: "page tags", sql: rebuilt.pageTags[0], params: rebuilt.pageTags[1] }
      ].slice(0, issued)
      // the result through TagRepo equals the statement's own first page
      const direct = await db.query(statements[0].sql, statements[0].params)
      if (direct.slice(0, limit).map((r) => r.id).join() !== page.items.map((i) => i.id).join()) throw new Error(`${q.name}: TagRepo.query and its SQL disagree`)

      const repoMs = []
      for (let r = 0; r < runs + 5; r++) {
        const t = performance.now()
        await runtime.runPromise(Effect.flatMap(TagRepo, (x) => x.query(KEY_A, q.conditions, 0, limit)))
        if (r >= 5) repoMs.push(performance.now() - t)
      }
      for (const st of statements) {
        const ms = []
        for (let r = 0; r < runs + 5; r++) {
          const t = performance.now()
          await db.query(st.sql, st.params)
          if (r >= 5) ms.push(performance.now() - t)
        }
        st.medianMs = median(ms)
        const plan = await db.query(`EXPLAIN (ANALYZE, BUFFERS) ${st.sql}`, st.params)
        st.plan = plan.map((r) => r["QUERY PLAN"]).join("\n")
        st.seqScanOnTags = /Seq Scan on tags/.test(st.plan)
        st.usesTagsQuery = /using tags_query/.test(st.plan)
        st.executionMs = Number(/Execution Time: ([\d.]+) ms/.exec(st.plan)?.[1])
      }
      queries.push({
        name: q.name,
        conditions: q.conditions,
        rows: page.items.length,
        more: page.nextAfter !== undefined,
        exactSql: exact,
        repoMedianMs: median(repoMs),
        repoP90Ms: quantile(repoMs, 0.9),
        statements
      })
      log(`  ${q.name}: TagRepo.query median ${fmt(median(repoMs), 2)} ms (${statements.map((s) => `${s.what} ${fmt(s.medianMs, 2)} ms${s.seqScanOnTags ? " SEQ SCAN" : ""}`).join(", ")})`)
    }
    // What-if (this database only, not the schema): an index the page-tags statement can use.
    let whatIf
    if (process.env.BENCH_TAGS_WHATIF !== "0") {
      const probe = queries.find((q) => q.statements.length === 2)
      if (probe) {
        const st = probe.statements[1]
        await db.exec("CREATE INDEX bench_tags_by_key_seq ON tags (api_key_id, attestation_seq)")
        await db.exec("ANALYZE tags")
        const ms = []
        for (let r = 0; r < runs + 5; r++) {
          const t = performance.now()
          await db.query(st.sql, st.params)
          if (r >= 5) ms.push(performance.now() - t)
        }
        const plan = (await db.query(`EXPLAIN (ANALYZE, BUFFERS) ${st.sql}`, st.params)).map((r) => r["QUERY PLAN"]).join("\n")
        whatIf = { query: probe.name, beforeMs: st.medianMs, afterMs: median(ms), plan }
        log(`  what-if index tags (api_key_id, attestation_seq): page tags of "${probe.name}" ${fmt(st.medianMs, 2)} → ${fmt(median(ms), 2)} ms`)
      }
    }
    return { load, queries, whatIf, text: formatTags({ load, queries, attestations, whatIf }) }
  } finally {
    await db?.close()
    await runtime?.dispose()
    await store.close()
  }
}

const shortPlan = (plan) => plan.replace(/'\{((\d+,){3})(\d+,){6,}(\d+)\}'/g, (_m, head, _x, _y, last) => `'{${head}…,${last}}'`)

const paramsText = (params) => params.map((p, i) => `$${i + 1}=${JSON.stringify(p)}`).join(" ")

export const formatTags = ({ load, queries, attestations, whatIf }) => {
  const lines = []
  lines.push(`Postgres: ${attestations.toLocaleString("en-US")} attestations, ${load.tags.toLocaleString("en-US")} tags (${load.tagsA.toLocaleString("en-US")} of key A), loaded + ANALYZE in ${fmt(load.ms / 1000, 1)} s`)
  lines.push("")
  lines.push(table(
    ["query (key A, limit 100)", "rows", "TagRepo.query ms", "p90", "AND query ms", "page tags ms", "AND plan", "page-tags plan", "exact SQL"],
    queries.map((q) => {
      const [m, p] = q.statements
      const plan = (s) => (s === undefined ? "(not sent)" : s.seqScanOnTags ? "SEQ SCAN tags" : s.usesTagsQuery ? "tags_query" : "other index")
      return [q.name, `${q.rows}${q.more ? "+" : ""}`, fmt(q.repoMedianMs, 2), fmt(q.repoP90Ms, 2), fmt(m.medianMs, 2), fmt(p?.medianMs, 2), plan(m), plan(p), q.exactSql ? "yes" : "NO"]
    }),
    { right: [1, 2, 3, 4, 5] }
  ))
  lines.push("ms: medians of wall time from this process (TagRepo.query through the runtime; the statements via node-postgres).")
  for (const q of queries) {
    for (const s of q.statements) {
      lines.push("")
      lines.push(`--- ${q.name} — ${s.what}: ${q.conditions.map((c) => `${c.key}=${c.value}`).join(" AND ")}`)
      lines.push(norm(s.sql).replace(/\$\d+(,\s?\$\d+){6,}/, (m) => {
        const ps = m.split(/,\s?/)
        return `${ps.slice(0, 3).join(",")},…,${ps[ps.length - 1]}`
      }))
      lines.push(`params: ${s.params.length > 10 ? `${paramsText(s.params.slice(0, 4))} … (${s.params.length} in all)` : paramsText(s.params)}`)
      lines.push(shortPlan(s.plan))
    }
  }
  if (whatIf) {
    lines.push("")
    lines.push(`--- what-if (bench database only): CREATE INDEX ON tags (api_key_id, attestation_seq); page tags of "${whatIf.query}": median ${fmt(whatIf.beforeMs, 2)} → ${fmt(whatIf.afterMs, 2)} ms`)
    lines.push(shortPlan(whatIf.plan))
  }
  return lines.join("\n")
}

runAsScript(import.meta.url, benchTags)
