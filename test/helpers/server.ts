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
  /** The metrics listener, when started with metricsPort. */
  readonly metricsUrl?: string | undefined
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
    // Test calendars (startSimulatedCalendarServer) also answer the Esplora header endpoints of their chain.
    ...(overrides.otsCalendars !== undefined ? { bitcoinSources: overrides.otsCalendars } : {}),
    ...overrides
  })
  const server = await startServer(config)
  const run = <A, E>(effect: Effect.Effect<A, E, any>) => server.runtime.runPromise(effect as Effect.Effect<A, E, never>)
  return {
    url: server.url,
    metricsUrl: server.metricsUrl,
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

// ---------------------------------------------------------------------------
// Assertion helpers shared by the HTTP, storage and CLI suites.

/** The wire time format: microseconds, literal +00:00. */
export const WIRE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/

/** `reply` is exactly the error envelope `{error: true, code, message, details}` with this status and code. */
export const expectEnvelope = (reply: Reply, status: number, code: string): void => {
  const where = `${status} ${code}: got ${reply.status} ${reply.text.slice(0, 300)}`
  if (reply.status !== status) throw new Error(`expected HTTP ${where}`)
  const body = reply.body as Record<string, unknown> | undefined
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new Error(`expected a JSON envelope, ${where}`)
  const keys = Object.keys(body).sort()
  if (JSON.stringify(keys) !== JSON.stringify(["code", "details", "error", "message"])) {
    throw new Error(`envelope keys must be exactly code, details, error, message; ${where}`)
  }
  if (body.error !== true) throw new Error(`envelope error must be true; ${where}`)
  if (body.code !== code) throw new Error(`envelope code must be ${code}; ${where}`)
  if (typeof body.message !== "string" || body.message.length === 0) throw new Error(`envelope message must be a string; ${where}`)
  if (body.details === undefined) throw new Error(`envelope details must be present (null or a value); ${where}`)
  if (!reply.headers.get("x-request-id")) throw new Error(`missing X-Request-Id; ${where}`)
}

/** Every property name in a JSON value, recursively. */
export const allKeys = (value: unknown, out: Set<string> = new Set()): Set<string> => {
  if (Array.isArray(value)) for (const v of value) allKeys(v, out)
  else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      out.add(k)
      allKeys(v, out)
    }
  }
  return out
}

/** Verifies a Base64 DER ECDSA P-256 signature over `payload` with a JWK, through node:crypto only. */
export const verifyWithJwk = async (
  jwk: { readonly kty: string; readonly crv: string; readonly x: string; readonly y: string },
  payload: string,
  signatureB64: string
): Promise<boolean> => {
  const { createPublicKey, verify } = await import("node:crypto")
  const key = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, format: "jwk" })
  return verify("sha256", Buffer.from(payload, "utf8"), { key, dsaEncoding: "der" }, Buffer.from(signatureB64, "base64"))
}

export { freePort } from "./ports.js"

/** A raw HTTP request through node:http (for bodies fetch cannot send: chunked, oversized, malformed). */
export const rawRequest = async (
  base: string,
  options: {
    readonly method: string
    readonly path: string
    readonly headers?: Record<string, string>
    readonly chunks?: ReadonlyArray<string | Buffer>
  }
): Promise<Reply> => {
  const http = await import("node:http")
  const url = new URL(options.path, base)
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method, headers: options.headers ?? {} }, (res) => {
      const parts: Array<Buffer> = []
      res.on("data", (c: Buffer) => parts.push(c))
      res.on("end", () => {
        const text = Buffer.concat(parts).toString("utf8")
        let body: any = undefined
        try {
          body = text.length ? JSON.parse(text) : undefined
        } catch {
          body = undefined
        }
        const headers = new Headers()
        for (const [k, v] of Object.entries(res.headers)) {
          if (typeof v === "string") headers.set(k, v)
          else if (Array.isArray(v)) headers.set(k, v.join(", "))
        }
        resolve({ status: res.statusCode ?? 0, headers, body, text })
      })
      res.on("error", reject)
    })
    // The server may answer and close before the whole body is written.
    req.on("error", (e) => reject(e))
    for (const c of options.chunks ?? []) req.write(c)
    req.end()
  })
}

/** Current stats of a server (public). */
export const statsOf = async (base: string): Promise<{ total_attestations: number }> =>
  (await client(base).get("/v1/stats")).body

