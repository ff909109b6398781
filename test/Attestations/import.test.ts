/**
 * Importing historical attestations (CONTRACT §2, issue 11 §6) on both stores:
 * each line checked with its own key, bad lines reported by number and not
 * stored, legacy numbers resolve, the key is listed as retired, re-import is
 * idempotent, conflicts are per line, imported records seal into T1 and their
 * evidence verifies with the original key.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Duration } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { importFile, importLines, type ImportReport } from "../../src/Attestations/Import.js"
import { verifyBundle } from "../../src/Verify/Verifier.js"
import { poll } from "../helpers/anchoring.js"
import { dialects } from "../helpers/databases.js"
import { historicalKey, historicalRecord, jsonl, pastTime } from "../helpers/historical.js"
import { client, expectEnvelope, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

const lines = (text: string) => text.split("\n")

for (const dialect of await dialects()) {
  describe(`attestd import (${dialect})`, () => {
    let server: TestServer
    const key = historicalKey()
    const otherKey = historicalKey()
    const base = 7_000_000 + Math.floor(Math.random() * 1_000_000)
    const good = [
      historicalRecord(key, { hash_hex: randomHash(), legacy_id: base + 1 }),
      historicalRecord(key, { hash_hex: randomHash(), legacy_id: base + 2, format_version: "1.0.0" }),
      historicalRecord(otherKey, { hash_hex: randomHash() })
    ]
    const badHashes: Array<string> = []
    const badRecord = (f: (r: ReturnType<typeof historicalRecord>) => unknown) => {
      const r = historicalRecord(key, { hash_hex: randomHash(), legacy_id: base + 100 + badHashes.length })
      badHashes.push(r.hash_hex)
      return JSON.stringify(f(r))
    }
    // line numbers: 1 good, 2 not JSON, 3 good, 4 blank, 5 bad signature, 6 unknown field,
    // 7 future time, 8 private key, 9 good, 10 kid not the thumbprint, 11 high legacy_id
    const file = jsonl([
      good[0]!,
      "{not json",
      good[1]!,
      "",
      badRecord((r) => ({ ...r, registered_at: pastTime(10) })),
      badRecord((r) => ({ ...r, legacyId: 5 })),
      badRecord((r) => ({ ...r, registered_at: "2999-01-01T00:00:00.000000+00:00" })),
      badRecord((r) => ({ ...r, public_key: { ...r.public_key, d: "AAAA" } })),
      good[2]!,
      badRecord((r) => ({ ...r, public_key: { ...r.public_key, kid: "my-old-key" } })),
      badRecord((r) => ({ ...r, legacy_id: 2 ** 60 }))
    ])
    let first: ImportReport

    beforeAll(async () => {
      server = await startTestServer(dialect, { sealInterval: Duration.millis(300) })
    })
    afterAll(async () => {
      await server?.close()
    })

    it("stores the good lines, reports each bad line by number with nothing of it stored", async () => {
      first = await server.run(importLines(lines(file)))
      expect(first).toMatchObject({ lines: 10, imported: 3, existing: 0, failed: 7 })
      expect(first.errors.map((e) => [e.line, e.code])).toEqual([
        [2, "INVALID_LINE"],
        [5, "INVALID_SIGNATURE"],
        [6, "INVALID_LINE"],
        [7, "INVALID_LINE"],
        [8, "INVALID_LINE"],
        [10, "INVALID_LINE"],
        [11, "INVALID_LINE"]
      ])
      expect(first.errors[2]!.message).toContain("legacyId")
      expect(first.errors[4]!.message).toContain("private key")
      expect([...first.retired_keys].sort()).toEqual([key.jwk.kid, otherKey.jwk.kid].sort())
      const pub = client(server.url)
      const v = await pub.post("/v1/verify/batch", { hashes: [...good.map((g) => g.hash_hex), ...badHashes] })
      expect(v.body.results.map((r: { exists: boolean }) => r.exists)).toEqual([true, true, true, ...badHashes.map(() => false)])
      for (let i = 0; i < badHashes.length; i++) expectEnvelope(await pub.get(`/v1/attestation/${base + 100 + i}`), 404, "NOT_FOUND")
    })

    it("a legacy number resolves on every route with the original facts; legacy_id only where imported with one", async () => {
      const pub = client(server.url)
      for (const [i, g] of good.slice(0, 2).entries()) {
        const r = await pub.get(`/v1/attestation/${base + 1 + i}`)
        expect(r.status).toBe(200)
        expect(r.body).toMatchObject({
          hash_hex: g.hash_hex,
          timestamp: g.registered_at,
          format_version: g.format_version,
          signing_key_id: key.jwk.kid,
          legacy_id: base + 1 + i
        })
        expect(r.body.id).toMatch(/^att_/)
        const sig = await pub.get(`/v1/attestation/${base + 1 + i}/signature`)
        expect(sig.body.signed_payload).toBe(`${g.format_version}|${g.hash_hex}|${g.registered_at}`)
      }
      const third = (await pub.post("/v1/verify", { hash_hex: good[2]!.hash_hex })).body
      const r = await pub.get(`/v1/attestation/${third.id}`)
      expect(r.body.timestamp).toBe(good[2]!.registered_at)
      expect(r.body.legacy_id).toBeUndefined()
      // Keyed routes accept the number as well (no claim of this key on it: 404 of the claim, not of the id).
      const owner = client(server.url, (await server.createKey()).key)
      const meta = await owner.get(`/v1/attestation/${base + 1}/metadata`)
      expect(meta.status).toBe(404)
      expect(meta.body.message).not.toContain(`attestation ${base + 1} not found`)
      expectEnvelope(await owner.get(`/v1/attestation/${base + 999}/metadata`), 404, "NOT_FOUND")
    })

    it("GET /v1/keys (and /v1/info signing_key_ids) list the historical keys as retired; the instance's own signing keys stay active", async () => {
      const pub = client(server.url)
      const keys = (await pub.get("/v1/keys")).body.keys as Array<Record<string, unknown>>
      const listed = keys.find((k) => k.kid === key.jwk.kid)
      expect(listed).toMatchObject({ kty: "EC", crv: "P-256", x: key.jwk.x, y: key.jwk.y, status: "retired" })
      expect(keys.find((k) => k.kid === otherKey.jwk.kid)?.status).toBe("retired")
      const info = (await pub.get("/v1/info")).body
      // /v1/info lists the same keys; the one signing new attestations is active.
      expect(info.signing_key_ids).toEqual(keys.map((k) => k.kid))
      expect(info.current_signing_key_id).not.toBe(key.jwk.kid)
      expect(keys.find((k) => k.kid === info.current_signing_key_id)?.status).toBeUndefined()
      expect((await pub.get(`/v1/keys/${key.jwk.kid}`)).body).toMatchObject({ kid: key.jwk.kid, status: "retired" })
    })

    it("re-importing is idempotent: the same lines are existing, ids unchanged, bad lines reported again", async () => {
      const before = (await client(server.url).get(`/v1/attestation/${base + 1}`)).body.id
      const again = await server.run(importLines(lines(file)))
      expect(again).toMatchObject({ lines: 10, imported: 0, existing: 3, failed: 7, retired_keys: [] })
      expect(again.errors.map((e) => e.line)).toEqual(first.errors.map((e) => e.line))
      expect((await client(server.url).get(`/v1/attestation/${base + 1}`)).body.id).toBe(before)
      const keys = (await client(server.url).get("/v1/keys")).body.keys as Array<{ kid: string }>
      expect(keys.filter((k) => k.kid === key.jwk.kid)).toHaveLength(1)
    })

    it("conflicts are per line: another registered_at, a taken legacy_id, a hash attested through the API", async () => {
      const api = client(server.url, (await server.createKey()).key)
      const live = await api.post("/v1/attest", { hash_hex: randomHash() })
      expect(live.status).toBe(201)
      const fresh = historicalRecord(key, { hash_hex: randomHash(), legacy_id: base + 50 })
      const report = await server.run(importLines(lines(jsonl([
        historicalRecord(key, { hash_hex: good[0]!.hash_hex, legacy_id: base + 1 }), // same hash, other registered_at
        historicalRecord(key, { hash_hex: randomHash(), legacy_id: base + 2 }), // legacy_id held by another hash
        historicalRecord(key, { hash_hex: live.body.hash_hex }), // attested through the API
        fresh,
        { ...fresh, legacy_id: base + 51 } // same hash twice in one file with other facts
      ]))))
      expect(report).toMatchObject({ imported: 1, existing: 0, failed: 4 })
      expect(report.errors.map((e) => [e.line, e.code])).toEqual([[1, "CONFLICT"], [2, "CONFLICT"], [3, "CONFLICT"], [5, "CONFLICT"]])
      expect(report.errors[0]!.message).toContain(`registered_at ${good[0]!.registered_at}`)
      expect(report.errors[1]!.message).toContain(`legacy_id ${base + 2}`)
      // The stored records are unchanged.
      const pub = client(server.url)
      expect((await pub.get(`/v1/attestation/${base + 1}`)).body.timestamp).toBe(good[0]!.registered_at)
      expect((await pub.get(`/v1/attestation/${live.body.id}`)).body).toMatchObject({ timestamp: live.body.timestamp })
      expect((await pub.get(`/v1/attestation/${base + 50}`)).body.hash_hex).toBe(fresh.hash_hex)
      expectEnvelope(await pub.get(`/v1/attestation/${base + 51}`), 404, "NOT_FOUND")
    })

    it("importFile reads every line of a small file, however quickly the file is read (repeated)", async () => {
      const dir = mkdtempSync(join(tmpdir(), "attestd-import-file-"))
      try {
        const path = join(dir, "small.jsonl")
        const records = [historicalRecord(key, { hash_hex: randomHash() }), historicalRecord(key, { hash_hex: randomHash() })]
        writeFileSync(path, jsonl(records))
        const first = await server.run(importFile(path))
        expect(first).toMatchObject({ lines: 2, imported: 2, failed: 0 })
        for (let i = 0; i < 10; i++) {
          expect(await server.run(importFile(path)), `round ${i}`).toMatchObject({ lines: 2, imported: 0, existing: 2, failed: 0 })
        }
        await expect(server.run(importFile(join(dir, "missing.jsonl")))).rejects.toThrow(/cannot read/)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    })

    it("imported records seal into T1 like any attestation; the evidence verifies with the original key from /v1/keys", async () => {
      const pub = client(server.url)
      await poll("imported record at T1", async () => {
        const s = (await pub.get(`/v1/attestation/${base + 1}/status`)).body
        return s.level === "T1" ? s : undefined
      }, 30_000)
      const bundle = (await pub.get(`/v1/attestation/${base + 1}/evidence`)).body
      expect(bundle).toMatchObject({ level: "T1", legacy_id: base + 1, hash_hex: good[0]!.hash_hex })
      expect(bundle.t0).toMatchObject({ publicKeyId: key.jwk.kid, registeredAt: good[0]!.registered_at })
      expect(bundle.t0.publicKey).toMatchObject({ x: key.jwk.x, y: key.jwk.y })
      expect(bundle.t0.publicKey.status).toBeUndefined()
      const keys = (await pub.get("/v1/keys")).body.keys
      const report = await verifyBundle(bundle, { keys, hash: good[0]!.hash_hex })
      expect(report.checks.t0.status, JSON.stringify(report.checks.t0)).toBe("ok")
      // Without the historical key among the trusted keys, T0 fails.
      const without = await verifyBundle(bundle, { keys: keys.filter((k: { kid: string }) => k.kid !== key.jwk.kid), hash: good[0]!.hash_hex })
      expect(without.checks.t0.status).toBe("failed")
    })
  })
}
