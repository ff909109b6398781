/**
 * A real attestd server on a loopback port over a fresh database, with helpers
 * to create keys and call the API.
 */
import { Duration, Effect, Option } from "effect"
import { ApiKeyRepo, type NewKey } from "../../src/Auth/ApiKeyRepo.js"
import { SCOPES, type Scope } from "../../src/Auth/Domain.js"
import { startServer } from "../../src/main.js"
import { AppConfig, type AppConfigShape } from "../../src/Platform/Config.js"
import { createDatabase, type TestDatabase } from "./databases.js"

export interface TestServer {
  readonly url: string
  readonly db: TestDatabase
  readonly config: AppConfigShape
  readonly createKey: (options?: Partial<NewKey> & { scopes?: ReadonlyArray<Scope> | null }) => Promise<{ id: string; key: string }>
  readonly revokeKey: (id: string) => Promise<void>
  readonly run: <A, E>(effect: Effect.Effect<A, E, any>) => Promise<A>
  readonly close: () => Promise<void>
}

export const startTestServer = async (
  dialect: "sqlite" | "pg",
  overrides: Partial<AppConfigShape> = {}
): Promise<TestServer> => {
  const db = await createDatabase(dialect)
  const config = AppConfig.make({
    databaseUrl: db.url,
    dataDir: db.dataDir,
    port: 0,
    sealInterval: Duration.hours(24),
    ...overrides
  })
  const server = await startServer(config)
  const run = <A, E>(effect: Effect.Effect<A, E, any>) => server.runtime.runPromise(effect as Effect.Effect<A, E, never>)
  return {
    url: server.url,
    db,
    config,
    run,
    createKey: async (options = {}) => {
      const created = await run(Effect.flatMap(ApiKeyRepo, (repo) =>
        repo.create({
          label: options.label ?? "test",
          scopes: options.scopes === undefined ? [...SCOPES] : options.scopes,
          orgId: options.orgId ?? null,
          env: options.env ?? null,
          allowIps: options.allowIps ?? null,
          rateLimit: options.rateLimit ?? null,
          monthlyQuota: options.monthlyQuota ?? null
        })))
      return { id: created.id, key: created.secret }
    },
    revokeKey: async (id) => {
      await run(Effect.flatMap(ApiKeyRepo, (repo) => repo.revoke(id)))
    },
    close: async () => {
      await server.close()
      await db.drop()
    }
  }
}

export interface Reply<T = any> {
  readonly status: number
  readonly headers: Headers
  readonly body: T
  readonly text: string
}

/** A small JSON client over fetch. */
export const client = (base: string, key?: string) => {
  const call = async <T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const res = await fetch(base + path, {
      method,
      headers: {
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...headers
      },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {})
    })
    const text = await res.text()
    let parsed: any = undefined
    try {
      parsed = text.length ? JSON.parse(text) : undefined
    } catch {
      parsed = undefined
    }
    return { status: res.status, headers: res.headers, body: parsed, text }
  }
  return {
    get: <T = any>(path: string, headers?: Record<string, string>) => call<T>("GET", path, undefined, headers),
    post: <T = any>(path: string, body: unknown, headers?: Record<string, string>) => call<T>("POST", path, body, headers),
    patch: <T = any>(path: string, body: unknown, headers?: Record<string, string>) => call<T>("PATCH", path, body, headers),
    put: <T = any>(path: string, body: unknown, headers?: Record<string, string>) => call<T>("PUT", path, body, headers),
    delete: <T = any>(path: string, headers?: Record<string, string>) => call<T>("DELETE", path, undefined, headers),
    call
  }
}

export const randomHash = (): string => {
  const bytes = new Uint8Array(32)
  crypto.getRandomValues(bytes)
  return Buffer.from(bytes).toString("hex")
}

export const unused = Option.none
