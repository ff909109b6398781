/**
 * Several `attestd serve` processes on ONE Postgres database (different ports
 * and data dirs, hence different signing keys and demo TSAs), 300 ms windows,
 * attested through concurrently. Exactly one instance may seal a window: every
 * attestation ends in exactly one batch, window_end is unique, leaf counts
 * match, and every instance lists (and verifies with) every instance's key.
 * Postgres only: skipped without it (under CI=true `dialects()` insists on it).
 */
import { createPublicKey, verify } from "node:crypto"
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { createPgDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import {
  attestLoad,
  checkSealingInvariants,
  createKeyCli,
  freePort,
  newAckLog,
  randomHex32,
  requireDist,
  type ServeEnv,
  type ServeProcess,
  sleep,
  startServe,
  waitFor,
  withDb
} from "../helpers/process.js"

/** ECDSA P-256 / SHA-256 check of a Base64 DER signature with a JWK, node:crypto only. */
const verifyWithJwk = (jwk: { kty: string; crv: string; x: string; y: string }, payload: string, signatureB64: string): boolean =>
  verify(
    "sha256",
    Buffer.from(payload, "utf8"),
    { key: createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, format: "jwk" }), dsaEncoding: "der" },
    Buffer.from(signatureB64, "base64")
  )

const INSTANCES = 3
const INTERVAL_MS = 300
const LOAD_MS = 3_000

const hasPg = (await dialects()).includes("pg")

describe.skipIf(!hasPg)(`${INSTANCES} instances sealing one Postgres database`, () => {
  let db: TestDatabase | undefined
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill("SIGKILL")))
    await db?.drop()
  })

  it("each attestation is in exactly one batch, no window is sealed twice, every instance's key verifies everywhere", async () => {
    requireDist()
    db = await createPgDatabase()
    const envs: Array<ServeEnv> = []
    for (let i = 0; i < INSTANCES; i++) {
      const dataDir = join(db.dataDir, `instance-${i}`)
      mkdirSync(dataDir, { recursive: true })
      envs.push({ databaseUrl: db.url, dataDir, port: await freePort(), sealInterval: `${INTERVAL_MS}ms` })
    }
    // All start at once: migrations are serialised by the advisory lock.
    procs.push(...(await Promise.all(envs.map((e) => startServe(e)))))
    const key = await createKeyCli(envs[0]!)

    const infos = await Promise.all(procs.map(async (p) => (await (await fetch(`${p.url}/v1/info`)).json()) as { current_signing_key_id: string }))
    const kids = infos.map((i) => i.current_signing_key_id)
    expect(new Set(kids).size).toBe(INSTANCES) // each instance signs with its own key

    // Concurrent load through every instance; a few hashes are sent again and again, to all of them.
    const shared = Array.from({ length: 20 }, randomHex32)
    const log = newAckLog()
    let stop = false
    const load = attestLoad({ urls: () => procs.map((p) => p.url), key, stop: () => stop, log, concurrency: 6, batchSize: 15, shared })
    await sleep(LOAD_MS)
    stop = true
    await load
    expect(log.failures).toEqual([])
    expect(log.acked.size).toBeGreaterThan(100)

    await waitFor("every attestation sealed", async () => {
      const stats = (await (await fetch(`${procs[1]!.url}/v1/stats`)).json()) as { by_level: { T0: number } }
      return stats.by_level.T0 === 0
    }, 15_000, 100)

    const snap = await checkSealingInvariants(db.url)
    expect(snap.violations).toEqual([])
    expect(snap.byLevel.T0).toBe(0)
    expect(snap.byLevel.T1).toBe(snap.attestations)
    expect(snap.attestations).toBe(log.acked.size)
    for (const [hash, id] of log.acked) {
      expect(snap.hashCounts.get(hash)).toBe(1)
      expect(snap.ids.get(hash)).toBe(id)
    }
    expect(new Set(snap.windowEnds).size).toBe(snap.windowEnds.length)
    for (const w of snap.windowEnds) {
      expect(Date.parse(w.replace("+00:00", "Z")) % INTERVAL_MS).toBe(0) // closed on window boundaries
    }
    // Explicit SQL, independent of the helper: one batch per attestation and window.
    await withDb(db.url, async (query) => {
      expect(await query("SELECT window_end FROM batches GROUP BY window_end HAVING COUNT(*) > 1")).toEqual([])
      expect(await query("SELECT id FROM attestations WHERE batch_id IS NULL OR level <> 'T1'")).toEqual([])
      expect(await query(`SELECT b.id FROM batches b LEFT JOIN attestations a ON a.batch_id = b.id
        GROUP BY b.id, b.leaf_count HAVING COUNT(a.seq) <> b.leaf_count`)).toEqual([])
      expect(await query(`SELECT attestation_seq FROM outbox WHERE event_type = 't1_complete'
        GROUP BY attestation_seq HAVING COUNT(*) <> 1`)).toEqual([])
    })

    // Keys: every instance lists every instance's key, and verifies the others' signatures.
    const keySets = await Promise.all(procs.map(async (p) => (await (await fetch(`${p.url}/v1/keys`)).json()) as {
      keys: Array<{ kid: string; kty: string; crv: string; x: string; y: string }>
    }))
    for (const set of keySets) expect(set.keys.map((k) => k.kid)).toEqual(expect.arrayContaining(kids))
    const bySigner = new Map<string, { id: string; hash: string; registeredAt: string; signature: string }>()
    for (const id of [...log.acked.values()].slice(0, 300)) {
      const a = (await (await fetch(`${procs[0]!.url}/v1/attestation/${id}`)).json()) as {
        id: string
        hash_hex: string
        timestamp: string
        signature: string
        signing_key_id: string
      }
      if (!bySigner.has(a.signing_key_id)) bySigner.set(a.signing_key_id, { id: a.id, hash: a.hash_hex, registeredAt: a.timestamp, signature: a.signature })
      if (bySigner.size === INSTANCES) break
    }
    expect(bySigner.size).toBe(INSTANCES) // the load reached every instance
    for (const [signer, a] of bySigner) {
      for (const [i, set] of keySets.entries()) {
        const jwk = set.keys.find((k) => k.kid === signer)!
        const ok = verifyWithJwk(jwk, `2.0.0|${a.hash}|${a.registeredAt}`, a.signature)
        expect(ok, `signature by ${signer} with the key listed by instance ${i}`).toBe(true)
      }
    }

    await Promise.all(procs.map((p) => p.kill("SIGTERM")))
    const sealedBy = procs.map((p) => (p.output().match(/sealed batch/g) ?? []).length)
    const aborted = procs.map((p) => (p.output().match(/sealing aborted/g) ?? []).length)
    console.log(
      `[multi] ${snap.attestations} attestations, ${snap.batches} batches; sealed per instance ${sealedBy.join("/")}, ` +
        `aborted seals per instance ${aborted.join("/")}`
    )
    expect(sealedBy.reduce((a, b) => a + b, 0)).toBe(snap.batches)
  }, 90_000)
})
