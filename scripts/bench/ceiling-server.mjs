// The ceiling: the least a server can do for attest-new and still do what attestd
// must, written by hand with no framework, to learn what req/s this machine allows
// for that work (issue 12 §3: "attest close to what the machine can do"). Per
// request, like attestd's fast lane: the body read and parsed, the digest checked,
// the bearer key's SHA-256 looked up in the keys read at start (attestd's key
// cache), a per-second counter per key (its rate limiter), a JSON answer of the same
// fields and headers. Per group of the requests waiting (at most 64, like attestd's
// group commit: one at a time on SQLite, two at once on Postgres): one SELECT of the
// group's digests (not on Postgres, where attestd writes a group of digests it has not
// attested lately before reading: below), a P-256 signature per new digest (low-S; its nonce made ahead of
// time on a worker thread, as attestd's; node:crypto's sign with CEILING_SIGN=node),
// then BEGIN, one multi-row INSERT of the attestations, one of the claims, COMMIT:
// the statements attestd runs, on the service's own schema (made by `attestd keys
// create`) with its durability (SQLite: WAL, synchronous = FULL; Postgres: its
// default synchronous_commit). Nothing else: no fibers, no schema decoding, no
// access log, no metrics, no quota, no re-attest branch (every digest is new).
// POST /v1/verify likewise, as the public verify: the body, the digest, a per-second
// counter per client address (the public limit), the lookup (SQLite: a prepared
// statement, at once; Postgres: one `= ANY($1)` SELECT for the verifies that arrive
// in the same turn, as attestd's group read), the answer's fields.
// Its low-S DER and its pool of random bytes are written here rather than taken from
// src/ (the service uses @noble/curves, src/Domain/T0.ts, and src/Domain/Bytes.ts): it
// measures the least the work costs, on no build of the service.
// A measuring instrument for `npm run bench` (BENCH_ONLY=ceiling), not a server.
//   DATABASE_URL=sqlite:/path/attestd.db|postgres://… PORT=… node scripts/bench/ceiling-server.mjs
import { createHash, createPublicKey, generateKeyPairSync, randomBytes, randomUUID, sign } from "node:crypto"
import { createServer } from "node:http"
import { Worker } from "node:worker_threads"
import { SQLITE_PRAGMAS, sqliteRun, writeGroup } from "./ceiling-write.mjs"
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)
const url = process.env.DATABASE_URL ?? ""
const isPg = url.startsWith("postgres")
/**
 * On Postgres a group's new digests and their claims in one statement (commitCte, below), as
 * attestd writes them since 2026-11-24, and since that evening with no SELECT before it (attestd
 * reads first only when the group holds a digest it attested lately: RecentDigests; here every
 * digest is new). CEILING_PG_WRITE=read-first for the SELECT, then the statement;
 * CEILING_PG_WRITE=transaction for the SELECT, BEGIN, two inserts and COMMIT (writeGroup).
 */
const PG_WRITE = process.env.CEILING_PG_WRITE ?? "one-statement"
const ONE_STATEMENT = PG_WRITE !== "transaction"
const READ_FIRST = !isPg || PG_WRITE !== "one-statement"
const MAX_BATCH = 64
const HASH = /^[0-9a-f]{64}$/

