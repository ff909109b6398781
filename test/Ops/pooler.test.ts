/**
 * attestd as production runs it on Postgres (CONTRACT §7): two API instances
 * (`serve --no-workers`) and two workers (`worker`), every one of them with DATABASE_URL
 * pointing at a PgBouncer of this file's own in transaction mode, in front of a throwaway
 * cluster of its own (`pg_createcluster` on a free port, dropped at the end) whose
 * `default_transaction_isolation` is `serializable` (conflicts are retried inside attestd):
 * - the four, started at once on an empty database, migrate it once;
 * - 20 concurrent attests of one hash, spread across both API instances, store it once
 *   and answer one id;
 * - under a load through both API instances, the two workers seal each window once and
 *   every attestation in exactly one batch;
 * - a key revoked with `attestd keys revoke` (through the pooler) is refused by both API
 *   instances within ATTESTD_KEY_CACHE_TTL without ATTESTD_PG_DIRECT_URL (polling), and at
 *   once with it (LISTEN past the pooler, although the TTL is then a minute); the delays are
 *   measured and printed;
 * - the cluster stopped for 8 s under a load of new attests: no request hangs past 10 s,
 *   every error is a 503 with Retry-After, health goes 503 and back to 200 by itself, and
 *   every acknowledged attestation is stored exactly once;
 * - the cluster frozen (SIGSTOP, its sockets left open) for 12 s under the same load: the
 *   same, by attestd's watchdog on statements the server leaves unanswered;
 * - no advisory lock outlives its transaction (a session lock would stay on an idle pooled
 *   connection), and no instance logs a "prepared statement … does not exist / already exists"
 *   error, nor does the cluster.
 * Under CI=true the cluster tools and pgbouncer must be there.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  attestLoad,
  checkSealingInvariants,
  freePort,
  newAckLog,
  postIdempotent,
  randomHex32,
  runCli,
  type ServeEnv,
  type ServeProcess,
  sleep,
  spawnCli,
  startServe,
  waitFor,
  withDb
} from "../helpers/process.js"

const CREATE = "/usr/bin/pg_createcluster"
const PGBOUNCER = "/usr/sbin/pgbouncer"
const available = existsSync(CREATE) && existsSync(PGBOUNCER)
if (!available && process.env.CI === "true") throw new Error(`CI=true but ${CREATE} or ${PGBOUNCER} is missing (apt-get install pgbouncer)`)

const version = (): string => execFileSync("pg_config", ["--version"], { encoding: "utf8" }).match(/PostgreSQL (\d+)/)![1]!

const SEAL_MS = 300
const PREPARED_ERROR = /prepared statement .* (does not exist|already exists)/i

/** Where the first 401 came from each poller, and whether any 2xx followed it. */
interface Poller {
  readonly stop: () => Promise<void>
  readonly ok: () => number
  readonly firstRefusedAt: () => number | undefined
  readonly acceptedAfterRefusal: () => number
}

/** Attests fresh hashes with `key` at `url` every ~20 ms, noting the first 401. */
const poll = (url: string, key: string): Poller => {
  let stopped = false
  let ok = 0
  let firstRefusedAt: number | undefined
  let acceptedAfterRefusal = 0
  const loop = (async () => {
    while (!stopped) {
      const sentAt = Date.now()
      const res = await postIdempotent(`${url}/v1/attest`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ hash_hex: randomHex32() }),
        signal: AbortSignal.timeout(10_000)
      })
      await res.arrayBuffer()
      if (res.status === 401) firstRefusedAt ??= Date.now()
      else if (res.status === 200 || res.status === 201) {
        ok++
        if (firstRefusedAt !== undefined && sentAt > firstRefusedAt) acceptedAfterRefusal++
      } else throw new Error(`attest answered ${res.status}`)
      await sleep(20)
    }
  })()
  return {
    stop: async () => {
      stopped = true
      await loop
    },
    ok: () => ok,
    firstRefusedAt: () => firstRefusedAt,
    acceptedAfterRefusal: () => acceptedAfterRefusal
  }
}

