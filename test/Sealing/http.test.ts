/**
 * T1 over HTTP, through real servers in real time (bounded waits polling the
 * status endpoint): status T0 → T1, the tsa / tsa details / merkle proof
 * endpoints on /v1 and unprefixed, 404 while T0, stats, and the embedded
 * demo TSA.
 */
import { Duration, Option } from "effect"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialects } from "../helpers/databases.js"
import { type OpensslTsa, opensslVerify, startOpensslTsa, TEST_TSA_POLICY } from "../helpers/opensslTsa.js"
import { merkleRootV2, proofLength, rootFromProofV2, waitFor } from "../helpers/process.js"
import { allKeys, client, expectEnvelope, randomHash, startTestServer, type TestServer, WIRE_TIME } from "../helpers/server.js"

const HEX64 = /^[0-9a-f]{64}$/
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/
const STATUS_KEYS = [
  "hash_hex",
  "id",
  "level",
  "merkle_proof_available",
  "ots_available",
  "signature_available",
  "t0_timestamp",
  "t1_timestamp",
  "t2_bitcoin_block",
  "t2_timestamp"
]

const attestBatch = async (server: TestServer, n: number) => {
  const { key } = await server.createKey({ scopes: ["attest"] })
  const hashes = Array.from({ length: n }, randomHash)
  const r = await client(server.url, key).post("/v1/attest/batch", { hashes })
  expect(r.status, r.text).toBe(200)
  expect(r.body.created).toBe(n)
  return (r.body.attestations as Array<{ id: string; hash_hex: string; timestamp: string }>).map((a) => ({
    id: a.id,
    hash: a.hash_hex,
    timestamp: a.timestamp
  }))
}

/** Polls the status of every id until all are T1 (bounded). */
const awaitT1 = async (base: string, ids: ReadonlyArray<string>, timeoutMs = 15_000) => {
  const api = client(base)
  return waitFor(`T1 of ${ids.length} attestation(s)`, async () => {
    const all = await Promise.all(ids.map((id) => api.get(`/v1/attestation/${id}/status`)))
    return all.every((s) => s.status === 200 && s.body.level === "T1") ? all.map((s) => s.body) : undefined
  }, timeoutMs, 100)
}