// --- signing: a fresh P-256 key, DER, low-S
const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" })
const KID = createHash("sha256").update(randomBytes(32)).digest("base64url")
const N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n
const derInt = (b) => {
  let i = 0
  while (i < b.length - 1 && b[i] === 0) i++
  const v = b.subarray(i)
  return v[0] & 0x80 ? Buffer.concat([Buffer.from([2, v.length + 1, 0]), v]) : Buffer.concat([Buffer.from([2, v.length]), v])
}
const hex32 = (v) => Buffer.from(v.toString(16).padStart(64, "0"), "hex")
const derOf = (r, s) => {
  const body = Buffer.concat([derInt(r), derInt(s)])
  return Buffer.concat([Buffer.from([0x30, body.length]), body]).toString("base64")
}
const lowS = (s) => s > N >> 1n ? N - s : s
const signWithNode = (payload) => {
  const raw = sign("sha256", Buffer.from(payload), { key: privateKey, dsaEncoding: "ieee-p1363" })
  return derOf(raw.subarray(0, 32), hex32(lowS(BigInt("0x" + raw.subarray(32).toString("hex")))))
}
// Nonces made ahead of time, as attestd's src/Platform/Presign.ts (CEILING_SIGN=node: node:crypto's
// sign for every digest): a worker thread makes (r, k⁻¹) pairs, a signature is s = k⁻¹(e + r·d) mod n.
const D = BigInt("0x" + Buffer.from(privateKey.export({ format: "jwk" }).d, "base64url").toString("hex"))
const nonces = []
let asked = false
const nonceWorker = process.env.CEILING_SIGN === "node" ? undefined : new Worker(`
const { parentPort } = require("node:worker_threads"), ecdh = require("node:crypto").createECDH("prime256v1"), N = ${N}n
const pow = (b, e) => { let r = 1n; for (; e > 0n; e >>= 1n, b = b * b % N) if (e & 1n) r = r * b % N; return r }
parentPort.on("message", (count) => {
  const ks = [], rs = [], out = []
  while (ks.length < count) {
    ecdh.generateKeys()
    ks.push(BigInt("0x" + ecdh.getPrivateKey("hex"))); rs.push(BigInt("0x" + ecdh.getPublicKey("hex").slice(2, 66)) % N)
  }
  const prefix = []; let acc = 1n
  for (const k of ks) { prefix.push(acc); acc = acc * k % N }
  let inv = pow(acc, N - 2n)
  for (let i = count - 1; i >= 0; i--) { out[2 * i] = rs[i]; out[2 * i + 1] = inv * prefix[i] % N; inv = inv * ks[i] % N }
  parentPort.postMessage(out)
})`, { eval: true })
const askForNonces = () => {
  if (nonceWorker === undefined || asked || nonces.length > 1024 - 256) return
  asked = true
  nonceWorker.postMessage(256)
}
nonceWorker?.unref()
nonceWorker?.on("message", (flat) => {
  asked = false
  for (let i = 0; i < flat.length; i += 2) nonces.push([flat[i], flat[i + 1]])
  askForNonces()
})
askForNonces()
const signT0 = (payload) => {
  const nonce = nonces.pop()
  askForNonces()
  if (nonce === undefined) return signWithNode(payload)
  const [r, kInv] = nonce
  const e = BigInt("0x" + createHash("sha256").update(payload).digest("hex"))
  return derOf(hex32(r), hex32(lowS(kInv * ((e + r * D) % N) % N)))
}
// ids and etags from a pool of random bytes, refilled 4 KiB at a time (as attestd's src/Domain/Bytes.ts)
let pool = randomBytes(4096)
let used = 0
const random = (n) => {
  if (used + n > pool.length) {
    pool = randomBytes(4096)
    used = 0
  }
  return pool.subarray(used, used += n)
}
const micros = (ms) => new Date(ms).toISOString().replace("Z", "000+00:00")

// --- the store: run(sql, params) → rows, on one connection per group worker
let stores
let keys
if (isPg) {
  const pg = require("pg")
  const pool = new pg.Pool({ connectionString: url, max: 2 })
  keys = (await pool.query("SELECT id, key_hash, org_id FROM api_keys WHERE revoked_at IS NULL")).rows
  // statements with parameters prepared by name, once per connection, as attestd's PgDirect does
  const names = new Map()
  const nameOf = (sql) => names.get(sql) ?? names.set(sql, `ceiling_${names.size}`).get(sql)
  const store = () => {
    const client = pool.connect()
    return async (sql, params = []) =>
      (await (await client).query(params.length > 0 ? { name: nameOf(sql), text: sql, values: params } : sql)).rows
  }
  stores = [store(), store()]
} else {
  const Database = require("better-sqlite3")
  const db = new Database(url.slice("sqlite:".length))
  for (const p of SQLITE_PRAGMAS) db.pragma(p)
  keys = db.prepare("SELECT id, key_hash, org_id FROM api_keys WHERE revoked_at IS NULL").all()
  stores = [sqliteRun(db)]
}
const keyByHash = new Map(keys.map((k) => [k.key_hash, k]))

// CEILING_SQLITE_WRITER=thread (an experiment): a group's transaction runs on a thread of its own with its
// own connection, in one message per group (BEGIN, both inserts, COMMIT with its fsync), so the event
// loop does not wait on SQLite's writes; the group's SELECT stays on the loop. Alternated twice it made
// 7,627 / 7,195 req/s against 8,464 / 7,566 on the loop (README: "SQLite's writes on a thread of their own").
const WRITER_THREAD = !isPg && process.env.CEILING_SQLITE_WRITER === "thread"
let writeGroupInThread
if (WRITER_THREAD) {
  const writer = new Worker(new URL("./ceiling-writer.mjs", import.meta.url), { workerData: { path: url.slice("sqlite:".length) } })
  writer.unref()
  const pending = new Map()
  let next = 0
  writer.on("message", ({ id, error, ...result }) => {
    const p = pending.get(id)
    pending.delete(id)
    if (error === undefined) p.resolve(result)
    else p.reject(new Error(error))
  })
  writeGroupInThread = (message) => new Promise((resolve, reject) => {
    const id = next++
    pending.set(id, { resolve, reject })
    writer.postMessage({ id, ...message })
  })
}