describe.skipIf(!available)("Postgres behind PgBouncer in transaction mode (a throwaway cluster)", () => {
  const name = `attestd_pooler_${process.pid}`
  let major = ""
  let root = ""
  let directUrl = ""
  let pooledUrl = ""
  let bouncer: ChildProcess | undefined
  const bouncerLog: Array<string> = []
  const procs: Array<ServeProcess> = []
  let apis: Array<ServeProcess> = []
  let workers: Array<ServeProcess> = []
  let key = ""

  const cluster = (action: "start" | "stop") =>
    execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", major, name, action, ...(action === "stop" ? ["-m", "fast"] : [])], { stdio: "ignore" })

  /** An instance's settings: its own data directory, DATABASE_URL through the pooler. */
  const envOf = async (label: string, extra: Record<string, string> = {}): Promise<ServeEnv> => {
    const dataDir = join(root, label)
    mkdirSync(dataDir, { recursive: true })
    return { databaseUrl: pooledUrl, dataDir, port: await freePort(), sealInterval: `${SEAL_MS}ms`, extra }
  }

  const startApi = async (label: string, extra: Record<string, string> = {}) => {
    const p = await startServe(await envOf(label, extra), 30_000, ["serve", "--no-workers"])
    procs.push(p)
    return p
  }

  const startWorker = async (label: string) => {
    const p = spawnCli(await envOf(label), ["worker"])
    procs.push(p)
    return p
  }

  const createKey = async (): Promise<{ readonly key: string; readonly id: string }> => {
    const r = await runCli(await envOf("cli"), ["keys", "create", "--label", "pooler", "--scopes", "attest,batch"])
    expect(r.code, r.stderr).toBe(0)
    const line = r.stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop()!
    return JSON.parse(line) as { key: string; id: string }
  }

  const attest = (url: string, hash: string) =>
    postIdempotent(`${url}/v1/attest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ hash_hex: hash }),
      signal: AbortSignal.timeout(15_000)
    })

  beforeAll(async () => {
    major = version()
    root = mkdtempSync(join(tmpdir(), "attestd-pooler-"))
    // pgbouncer drops root for postgres and must still read its files
    chmodSync(root, 0o755)
    const pgPort = await freePort()
    execFileSync(CREATE, [major, name, "-p", String(pgPort), "--", "--auth=trust"], { stdio: "ignore" })
    cluster("start")
    directUrl = `postgres://postgres@127.0.0.1:${pgPort}/postgres`
    await withDb(directUrl, async (q) => {
      await q("ALTER SYSTEM SET default_transaction_isolation = 'serializable'")
      await q("SELECT pg_reload_conf()")
    })

    const bouncerPort = await freePort()
    const users = join(root, "users.txt")
    writeFileSync(users, `"postgres" ""\n`, { mode: 0o644 })
    const ini = join(root, "pgbouncer.ini")
    writeFileSync(
      ini,
      [
        "[databases]",
        `postgres = host=127.0.0.1 port=${pgPort} dbname=postgres`,
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        `listen_port = ${bouncerPort}`,
        "unix_socket_dir =",
        "auth_type = trust",
        `auth_file = ${users}`,
        "pool_mode = transaction",
        "server_login_retry = 1",
        "query_wait_timeout = 5",
        "max_client_conn = 500",
        "default_pool_size = 20",
        ""
      ].join("\n"),
      { mode: 0o644 }
    )
    const asUser = process.getuid?.() === 0 ? ["-u", "postgres"] : []
    bouncer = spawn(PGBOUNCER, [...asUser, ini], { stdio: ["ignore", "pipe", "pipe"] })
    const collect = (chunk: Buffer) => bouncerLog.push(...chunk.toString("utf8").split("\n").filter((l) => l.length > 0))
    bouncer.stdout!.on("data", collect)
    bouncer.stderr!.on("data", collect)
    pooledUrl = `postgres://postgres@127.0.0.1:${bouncerPort}/postgres`
    await waitFor("pgbouncer listening", async () => {
      const r = await withDb(pooledUrl, (q) => q("SELECT 1 AS one")).catch(() => undefined)
      return r?.[0]?.one === 1
    }, 15_000, 100)
    const [isolation] = await withDb(pooledUrl, (q) => q("SHOW default_transaction_isolation"))
    expect(isolation!.default_transaction_isolation).toBe("serializable")

    // all four migrate the empty database at once, one after the other (a transaction-level lock)
    ;[apis, workers] = await Promise.all([
      Promise.all([startApi("api-0"), startApi("api-1")]),
      Promise.all([startWorker("worker-0"), startWorker("worker-1")])
    ])
    key = (await createKey()).key
  }, 120_000)

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill("SIGKILL")))
    bouncer?.kill("SIGKILL")
    try {
      execFileSync("pg_dropcluster", ["--stop", major, name], { stdio: "ignore" })
    } catch {
      // already gone
    }
    rmSync(root, { recursive: true, force: true })
  })

  it("four instances started at once on an empty database migrate it once, through the pooler", () => {
    // one applied the migrations; the others waited for its transaction-level lock and found none left
    const applied = [...apis, ...workers].map((p) => (p.output().match(/applied \d+ migration/g) ?? []).length)
    expect(applied.reduce((a, b) => a + b, 0)).toBe(1)
  })

  it("20 concurrent attests of one hash across both API instances store it once, under one id", async () => {
    for (let round = 0; round < 3; round++) {
      const hash = randomHex32()
      const answers = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
        const res = await attest(apis[i % 2]!.url, hash)
        return { status: res.status, body: (await res.json()) as { id: string; hash_hex: string } }
      }))
      expect(answers.map((a) => a.status).filter((s) => s !== 200 && s !== 201)).toEqual([])
      expect(answers.filter((a) => a.status === 201)).toHaveLength(1)
      expect(new Set(answers.map((a) => a.body.id)).size).toBe(1)
      const rows = await withDb(directUrl, (q) => q(`SELECT id FROM attestations WHERE hash_hex = '${hash}'`))
      expect(rows.map((r) => r.id)).toEqual([answers[0]!.body.id])
    }
  })

  it("two workers seal each window once, every attestation in exactly one batch", async () => {
    const log = newAckLog()
    let stop = false
    const shared = Array.from({ length: 10 }, randomHex32)
    const load = attestLoad({ urls: () => apis.map((p) => p.url), key, stop: () => stop, log, concurrency: 4, batchSize: 10, shared })
    await sleep(3_000)
    stop = true
    await load
    expect(log.failures).toEqual([])
    expect(log.acked.size).toBeGreaterThan(100)

    await waitFor("every attestation sealed", async () => {
      const rows = await withDb(directUrl, (q) => q("SELECT COUNT(*) AS n FROM attestations WHERE level = 'T0'"))
      return Number(rows[0]!.n) === 0
    }, 20_000, 100)
    const snap = await checkSealingInvariants(directUrl)
    expect(snap.violations).toEqual([])
    expect(snap.byLevel.T0).toBe(0)
    for (const [hash, id] of log.acked) {
      expect(snap.hashCounts.get(hash)).toBe(1)
      expect(snap.ids.get(hash)).toBe(id)
    }
    expect(new Set(snap.windowEnds).size).toBe(snap.windowEnds.length)
    const sealedBy = workers.map((w) => (w.output().match(/sealed batch/g) ?? []).length)
    // the workers' own count of batches is the table's: no batch was written twice or lost
    expect(sealedBy.reduce((a, b) => a + b, 0)).toBe(snap.batches)
    for (const api of apis) expect(api.output()).not.toMatch(/sealed batch/)
    const paused = workers.map((w) => (w.output().match(/sealing paused/g) ?? []).length)
    const lost = workers.map((w) => (w.output().match(/lease was taken over/g) ?? []).length)
    console.log(
      `[pooler] ${snap.attestations} attestations, ${snap.batches} batches; sealed per worker ${sealedBy.join("/")}, ` +
        `sealing paused ${paused.join("/")}, runs fenced out ${lost.join("/")}`
    )
  }, 60_000)

  /**
   * Revokes a key with the CLI while both pollers run; the delays to each instance's first 401
   * from the revocation's own time (`revoked_at`, written by the CLI on this host's clock: the
   * CLI takes a few hundred ms more to exit).
   */
  const revocationDelays = async (urls: ReadonlyArray<string>, revokeKey: { readonly key: string; readonly id: string }) => {
    const pollers = urls.map((u) => poll(u, revokeKey.key))
    try {
      await waitFor("both instances accept the key", () => pollers.every((p) => p.ok() >= 3), 10_000, 20)
      const r = await runCli(await envOf("cli"), ["keys", "revoke", revokeKey.id])
      expect(r.code, r.stderr).toBe(0)
      const [row] = await withDb(directUrl, (q) => q(`SELECT revoked_at FROM api_keys WHERE id = '${revokeKey.id}'`))
      const revokedAt = Date.parse(String(row!.revoked_at).replace("+00:00", "Z"))
      expect(Number.isFinite(revokedAt)).toBe(true)
      await waitFor("every instance refuses the revoked key", () => pollers.every((p) => p.firstRefusedAt() !== undefined), 15_000, 20)
      await sleep(300)
      for (const p of pollers) expect(p.acceptedAfterRefusal()).toBe(0)
      return pollers.map((p) => p.firstRefusedAt()! - revokedAt)
    } finally {
      await Promise.all(pollers.map((p) => p.stop()))
    }
  }

  it("a revoked key reaches both instances by polling within ATTESTD_KEY_CACHE_TTL without a direct URL", async () => {
    const delays = await revocationDelays(apis.map((p) => p.url), await createKey())
    console.log(`[pooler] revocation without ATTESTD_PG_DIRECT_URL (TTL 2s, polling): first 401 ${delays.join(" / ")} ms after the revocation`)
    // the default TTL (2 s), a poll interval and a loaded machine's slack
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0)
      expect(d).toBeLessThan(2_000 + 1_500)
    }
  }, 60_000)

  /**
   * The test's own write behind attestd's back, on the cluster itself. The cluster's default
   * isolation is serializable, where such a write can lose to the instances' concurrent reads
   * of the same rows (SQLSTATE 40001); read committed cannot, and is all this write needs.
   */
  const writeDirect = (statement: string) =>
    withDb(directUrl, (q) => q(`BEGIN ISOLATION LEVEL READ COMMITTED; ${statement}; COMMIT`))

  it("with ATTESTD_PG_DIRECT_URL a revocation arrives by LISTEN at once, though the TTL is a minute", async () => {
    const listening = await Promise.all(["api-direct-0", "api-direct-1"].map((label) =>
      startApi(label, { ATTESTD_PG_DIRECT_URL: directUrl, ATTESTD_KEY_CACHE_TTL: "60s" })))
    // each instance LISTENs on a connection of its own to the cluster itself
    await waitFor("both LISTEN sessions open on the cluster", async () => {
      const rows = await withDb(directUrl, (q) =>
        q("SELECT COUNT(DISTINCT pid) AS n FROM pg_stat_activity WHERE application_name = 'attestd-keys' AND query ILIKE 'LISTEN%'"))
      return Number(rows[0]!.n) >= 2
    }, 15_000, 100)
    // a session's first heard probe empties the cache: let it pass before anything is cached
    await sleep(1_000)
    const revoked = await createKey()

    // Positive control: revoked behind attestd's back (no NOTIFY), the key stays cached and accepted.
    const pollers = listening.map((p) => poll(p.url, revoked.key))
    try {
      await waitFor("both instances accept the key", () => pollers.every((p) => p.ok() >= 3), 10_000, 20)
      await writeDirect(`UPDATE api_keys SET revoked_at = '2026-01-01T00:00:00.000000+00:00' WHERE id = '${revoked.id}'`)
      const before = pollers.map((p) => p.ok())
      await sleep(1_500)
      expect(pollers.map((p, i) => p.ok() - before[i]!).every((n) => n >= 5)).toBe(true)
      expect(pollers.map((p) => p.firstRefusedAt())).toEqual([undefined, undefined])
      await writeDirect(`UPDATE api_keys SET revoked_at = NULL WHERE id = '${revoked.id}'`)
    } finally {
      await Promise.all(pollers.map((p) => p.stop()))
    }

    const delays = await revocationDelays(listening.map((p) => p.url), revoked)
    console.log(`[pooler] revocation with ATTESTD_PG_DIRECT_URL (TTL 60s, LISTEN): first 401 ${delays.join(" / ")} ms after the revocation`)
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0)
      expect(d).toBeLessThan(1_000)
    }
    await Promise.all(listening.map((p) => p.kill("SIGTERM")))
  }, 60_000)

  /** New attests from four clients through both API instances until stopped: every answer's status, and the slowest. */
  const outageLoad = () => {
    const acked = new Map<string, string>()
    const statuses = new Map<number, number>()
    /** What each answer other than 201 or 503 said, with the server's error lines, for the assertion's message. */
    const unexpected: Array<string> = []
    let slowest = 0
    let missingRetryAfter = 0
    let backAt = Infinity
    let firstAckAfterBack = Infinity
    let stopped = false
    const one = async (i: number) => {
      for (let n = 0; !stopped; n++) {
        const hash = randomHex32()
        const started = Date.now()
        let res: Response
        let body: { id?: string; code?: string }
        try {
          res = await attest(apis[(i + n) % 2]!.url, hash)
          body = (await res.json()) as { id?: string; code?: string }
        } catch (e) {
          // no answer at all: counted as status 0, which the test does not expect, with the reason
          slowest = Math.max(slowest, Date.now() - started)
          statuses.set(0, (statuses.get(0) ?? 0) + 1)
          unexpected.push(`no answer: ${String(e)} (${String((e as Error).cause ?? "")})`)
          await sleep(100)
          continue
        }
        slowest = Math.max(slowest, Date.now() - started)
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
        if (res.status !== 201 && res.status !== 503) unexpected.push(`${res.status} ${JSON.stringify(body)}`)
        if (res.status === 201) {
          acked.set(hash, body.id!)
          if (started > backAt) firstAckAfterBack = Math.min(firstAckAfterBack, Date.now() - backAt)
        } else {
          if (res.headers.get("retry-after") === null) missingRetryAfter++
          await sleep(100)
        }
        await sleep(20)
      }
    }
    const running = Promise.all([0, 1, 2, 3].map(one))
    return {
      acked,
      statuses,
      /** The unexpected answers and every error line the API instances logged. */
      unexpected: () => [...unexpected, ...apis.flatMap((a) => a.output().split("\n").filter((l) => l.includes("\"level\":\"error\"")))].join("\n"),
      slowest: () => slowest,
      missingRetryAfter: () => missingRetryAfter,
      firstAckAfterBack: () => firstAckAfterBack,
      /** The database is back: first 201s are timed from now. */
      back: () => {
        backAt = Date.now()
      },
      /** Waits for attests to succeed again, then stops. */
      stop: async () => {
        const before = acked.size
        await waitFor("attests succeed again", () => acked.size > before + 10, 20_000, 50)
        stopped = true
        await running
      }
    }
  }

  const health = async () => {
    const res = await fetch(`${apis[0]!.url}/v1/healthz`, { signal: AbortSignal.timeout(15_000) })
    await res.arrayBuffer()
    return res.status
  }

  /** Every acknowledged attestation is stored once, under the id it was acknowledged with. */
  const expectStoredOnce = async (acked: ReadonlyMap<string, string>) => {
    const rows = await withDb(directUrl, (q) =>
      q(`SELECT hash_hex, id FROM attestations WHERE hash_hex IN (${[...acked.keys()].map((h) => `'${h}'`).join(",")})`))
    expect(rows.length).toBe(acked.size)
    for (const r of rows) expect(acked.get(String(r.hash_hex))).toBe(r.id)
  }

  it("the cluster stopped for 8 s under load: no request hangs past 10 s, errors are 503, health comes back, nothing lost or doubled", async () => {
    const load = outageLoad()
    await sleep(1_000)
    const stoppedAt = Date.now()
    cluster("stop")
    await waitFor("health 503", async () => (await health()) === 503, 10_000, 100)
    await sleep(Math.max(0, 8_000 - (Date.now() - stoppedAt)))
    cluster("start")
    load.back()
    const startedAt = Date.now()
    await waitFor("health 200 again", async () => (await health()) === 200, 20_000, 100)
    const recoveredMs = Date.now() - startedAt
    await load.stop()

    console.log(
      `[pooler] outage of 8 s under load: statuses ${JSON.stringify(Object.fromEntries(load.statuses))}, slowest answer ${load.slowest()} ms, ` +
        `health back ${recoveredMs} ms and the first 201 ${load.firstAckAfterBack()} ms after the cluster started, ${load.acked.size} acknowledged`
    )
    expect(load.slowest()).toBeLessThan(10_000)
    expect([...load.statuses.keys()].sort(), load.unexpected()).toEqual([201, 503])
    expect(load.missingRetryAfter()).toBe(0)
    // the workers paused and resumed by themselves, once each per loop, no restart
    for (const w of workers) {
      expect(w.output()).toMatch(/paused: the database is unavailable/)
      expect(w.output()).toMatch(/resumed after \d+ ms/)
    }
    await expectStoredOnce(load.acked)
  }, 60_000)

  it("the cluster frozen (SIGSTOP) for 12 s under load: no request hangs past 10 s, errors are 503, nothing lost or doubled", async () => {
    // A frozen host keeps its sockets open: only attestd's watchdog ends the statements sent to it.
    const dataDir = `/var/lib/postgresql/${major}/${name}`
    const postmaster = readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]!.trim()
    const load = outageLoad()
    await sleep(1_000)
    // the postmaster first, so that it forks no backend between the listing of its children and their stop
    execFileSync("kill", ["-STOP", postmaster])
    const children = execFileSync("pgrep", ["-P", postmaster], { encoding: "utf8" }).trim().split("\n").filter((p) => p !== "")
    execFileSync("kill", ["-STOP", ...children])
    try {
      await sleep(12_000)
    } finally {
      // A child listed may have been a backend that had already exited (a zombie): the postmaster
      // reaps it as soon as it runs again, and it is gone before its own SIGCONT.
      for (const pid of [postmaster, ...children]) {
        try {
          process.kill(Number(pid), "SIGCONT")
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e
        }
      }
    }
    load.back()
    await waitFor("health 200 again", async () => (await health()) === 200, 20_000, 100)
    await load.stop()

    console.log(
      `[pooler] frozen for 12 s under load: statuses ${JSON.stringify(Object.fromEntries(load.statuses))}, slowest answer ${load.slowest()} ms, ` +
        `the first 201 ${load.firstAckAfterBack()} ms after it thawed, ${load.acked.size} acknowledged`
    )
    expect(load.slowest()).toBeLessThan(10_000)
    expect([...load.statuses.keys()].sort(), load.unexpected()).toEqual([201, 503])
    expect(load.missingRetryAfter()).toBe(0)
    // the API instances' watchdogs dropped the connections the frozen server held
    expect(apis.some((a) => /left a statement unanswered/.test(a.output()))).toBe(true)
    await expectStoredOnce(load.acked)
  }, 60_000)

  it("no advisory lock outlives its transaction on the pooled connections", async () => {
    // a session lock would stay on an idle server connection; a transaction's goes at its end
    const held = () => withDb(directUrl, async (q) => Number((await q("SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory'"))[0]!.n))
    await waitFor("no advisory lock held", async () => (await held()) === 0, 5_000, 50)
  })

  it("no instance and not the cluster met a prepared-statement error", async () => {
    // Positive control: a missing prepared statement run through the pooler is in the cluster's log.
    const control = `attestd_pooler_control_${process.pid}`
    await expect(withDb(pooledUrl, (q) => q(`EXECUTE ${control}`))).rejects.toThrow(/does not exist/)
    // every process ran statements through the pooler: attests were answered, batches sealed
    for (const p of procs) expect(p.output().length).toBeGreaterThan(0)
    for (const p of procs) expect(p.output()).not.toMatch(PREPARED_ERROR)
    const clusterLog = `/var/log/postgresql/postgresql-${major}-${name}.log`
    const errors = readFileSync(clusterLog, "utf8").split("\n").filter((l) => PREPARED_ERROR.test(l))
    expect(errors.length).toBeGreaterThan(0)
    expect(errors.filter((l) => !l.includes(control))).toEqual([])
    expect(bouncerLog.join("\n")).toMatch(/process up/)
    // what serializable isolation cost: conflicts Postgres reported, every one retried inside attestd
    const conflicts = readFileSync(clusterLog, "utf8").split("\n").filter((l) => /could not serialize access|deadlock detected/.test(l)).length
    console.log(`[pooler] ${conflicts} serialization failures or deadlocks under serializable isolation, none answered as an error`)
  })
})
