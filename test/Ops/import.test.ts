/**
 * `attestd import FILE.jsonl` as a process, on both stores (CONTRACT §2): exit
 * codes and the report, then a running `attestd serve` seals the imported
 * records into T1 and `attestd verify --server` verifies their evidence with
 * the original (retired) key it publishes; re-importing beside the running
 * server changes nothing. The first import and serve are processes; the other
 * commands run in-process (test/helpers/cli.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { cliInProcessFor } from "../helpers/cli.js"
import { createDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { historicalKey, historicalRecord, jsonl, pastTime } from "../helpers/historical.js"
import { freePort, requireDist, runCli, type ServeEnv, type ServeProcess, startServe, waitFor } from "../helpers/process.js"
import { randomHash } from "../helpers/server.js"

requireDist()

for (const dialect of await dialects()) {
  describe(`attestd import as a process (${dialect})`, () => {
    const cleanup: Array<() => Promise<unknown>> = []
    afterAll(async () => {
      for (const f of cleanup.reverse()) await f().catch(() => {})
    })

    it("imports, reports the bad line, seals, and verifies end to end with attestd verify --server", async () => {
      const db: TestDatabase = await createDatabase(dialect)
      cleanup.push(() => db.drop())
      const work = mkdtempSync(join(tmpdir(), "attestd-import-"))
      cleanup.push(async () => rmSync(work, { recursive: true, force: true }))
      const env: ServeEnv = { databaseUrl: db.url, dataDir: db.dataDir, port: await freePort(), sealInterval: "300ms" }

      const key = historicalKey()
      const legacy = 900_000 + Math.floor(Math.random() * 100_000)
      const good = [
        historicalRecord(key, { hash_hex: randomHash(), legacy_id: legacy }),
        historicalRecord(key, { hash_hex: randomHash(), legacy_id: legacy + 1, registered_at: pastTime(3000) })
      ]
      const forged = { ...historicalRecord(key, { hash_hex: randomHash(), legacy_id: legacy + 2 }), registered_at: pastTime(1) }
      const file = join(work, "history.jsonl")
      writeFileSync(file, jsonl([good[0]!, forged, good[1]!]))

      const first = await runCli(env, ["import", file])
      expect(first.code, first.stderr).toBe(1)
      const report = JSON.parse(first.stdout.trim().split("\n").pop()!)
      expect(report).toMatchObject({ file, lines: 3, imported: 2, existing: 0, failed: 1, retired_keys: [key.jwk.kid] })
      expect(report.errors).toEqual([expect.objectContaining({ line: 2, code: "INVALID_SIGNATURE" })])
      expect(first.stderr).toContain("line 2: INVALID_SIGNATURE")

      const missing = await cliInProcessFor(env, ["import", join(work, "nope.jsonl")])
      expect(missing.code).toBe(2) // unreadable input
      expect(missing.stderr).toContain("cannot read")

      const serve: ServeProcess = await startServe(env)
      cleanup.push(() => serve.kill("SIGKILL"))
      const keys = (await (await fetch(`${serve.url}/v1/keys`)).json()) as { keys: Array<{ kid: string; status?: string }> }
      expect(keys.keys.find((k) => k.kid === key.jwk.kid)?.status).toBe("retired")
      expect((await fetch(`${serve.url}/v1/attestation/${legacy + 2}`)).status).toBe(404)

      for (const [i, g] of good.entries()) {
        await waitFor(`legacy ${legacy + i} at T1`, async () => {
          const res = await fetch(`${serve.url}/v1/attestation/${legacy + i}/status`)
          const s = (await res.json()) as { level?: string }
          return s.level === "T1" ? s : undefined
        }, 30_000, 200)
        const res = await fetch(`${serve.url}/v1/attestation/${legacy + i}/evidence`)
        expect(res.status).toBe(200)
        const bundleFile = join(work, `${legacy + i}.json`)
        writeFileSync(bundleFile, await res.text())
        const verified = await cliInProcessFor(env, ["verify", bundleFile, "--hash", g.hash_hex, "--server", serve.url])
        expect(verified.code, verified.stdout + verified.stderr).toBe(0)
        expect(JSON.parse(verified.stdout)).toMatchObject({ verdict: "verified", verified_level: "T1" })
      }

      // Re-importing the good lines beside the running server: nothing new, exit 0.
      writeFileSync(file, jsonl(good))
      const again = await cliInProcessFor(env, ["import", file])
      expect(again.code, again.stderr).toBe(0)
      expect(JSON.parse(again.stdout.trim().split("\n").pop()!)).toMatchObject({ lines: 2, imported: 0, existing: 2, failed: 0, errors: [] })
      await serve.kill("SIGTERM")
    }, 180_000)
  })
}