// --- verify's lookup: lookup(hash, found(row | undefined))
const STATUS = "SELECT seq, id, hash_hex, registered_at, level FROM attestations WHERE hash_hex"
let lookup
if (isPg) {
  const pg = require("pg")
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  // the lookups waiting, by digest; one SELECT at a time, for all that wait when it starts
  let asked = new Map()
  let busy = false
  const flush = () => {
    if (busy || asked.size === 0) return
    const group = asked
    asked = new Map()
    busy = true
    client.query({ name: "ceiling-verify", text: `${STATUS} = ANY($1)`, values: [[...group.keys()]] }).then((r) => {
      const byHash = new Map(r.rows.map((a) => [a.hash_hex, a]))
      for (const [h, fs] of group) for (const f of fs) f(byHash.get(h))
    }, (e) => {
      for (const fs of group.values()) for (const f of fs) f(e)
    }).finally(() => {
      busy = false
      flush()
    })
  }
  lookup = (hash, found) => {
    if (asked.size === 0 && !busy) setImmediate(flush)
    const fs = asked.get(hash)
    if (fs) fs.push(found)
    else asked.set(hash, [found])
  }
} else {
  const Database = require("better-sqlite3")
  const reader = new Database(url.slice("sqlite:".length), { readonly: true, timeout: 0 })
  const statement = reader.prepare(`${STATUS} = ?`)
  lookup = (hash, found) => found(statement.get(hash))
}

// --- the group commit
const waiting = []
let running = 0
const schedule = () => {
  while (waiting.length > 0 && running < stores.length) {
    const store = stores.find((s) => !s.busy)
    store.busy = true
    running++
    const group = waiting.splice(0, MAX_BATCH)
    commit(store, group).catch((e) => {
      for (const r of group) reply(r.res, 500, { error: { code: "INTERNAL", message: String(e?.message ?? e) } })
    }).finally(() => {
      store.busy = false
      running--
      schedule()
    })
  }
}

const commit = async (run, group) => {
  const hashes = [...new Set(group.map((r) => r.hash))].sort()
  const found = !READ_FIRST ? [] : await run(
    isPg
      ? "SELECT seq, id, hash_hex FROM attestations WHERE hash_hex = ANY($1)"
      : `SELECT seq, id, hash_hex FROM attestations WHERE hash_hex IN (${hashes.map(() => "?").join(",")})`,
    isPg ? [hashes] : hashes
  )
  const known = new Set(found.map((a) => a.hash_hex))
  const at = micros(Date.now())
  const rows = hashes.filter((h) => !known.has(h)).map((h) => ({
    id: "att_" + random(18).toString("base64url"),
    hash: h,
    signature: signT0(`2.0.0|${h}|${at}`)
  }))
  const byHash = new Map(rows.map((r) => [r.hash, r]))
  for (const r of group) r.etag = random(12).toString("hex")
  if (isPg && ONE_STATEMENT) return commitCte(run, group, rows, byHash, at)
  const write = {
    isPg,
    rows,
    at,
    kid: KID,
    now: new Date().toISOString(),
    requests: group.map((r) => ({ hash: r.hash, keyId: r.key.id, orgId: r.key.org_id, etag: r.etag }))
  }
  const { inserted, claimIds } = await (WRITER_THREAD ? writeGroupInThread(write) : writeGroup(run, write))
  for (const a of inserted) byHash.get(a.hash_hex).seq = Number(a.seq)
  answerGroup(group, byHash, new Map(claimIds.map((c) => [Number(c.attestation_seq), Number(c.id)])), at)
}

/** Each request of a committed group: its attestation and claim, as attestd answers a new digest. */
const answerGroup = (group, byHash, claimBySeq, at) => {
  for (const r of group) {
    const a = byHash.get(r.hash)
    if (a?.seq === undefined) {
      reply(r.res, 409, { error: { code: "CONFLICT", message: "the ceiling server answers new digests only" } })
      continue
    }
    reply(r.res, 201, {
      id: a.id,
      hash_hex: r.hash,
      timestamp: at,
      signature: a.signature,
      signing_key_id: KID,
      format_version: "2.0.0",
      status: "created",
      etag: r.etag,
      claim_id: claimBySeq.get(a.seq),
      source: null,
      extra_data: null,
      client_encrypted: false
    }, r.headers)
  }
}

