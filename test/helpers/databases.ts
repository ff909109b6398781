/**
 * The two stores every storage and HTTP test runs against: a fresh SQLite file
 * and a fresh Postgres database (TEST_DATABASE_URL or the local server). Under
 * CI=true an unreachable Postgres fails the run instead of skipping.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"

export const PG_ADMIN_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test"

export interface TestDatabase {
  readonly dialect: "sqlite" | "pg"
  readonly url: string
  readonly dataDir: string
  readonly drop: () => Promise<void>
}

let pgReachable: boolean | undefined

export const postgresAvailable = async (): Promise<boolean> => {
  if (pgReachable !== undefined) return pgReachable
  const client = new pg.Client({ connectionString: PG_ADMIN_URL, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
    await client.query("SELECT 1")
    pgReachable = true
  } catch (e) {
    if (process.env.CI === "true") throw new Error(`CI=true but Postgres is unreachable at ${PG_ADMIN_URL}: ${String(e)}`)
    pgReachable = false
  } finally {
    await client.end().catch(() => {})
  }
  return pgReachable
}

const withUrlDatabase = (url: string, database: string): string => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

export const createSqliteDatabase = async (): Promise<TestDatabase> => {
  const dataDir = mkdtempSync(join(tmpdir(), "attestd-test-"))
  return {
    dialect: "sqlite",
    url: `sqlite:${join(dataDir, "attestd.db")}`,
    dataDir,
    drop: async () => rmSync(dataDir, { recursive: true, force: true })
  }
}

export const createPgDatabase = async (): Promise<TestDatabase> => {
  const name = `attestd_t_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const dataDir = mkdtempSync(join(tmpdir(), "attestd-test-"))
  return {
    dialect: "pg",
    url: withUrlDatabase(PG_ADMIN_URL, name),
    dataDir,
    drop: async () => {
      rmSync(dataDir, { recursive: true, force: true })
      const c = new pg.Client({ connectionString: PG_ADMIN_URL })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    }
  }
}

/** The dialects to run: sqlite always, pg when reachable (always under CI). */
export const dialects = async (): Promise<Array<"sqlite" | "pg">> =>
  (await postgresAvailable()) ? ["sqlite", "pg"] : ["sqlite"]

export const createDatabase = (dialect: "sqlite" | "pg") =>
  dialect === "sqlite" ? createSqliteDatabase() : createPgDatabase()