for (const dialect of await dialects()) {
  describe(`T1 over HTTP (${dialect})`, () => {
    let tsa: OpensslTsa
    let sealing: TestServer
    let idle: TestServer
    let demo: TestServer

    beforeAll(async () => {
      tsa = await startOpensslTsa()
      ;[sealing, idle, demo] = await Promise.all([
        startTestServer(dialect, { sealInterval: Duration.millis(500), tsaUrls: [tsa.url], tsaCaFile: Option.some(tsa.caFile) }),
        startTestServer(dialect, { sealInterval: Duration.hours(24), tsaUrls: [tsa.url], tsaCaFile: Option.some(tsa.caFile) }),
        startTestServer(dialect, { sealInterval: Duration.millis(500) })
      ])
    })
    afterAll(async () => {
      await Promise.all([sealing?.close(), idle?.close(), demo?.close()])
      await tsa?.close()
    })

    it("status goes T0 → T1; tsa, tsa details and merkle endpoints on /v1 and unprefixed; evidence agrees; stats count batches", async () => {
      const made = await attestBatch(sealing, 5)
      const pub = client(sealing.url)
      // Right after attesting the status is consistent whichever side of a boundary we are on.
      const first = await pub.get(`/v1/attestation/${made[0]!.id}/status`)
      expect(first.status).toBe(200)
      expect(Object.keys(first.body).sort()).toEqual(STATUS_KEYS)
      if (first.body.level === "T0") {
        expect(first.body.t1_timestamp).toBeNull()
        expect(first.body.merkle_proof_available).toBe(false)
      }

      const statuses = await awaitT1(sealing.url, made.map((m) => m.id))
      for (const [i, s] of statuses.entries()) {
        expect(Object.keys(s).sort()).toEqual(STATUS_KEYS)
        expect(s.id).toBe(made[i]!.id)
        expect(s.hash_hex).toBe(made[i]!.hash)
        expect(s.level).toBe("T1")
        expect(s.t0_timestamp).toBe(made[i]!.timestamp)
        expect(s.t1_timestamp).toMatch(WIRE_TIME)
        expect(s.t1_timestamp >= s.t0_timestamp).toBe(true)
        expect(s.t2_timestamp).toBeNull()
        expect(s.t2_bitcoin_block).toBeNull()
        expect(s.signature_available).toBe(true)
        expect(s.merkle_proof_available).toBe(true)
        expect(s.ots_available).toBe(false)
      }

      const batchIds = new Set<number>()
      for (const m of made) {
        const tsaV1 = await pub.get(`/v1/attestation/${m.id}/tsa`)
        expect(tsaV1.status, tsaV1.text).toBe(200)
        expect(Object.keys(tsaV1.body).sort()).toEqual(["batch_id", "id", "merkle_root", "tsa_provider", "tsa_timestamp", "tsa_token"])
        expect(tsaV1.body.id).toBe(m.id)
        expect(Number.isInteger(tsaV1.body.batch_id)).toBe(true)
        expect(tsaV1.body.merkle_root).toMatch(HEX64)
        expect(tsaV1.body.tsa_provider).toBe(tsa.url)
        expect(tsaV1.body.tsa_timestamp).toMatch(ISO_8601)
        const token = Buffer.from(tsaV1.body.tsa_token, "base64")
        const ossl = await opensslVerify(token, tsaV1.body.merkle_root, tsa.caFile)
        expect(ossl.ok, ossl.output).toBe(true)
        const tsaBare = await pub.get(`/attestation/${m.id}/tsa`)
        expect(tsaBare.status).toBe(200)
        expect(tsaBare.body).toEqual(tsaV1.body)

        const details = await pub.get(`/v1/attestation/${m.id}/tsa/details`)
        expect(details.status, details.text).toBe(200)
        expect(Object.keys(details.body).sort()).toEqual([
          "accuracy",
          "certificates",
          "gen_time",
          "hash_algorithm",
          "hashed_message",
          "nonce",
          "policy",
          "serial_number",
          "tsa_name"
        ])
        const d = details.body
        expect(d.hashed_message).toBe(tsaV1.body.merkle_root)
        expect(d.hash_algorithm).toMatch(/sha-?256/i)
        expect(d.policy).toBe(TEST_TSA_POLICY)
        expect(Date.parse(d.gen_time)).toBe(Date.parse(tsaV1.body.tsa_timestamp))
        expect(Date.parse(d.gen_time)).toBe(Date.parse(statuses[made.indexOf(m)]!.t1_timestamp.replace("+00:00", "Z")))
        expect(d.serial_number).toMatch(/^\d+$/)
        expect(d.nonce).toMatch(/^\d+$/) // the request carried a random nonce
        expect(d.accuracy).toEqual({ seconds: 1, millis: 500, micros: 100 })
        expect(d.tsa_name).toContain("attestd test")
        expect(Array.isArray(d.certificates) && d.certificates.length >= 1).toBe(true)
        for (const c of d.certificates) {
          expect(Object.keys(c).sort()).toEqual(["issuer", "not_after", "not_before", "serial_number", "subject"])
        }
        expect(d.certificates.some((c: { subject: string; issuer: string }) => c.subject.includes("attestd test tsa") && c.issuer.includes("root CA"))).toBe(true)
        const detailsBare = await pub.get(`/attestation/${m.id}/tsa/details`)
        expect(detailsBare.status).toBe(200)
        expect(detailsBare.body).toEqual(d)

        const merkle = await pub.get(`/v1/attestation/${m.id}/merkle`)
        expect(merkle.status, merkle.text).toBe(200)
        expect(Object.keys(merkle.body).sort()).toEqual(["batch_id", "id", "leaf", "merkle_proof", "merkle_root", "tree_version"])
        expect(merkle.body.id).toBe(m.id)
        expect(merkle.body.batch_id).toBe(tsaV1.body.batch_id)
        expect(merkle.body.leaf).toBe(m.hash)
        expect(merkle.body.merkle_root).toBe(tsaV1.body.merkle_root)
        expect(merkle.body.tree_version).toBe(2)
        for (const step of merkle.body.merkle_proof) {
          expect(Object.keys(step).sort()).toEqual(["hash", "position"])
          expect(step.hash).toMatch(HEX64)
          expect(["left", "right"]).toContain(step.position)
        }
        expect(rootFromProofV2(m.hash, merkle.body.merkle_proof)).toBe(merkle.body.merkle_root)
        const merkleBare = await pub.get(`/attestation/${m.id}/merkle`)
        expect(merkleBare.status).toBe(200)
        expect(merkleBare.body).toEqual(merkle.body)

        const ev = await pub.get(`/v1/attestation/${m.id}/evidence`)
        expect(ev.status).toBe(200)
        expect(ev.body.level).toBe("T1")
        expect(ev.body.t1).toEqual({
          batchId: tsaV1.body.batch_id,
          merkleRoot: tsaV1.body.merkle_root,
          merkleProof: merkle.body.merkle_proof,
          tsaProvider: tsaV1.body.tsa_provider,
          tsaTimestamp: tsaV1.body.tsa_timestamp,
          tsaToken: tsaV1.body.tsa_token
        })
        batchIds.add(tsaV1.body.batch_id)
      }

      // All five were attested in one request, at one registered_at: one batch.
      expect(batchIds.size).toBe(1)
      const merkle0 = await pub.get(`/v1/attestation/${made[0]!.id}/merkle`)
      expect(merkle0.body.merkle_root).toBe(merkleRootV2(made.map((m) => m.hash)))
      expect(merkle0.body.merkle_proof).toHaveLength(proofLength(5))

      // a second batch, later
      const more = await attestBatch(sealing, 2)
      await awaitT1(sealing.url, more.map((m) => m.id))
      const moreMerkle = await pub.get(`/v1/attestation/${more[0]!.id}/merkle`)
      expect(moreMerkle.body.batch_id).not.toBe([...batchIds][0])
      const stats = await pub.get("/v1/stats")
      expect(stats.status).toBe(200)
      expect(stats.body.total_attestations).toBe(7)
      expect(stats.body.by_level).toEqual({ T0: 0, T1: 7, T2: 0 })
      expect(stats.body.batches).toBe(2)
      expect((await pub.get("/stats")).body.batches).toBe(2)

      const health = await pub.get("/v1/healthz")
      expect(health.status).toBe(200)
      expect(health.body.checks.tsa).toBe("ok")
      const info = await pub.get("/v1/info")
      expect(info.body.features).toEqual(expect.arrayContaining(["t1_rfc3161", "merkle_v2"]))
    })

    it("404 NOT_FOUND envelope on tsa, tsa details and merkle while T0 (and for unknown ids); stats count no batch", async () => {
      const [m] = await attestBatch(idle, 1)
      const pub = client(idle.url)
      const status = await pub.get(`/v1/attestation/${m!.id}/status`)
      expect(status.body.level).toBe("T0")
      expect(status.body.t1_timestamp).toBeNull()
      expect(status.body.merkle_proof_available).toBe(false)
      for (const prefix of ["/v1", ""]) {
        for (const suffix of ["tsa", "tsa/details", "merkle"]) {
          expectEnvelope(await pub.get(`${prefix}/attestation/${m!.id}/${suffix}`), 404, "NOT_FOUND")
          expectEnvelope(await pub.get(`${prefix}/attestation/att_AAAAAAAAAAAAAAAAAAAAAAAA/${suffix}`), 404, "NOT_FOUND")
        }
      }
      const ev = await pub.get(`/v1/attestation/${m!.id}/evidence`)
      expect(ev.status).toBe(200)
      expect(ev.body.level).toBe("T0")
      expect(ev.body.t1).toBeUndefined()
      const stats = await pub.get("/v1/stats")
      expect(stats.body.batches).toBe(0)
      expect(stats.body.by_level).toEqual({ T0: 1, T1: 0, T2: 0 })
    })

    it("demo TSA (no ATTESTD_TSA_URL): tokens verify with openssl against demo-tsa/root.pem; provider says local, unqualified", async () => {
      const made = await attestBatch(demo, 3)
      await awaitT1(demo.url, made.map((m) => m.id))
      const pub = client(demo.url)
      const root = join(demo.db.dataDir, "demo-tsa", "root.pem")
      const leaf = join(demo.db.dataDir, "demo-tsa", "tsa.pem")
      expect(existsSync(root) && existsSync(leaf)).toBe(true)
      const t = await pub.get(`/v1/attestation/${made[0]!.id}/tsa`)
      expect(t.status).toBe(200)
      expect(t.body.tsa_provider).toMatch(/demo/i)
      expect(t.body.tsa_provider).toMatch(/local/i)
      expect(t.body.tsa_provider).toMatch(/unqualified/i)
      const ossl = await opensslVerify(Buffer.from(t.body.tsa_token, "base64"), t.body.merkle_root, root, leaf)
      expect(ossl.ok, ossl.output).toBe(true)
      const details = await pub.get(`/v1/attestation/${made[0]!.id}/tsa/details`)
      expect(details.status).toBe(200)
      expect(details.body.hashed_message).toBe(t.body.merkle_root)
      const merkle = await pub.get(`/v1/attestation/${made[0]!.id}/merkle`)
      expect(rootFromProofV2(made[0]!.hash, merkle.body.merkle_proof)).toBe(t.body.merkle_root)
      const ev = await pub.get(`/v1/attestation/${made[0]!.id}/evidence`)
      expect(ev.body.t1.tsaProvider).toBe(t.body.tsa_provider)
      // nothing in the public bodies is undefined-shaped or leaks claim data
      expect(allKeys(ev.body).has("source")).toBe(false)
    })
  })
}
