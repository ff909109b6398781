/**
 * Public reads from a streaming replica (CONTRACT §7): a throwaway primary cluster
 * (`pg_createcluster` on a free port, wal_level=replica), a hot standby made from it with
 * `pg_basebackup -R` on a third port, and attestd (dist/) with DATABASE_URL = the primary and
 * ATTESTD_PG_READ_URL = the standby. Every attest acknowledged under a small concurrent load is
 * found by a verify sent right after it; with the standby's replay paused (it lags for as long
 * as it likes) verify, batch verify, lookup and evidence still find new attestations through
 * the primary; with the standby stopped they still answer. Both clusters are dropped at the
 * end. Under CI=true the cluster tools must be there.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createKeyCli, freePort, randomHex32, type ServeEnv, type ServeProcess, startServe, waitFor } from "../helpers/process.js"

const CREATE = "/usr/bin/pg_createcluster"
const BASEBACKUP = "/usr/bin/pg_basebackup"
const available = existsSync(CREATE) && existsSync(BASEBACKUP)
if (!available && process.env.CI === "true") throw new Error(`CI=true but ${CREATE} or ${BASEBACKUP} is missing`)

const version = (): string => execFileSync("pg_config", ["--version"], { encoding: "utf8" }).match(/PostgreSQL (\d+)/)![1]!

const query = async (url: string, text: string): Promise<Array<Record<string, unknown>>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text)).rows
  } finally {
    await client.end()
  }
}

describe.skipIf(!available)("public reads from a streaming replica (throwaway clusters)", () => {
  const primaryName = `attestd_primary_${process.pid}`
  const replicaName = `attestd_replica_${process.pid}`
  let major = ""
  let primaryUrl = ""
  let replicaUrl = ""
  let env: ServeEnv
  let serve: ServeProcess | undefined
  let key = ""
  let metricsUrl = ""
  let dataDir = ""
  const ctl = (name: string, action: "start" | "stop") =>
    execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", major, name, action, ...(action === "stop" ? ["-m", "fast"] : [])], { stdio: "ignore" })

  beforeAll(async () => {
    major = version()
    const primaryPort = await freePort()
    const replicaPort = await freePort()
    // wal_level=replica and the replication lines of pg_hba (trust) are what a standby needs
    execFileSync(CREATE, [major, primaryName, "-p", String(primaryPort), "-o", "wal_level=replica", "-o", "max_wal_senders=4", "--", "--auth=trust"], { stdio: "ignore" })
    ctl(primaryName, "start")
    // The standby: a cluster of its own (config, port), its data directory replaced by a base backup of the primary.
    execFileSync(CREATE, [major, replicaName, "-p", String(replicaPort), "--", "--auth=trust"], { stdio: "ignore" })
    const replicaData = `/var/lib/postgresql/${major}/${replicaName}`
    // emptied, not removed: its parent belongs to root, and the base backup runs as postgres
    for (const entry of readdirSync(replicaData)) rmSync(join(replicaData, entry), { recursive: true, force: true })
    execFileSync("runuser", ["-u", "postgres", "--", BASEBACKUP, "-h", "127.0.0.1", "-p", String(primaryPort), "-U", "postgres", "-D", replicaData, "-R", "-X", "stream"], {
      stdio: "ignore",
      cwd: tmpdir()
    })
    ctl(replicaName, "start")
    primaryUrl = `postgres://postgres@127.0.0.1:${primaryPort}/postgres`
    replicaUrl = `postgres://postgres@127.0.0.1:${replicaPort}/postgres`
    await waitFor("the standby in recovery", async () => (await query(replicaUrl, "SELECT pg_is_in_recovery() AS r"))[0]!.r === true, 30_000)
    dataDir = mkdtempSync(join(tmpdir(), "attestd-replica-"))
    const metricsPort = await freePort()
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`
    env = {
      databaseUrl: primaryUrl,
      dataDir,
      port: await freePort(),
      extra: { ATTESTD_PG_READ_URL: replicaUrl, ATTESTD_METRICS_PORT: String(metricsPort) }
    }
    key = await createKeyCli(env, "attest,batch")
    serve = await startServe(env)
  }, 180_000)

  afterAll(async () => {
    await serve?.kill("SIGKILL")
    for (const name of [replicaName, primaryName]) {
      try {
        execFileSync("pg_dropcluster", ["--stop", major, name], { stdio: "ignore" })
      } catch {
        // already gone
      }
    }
    rmSync(dataDir, { recursive: true, force: true })
  })

  const post = (path: string, body: unknown, withKey = false) =>
    fetch(`${serve!.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(withKey ? { authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(15_000)
    })
  const get = (path: string) => fetch(`${serve!.url}${path}`, { signal: AbortSignal.timeout(15_000) })

  /** Attests `hash`, then verifies it at once; resolves with the attestation id and what verify said. */
  const attestThenVerify = async (hash: string) => {
    const attested = await post("/v1/attest", { hash_hex: hash }, true)
    expect(attested.status).toBe(201)
    const { id } = (await attested.json()) as { id: string }
    const verified = (await (await post("/v1/verify", { hash_hex: hash })).json()) as { exists: boolean }
    return { id, exists: verified.exists }
  }

  const replicaReads = async (outcome: string) => {
    const text = await (await fetch(metricsUrl)).text()
    const line = text.split("\n").find((l) => l.startsWith("attestd_replica_reads_total{") && l.includes(`outcome="${outcome}"`))
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1))
  }

  const caughtUp = async () => {
    const lsn = String((await query(primaryUrl, "SELECT pg_current_wal_lsn()::text AS lsn"))[0]!.lsn)
    await waitFor("the standby to replay the primary's WAL", async () =>
      (await query(replicaUrl, `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS ok`))[0]!.ok === true, 30_000)
  }

  it("every acknowledged attest is found by a verify sent right after it, under concurrent load", async () => {
    const hashes = Array.from({ length: 96 }, randomHex32)
    const results: Array<{ id: string; exists: boolean }> = []
    // 16 clients, each attesting then verifying in a loop
    await Promise.all(Array.from({ length: 16 }, async (_, c) => {
      for (let i = c; i < hashes.length; i += 16) results.push(await attestThenVerify(hashes[i]!))
    }))
    expect(results.filter((r) => !r.exists)).toEqual([])
    // once the standby has replayed them, the same reads are answered by the standby itself
    await caughtUp()
    const before = await replicaReads("replica")
    const batch = (await (await post("/v1/verify/batch", { hashes })).json()) as { found: number }
    expect(batch.found).toBe(hashes.length)
    expect(await replicaReads("replica")).toBeGreaterThan(before)
    const standby = await query(replicaUrl, "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'attestd-read'")
    expect(standby[0]!.n).toBeGreaterThan(0)
  }, 120_000)

  it("with the standby's replay paused, new attestations are still found (read again on the primary)", async () => {
    await query(replicaUrl, "SELECT pg_wal_replay_pause()")
    try {
      const old = randomHex32()
      await attestThenVerify(old) // before the pause took hold or not: found either way
      const missesBefore = await replicaReads("primary_miss")
      const fresh = Array.from({ length: 10 }, randomHex32)
      const ids: Array<string> = []
      for (const hash of fresh) {
        const { exists, id } = await attestThenVerify(hash)
        expect(exists).toBe(true)
        ids.push(id)
      }
      // the standby does not hold them ...
      const onStandby = await query(replicaUrl, `SELECT count(*)::int AS n FROM attestations WHERE hash_hex IN (${fresh.map((h) => `'${h}'`).join(",")})`)
      expect(onStandby[0]!.n).toBe(0)
      // ... and every public read finds them
      const batch = (await (await post("/v1/verify/batch", { hashes: [old, ...fresh, randomHex32()] })).json()) as {
        found: number
        results: Array<{ exists: boolean }>
      }
      expect(batch.results.map((r) => r.exists)).toEqual([true, ...fresh.map(() => true), false])
      for (const id of ids.slice(0, 3)) {
        for (const path of [`/v1/attestation/${id}`, `/v1/attestation/${id}/status`, `/v1/attestation/${id}/signature`, `/v1/attestation/${id}/evidence`]) {
          expect((await get(path)).status, path).toBe(200)
        }
      }
      expect(await replicaReads("primary_miss")).toBeGreaterThan(missesBefore)
    } finally {
      await query(replicaUrl, "SELECT pg_wal_replay_resume()")
    }
  }, 120_000)

  it("with the standby stopped, public reads answer from the primary", async () => {
    const { exists: before } = await attestThenVerify(randomHex32())
    expect(before).toBe(true)
    ctl(replicaName, "stop")
    const hash = randomHex32()
    const { exists, id } = await attestThenVerify(hash)
    expect(exists).toBe(true)
    expect((await get(`/v1/attestation/${id}/evidence`)).status).toBe(200)
    expect((await get("/v1/keys")).status).toBe(200)
    expect(await replicaReads("primary_error")).toBeGreaterThan(0)
    expect(serve!.output()).not.toContain("INTERNAL_ERROR")
  }, 60_000)
})
