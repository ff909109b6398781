/**
 * Helpers of the private-claims suites (metadata, tags, share tokens,
 * isolation): attesting with a key, and a recursive scan proving that secret
 * strings never appear in a response.
 */
import { expect } from "vitest"
import { client, randomHash, type Reply } from "./server.js"

export type Api = ReturnType<typeof client>

/** Attests `hash` (fresh when omitted) with `api`; expects 200/201 and returns the attest body. */
export const attestWith = async (
  api: Api,
  body: { hash_hex?: string; source?: string | null; extra_data?: unknown; client_encrypted?: boolean } = {}
): Promise<{ id: string; hash_hex: string; claim_id: number; etag: string; source: string | null; extra_data: unknown; status: string }> => {
  const r = await api.post("/v1/attest", { hash_hex: randomHash(), ...body })
  if (r.status !== 200 && r.status !== 201) throw new Error(`attest failed: ${r.status} ${r.text}`)
  return r.body
}

/** Every string in a JSON value: property names and string values, recursively. */
export const allStrings = (value: unknown, out: Array<string> = []): Array<string> => {
  if (typeof value === "string") out.push(value)
  else if (typeof value === "number" || typeof value === "boolean") out.push(String(value))
  else if (Array.isArray(value)) for (const v of value) allStrings(v, out)
  else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      out.push(k)
      allStrings(v, out)
    }
  }
  return out
}

/**
 * Asserts that none of `secrets` occurs in `reply`: recursively in every
 * property name and string value of the parsed body, in the raw text, and in
 * every response header.
 */
export const expectNoSecrets = (what: string, reply: Reply, secrets: ReadonlyArray<string>): void => {
  const strings = allStrings(reply.body)
  for (const secret of secrets) {
    const hit = strings.find((s) => s.includes(secret))
    if (hit !== undefined) throw new Error(`${what}: response body leaks ${JSON.stringify(secret)} (in ${JSON.stringify(hit.slice(0, 200))})`)
    if (reply.text.includes(secret)) throw new Error(`${what}: raw response leaks ${JSON.stringify(secret)}`)
    reply.headers.forEach((v, k) => {
      if (v.includes(secret)) throw new Error(`${what}: header ${k} leaks ${JSON.stringify(secret)}`)
    })
  }
}

/** A fresh, unique marker string for secret-scanning. */
export const marker = (label: string): string => `${label}-${Math.random().toString(36).slice(2, 12)}${Date.now().toString(36)}`

/** Status of a reply must not be a 5xx (for fuzzing). */
export const expectNo5xx = (what: string, reply: Reply): void => {
  if (reply.status >= 500) throw new Error(`${what}: HTTP ${reply.status} ${reply.text.slice(0, 300)}`)
  expect(reply.status).toBeLessThan(500)
}

/** Base64URL without padding, of `n` random bytes. */
export const b64url = (n: number): string => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("base64url")