// On Postgres the attestations and their claims in one statement (a data-modifying CTE, its own
// transaction), one round trip instead of BEGIN, two INSERTs and COMMIT, as attestd's Attestor
// (Repo.insertWithClaims; README, Performance).
const commitCte = async (run, group, rows, byHash, at) => {
  const now = new Date().toISOString()
  const out = await run(
    `WITH a AS (
       INSERT INTO attestations (id, hash_hex, registered_at, signature, signing_key_id, format_version)
       SELECT id, h, $3, sig, $4, '2.0.0' FROM unnest($1::text[], $2::text[], $5::text[]) AS v(id, h, sig)
       ON CONFLICT (hash_hex) DO NOTHING RETURNING seq, id, hash_hex),
     c AS (
       INSERT INTO claims (attestation_seq, api_key_id, org_id, source, extra_data, client_encrypted, etag, created_at, updated_at)
       SELECT a.seq, k.key_id, k.org_id, NULL, NULL, false, k.etag, $9, $9
       FROM a JOIN unnest($6::text[], $7::text[], $8::text[], $10::text[]) AS k(h, key_id, etag, org_id) ON k.h = a.hash_hex
       ON CONFLICT (attestation_seq, api_key_id) WHERE deleted_at IS NULL DO NOTHING
       RETURNING id, attestation_seq)
     SELECT a.seq, a.hash_hex, c.id AS claim_id FROM a LEFT JOIN c ON c.attestation_seq = a.seq`,
    [rows.map((r) => r.id), rows.map((r) => r.hash), at, KID, rows.map((r) => r.signature),
      group.map((r) => r.hash), group.map((r) => r.key.id), group.map((r) => r.etag), now, group.map((r) => r.key.org_id)]
  )
  const claimBySeq = new Map()
  for (const o of out) {
    byHash.get(o.hash_hex).seq = Number(o.seq)
    claimBySeq.set(Number(o.seq), Number(o.claim_id))
  }
  answerGroup(group, byHash, claimBySeq, at)
}

// --- HTTP
const reply = (res, status, body, extra = {}) => {
  const text = JSON.stringify(body)
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    "x-request-id": randomUUID(),
    ...extra
  })
  res.end(text)
}
const counts = new Map()
/** A fixed-window counter per second: the headers attestd sends from its limiter. */
const count = (id) => {
  const second = Math.floor(Date.now() / 1000)
  const c = counts.get(id)
  const used = c?.second === second ? ++c.n : (counts.set(id, { second, n: 1 }), 1)
  return {
    "x-ratelimit-limit": "100000000",
    "x-ratelimit-remaining": String(100000000 - used),
    "x-ratelimit-reset": String(second + 1)
  }
}
/** Reads the body, then calls `then(hash)` with its digest, or answers 400. */
const withDigest = (req, res, then) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    let body
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
    } catch {
      return reply(res, 400, { error: { code: "VALIDATION_ERROR", message: "body is not JSON" } })
    }
    if (typeof body?.hash_hex !== "string" || !HASH.test(body.hash_hex)) {
      return reply(res, 400, { error: { code: "VALIDATION_ERROR", message: "hash_hex must be 64 lowercase hex characters" } })
    }
    then(body.hash_hex)
  })
}
const verify = (req, res) =>
  withDigest(req, res, (hash) => {
    const headers = count(req.socket.remoteAddress)
    lookup(hash, (a) => {
      if (a instanceof Error) return reply(res, 500, { error: { code: "INTERNAL", message: a.message } })
      reply(res, 200, a === undefined ? { exists: false, hash_hex: hash } : {
        exists: true,
        hash_hex: a.hash_hex,
        id: a.id,
        timestamp: a.registered_at,
        level: a.level,
        verified_at: new Date().toISOString().replace("Z", "000+00:00")
      }, headers)
    })
  })
const attest = (req, res) => {
  const auth = req.headers.authorization ?? ""
  const key = auth.startsWith("Bearer ") ? keyByHash.get(createHash("sha256").update(auth.slice(7)).digest("hex")) : undefined
  if (key === undefined) return reply(res, 401, { error: { code: "AUTH_ERROR", message: "invalid API key" } })
  withDigest(req, res, (hash) => {
    waiting.push({ res, hash, key, headers: count(key.id) })
    if (running < stores.length) setImmediate(schedule)
  })
}
const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/v1/healthz") return reply(res, 200, { status: "ok" })
  // its public key, so a check can verify what it signs (not used under load)
  if (req.method === "GET" && req.url === "/v1/public-key") return reply(res, 200, createPublicKey(privateKey).export({ format: "jwk" }))
  if (req.method === "POST" && req.url === "/v1/verify") return verify(req, res)
  if (req.method === "POST" && req.url === "/v1/attest") return attest(req, res)
  reply(res, 404, { error: { code: "NOT_FOUND", message: "not found" } })
})

server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? "127.0.0.1", () => {
  console.log(`ceiling server (${isPg ? "pg" : "sqlite"}) on ${JSON.stringify(server.address())}`)
})
const stop = () => server.close(() => process.exit(0))
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
