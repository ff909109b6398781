/**
 * The batched Postgres rate limiter (RateLimiter.ts, makeSqlLimiter) across
 * three `attestd serve` processes on one database: one key with a limit of
 * 300 per minute, hammered through all three at once. The stated tolerance is
 * (N − 1) × 10% of the limit over it for N instances (here at most 360 admitted);
 * the limit must also be usable (at least 95% of it admitted), every refusal is a
 * 429 with Retry-After, and once the window is spent all three refuse.
 * Postgres only.
 */
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { createPgDatabase, dialects, type TestDatabase } from "../helpers/databases.js"
import { freePort, randomHex32, requireDist, runCli, type ServeEnv, type ServeProcess, startServe } from "../helpers/process.js"

const INSTANCES = 3
const LIMIT = 300
const REQUESTS = 900
const CONCURRENCY = 30

const hasPg = (await dialects()).includes("pg")

describe.skipIf(!hasPg)(`the key rate limit across ${INSTANCES} instances on one Postgres`, () => {
  let db: TestDatabase | undefined
  const procs: Array<ServeProcess> = []
  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill("SIGKILL")))
    await db?.drop()
  })

  it(`admits the limit within (N − 1) × 10% over it and refuses the rest with 429`, async () => {
    requireDist()
    db = await createPgDatabase()
    const envs: Array<ServeEnv> = []
    for (let i = 0; i < INSTANCES; i++) {
      const dataDir = join(db.dataDir, `instance-${i}`)
      mkdirSync(dataDir, { recursive: true })
      envs.push({ databaseUrl: db.url, dataDir, port: await freePort(), extra: { ATTESTD_DEFAULT_RATE_LIMIT: "1000" } })
    }
    procs.push(...(await Promise.all(envs.map((e) => startServe(e)))))
    const created = await runCli(envs[0]!, ["keys", "create", "--label", "limited", "--scopes", "attest", "--rate-limit", String(LIMIT)])
    expect(created.code, created.stderr).toBe(0)
    const key = (JSON.parse(created.stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()!) as { key: string }).key

    const statuses = new Map<number, number>()
    let missingRetryAfter = 0
    let next = 0
    const loop = async () => {
      while (next < REQUESTS) {
        const i = next++
        const res = await fetch(`${procs[i % INSTANCES]!.url}/v1/attest`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
          body: JSON.stringify({ hash_hex: randomHex32() })
        })
        await res.arrayBuffer()
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
        if (res.status === 429 && res.headers.get("retry-after") === null) missingRetryAfter++
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, loop))

    const admitted = (statuses.get(201) ?? 0) + (statuses.get(200) ?? 0)
    const refused = statuses.get(429) ?? 0
    console.log(`rate limit ${LIMIT}/min across ${INSTANCES} instances: ${admitted} admitted, ${refused} refused`, Object.fromEntries(statuses))
    expect(admitted + refused).toBe(REQUESTS)
    expect(missingRetryAfter).toBe(0)
    expect(admitted).toBeGreaterThanOrEqual(Math.floor(LIMIT * 0.95))
    expect(admitted).toBeLessThanOrEqual(LIMIT + (INSTANCES - 1) * LIMIT * 0.1)

    // The window is spent: every instance refuses, whichever it is asked first.
    for (const p of procs) {
      const res = await fetch(`${p.url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex: randomHex32() })
      })
      await res.arrayBuffer()
      expect(res.status).toBe(429)
    }
  })
})
