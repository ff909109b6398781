/**
 * The trust inputs an attestd instance publishes (GET /v1/keys, GET /v1/tsa/certificates
 * and, for a demo instance, GET /v1/simulated-chain/headers), fetched once: what
 * `attestd verify --server` checks a bundle against, and what `attestd stamp` and
 * `attestd upgrade` check every answer against before they write a receipt.
 *
 * A server that cannot be reached fails at once with its address and the reason
 * (connection refused, timed out, no such host), not after retries.
 */
import { parseBlockHeaders, parseKeysDocument, type VerifyOptions } from "../Verify/Verifier.js"

export type PublishedTrust = Pick<VerifyOptions, "keys" | "tsaCaPem" | "simulatedHeaders" | "trustLabels">

const TIMEOUT_MS = 15_000

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** The reason a fetch failed, in words: node's fetch says only "fetch failed" and keeps the reason in `cause`. */
export const fetchFailure = (e: unknown): string => {
  if (e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError")) return "timed out"
  const cause = e instanceof Error ? (e as { cause?: unknown }).cause : undefined
  const code = cause !== null && typeof cause === "object" ? (cause as { code?: unknown }).code : undefined
  switch (code) {
    case "ECONNREFUSED":
      return "connection refused"
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return "no such host"
    case "ECONNRESET":
      return "connection reset"
    case "ETIMEDOUT":
    case "UND_ERR_CONNECT_TIMEOUT":
    case "UND_ERR_HEADERS_TIMEOUT":
      return "timed out"
    case "EHOSTUNREACH":
    case "ENETUNREACH":
      return "host unreachable"
  }
  if (typeof code === "string") return `${code}${cause instanceof Error && cause.message !== "" ? ` (${cause.message})` : ""}`
  if (cause instanceof Error) return cause.message
  return message(e)
}

/** The instance's base URL (no trailing slash, no /v1), or an Error naming what is wrong. */
export const originOf = (server: string, flag = "--server"): string => {
  let base: URL
  try {
    base = new URL(server)
  } catch {
    throw new Error(`${flag} ${server} is not a URL`)
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") throw new Error(`${flag} ${server} is not an http(s) URL`)
  return base.href.replace(/\/+$/, "").replace(/\/v1$/, "")
}

/** GET a JSON document from the instance; undefined on 404 when `optional`. */
const getJson = async (url: string, optional: boolean, fetchImpl: typeof globalThis.fetch): Promise<unknown> => {
  let res: Response
  try {
    res = await fetchImpl(url, { signal: AbortSignal.timeout(TIMEOUT_MS), headers: { accept: "application/json" } })
  } catch (e) {
    throw new Error(`cannot reach ${url}: ${fetchFailure(e)}`)
  }
  if (optional && (res.status === 404 || res.status === 405)) return undefined
  if (!res.ok) throw new Error(`GET ${url} answered HTTP ${res.status}`)
  const text = await res.text()
  try {
    return JSON.parse(text) as unknown
  } catch (e) {
    throw new Error(`GET ${url} is not JSON: ${message(e)}`)
  }
}

const parsed = <A>(what: string, f: () => A): A => {
  try {
    return f()
  } catch (e) {
    throw new Error(`${what}: ${message(e)}`)
  }
}

/** The trust inputs `server` publishes: its signing keys, its TSA anchors, its simulated chain (demo). Throws an Error with a one-line message. */
export const publishedTrust = async (server: string, fetchImpl: typeof globalThis.fetch = (...a) => globalThis.fetch(...a)): Promise<PublishedTrust> => {
  const origin = originOf(server)
  const label = `published by ${origin}`
  const keysDoc = await getJson(`${origin}/v1/keys`, false, fetchImpl)
  const tsaDoc = await getJson(`${origin}/v1/tsa/certificates`, true, fetchImpl)
  const chainDoc = await getJson(`${origin}/v1/simulated-chain/headers`, true, fetchImpl)
  const out: { -readonly [K in keyof PublishedTrust]?: PublishedTrust[K] } = {
    keys: parsed(`${origin}/v1/keys`, () => parseKeysDocument(keysDoc))
  }
  const labels: { -readonly [K in keyof NonNullable<VerifyOptions["trustLabels"]>]?: string } = { keys: `keys ${label}` }
  if (tsaDoc !== undefined) {
    const certs = tsaDoc !== null && typeof tsaDoc === "object" && Array.isArray((tsaDoc as { certificates?: unknown }).certificates)
      ? (tsaDoc as { certificates: Array<unknown> }).certificates
      : null
    if (certs === null) throw new Error(`${origin}/v1/tsa/certificates: expected {"certificates": [{provider, pem}]}`)
    const pems = certs.flatMap((c) => (c !== null && typeof c === "object" && typeof (c as { pem?: unknown }).pem === "string" ? [(c as { pem: string }).pem] : []))
    if (pems.length > 0) {
      out.tsaCaPem = pems
      labels.tsa = `TSA trust anchors ${label}`
    }
  }
  if (chainDoc !== undefined) {
    out.simulatedHeaders = parsed(`${origin}/v1/simulated-chain/headers`, () => parseBlockHeaders(chainDoc))
    labels.simulated = `simulated chain headers ${label}`
  }
  out.trustLabels = labels
  return out
}
