/**
 * Historical attestations as another (older) system signed them, for
 * `attestd import` tests: an independent P-256 key, the T0 payload
 * `format_version|hash_hex|registered_at`, node:crypto DER signatures.
 */
import { createHash, createPublicKey, type KeyObject, sign } from "node:crypto"
import { newP256Key } from "../../src/Platform/Keys/FileKeys.js"
import { formatMicros } from "../../src/Domain/Time.js"

export interface HistoricalKey {
  readonly privateKey: KeyObject
  readonly jwk: { kty: "EC"; crv: "P-256"; x: string; y: string; kid: string }
}

export const historicalKey = (): HistoricalKey => {
  const privateKey = newP256Key()
  const publicKey = createPublicKey(privateKey)
  const { x, y } = publicKey.export({ format: "jwk" }) as { x: string; y: string }
  const kid = createHash("sha256").update(JSON.stringify({ crv: "P-256", kty: "EC", x, y })).digest("base64url")
  return { privateKey, jwk: { kty: "EC", crv: "P-256", x, y, kid } }
}

/** A past wire timestamp: `daysAgo` days before now, with microseconds. */
export const pastTime = (daysAgo: number): string =>
  formatMicros(BigInt(Date.now() - daysAgo * 86_400_000) * 1000n + BigInt(Math.floor(Math.random() * 1000)))

export interface HistoricalRecord {
  hash_hex: string
  registered_at: string
  signature: string
  format_version: string
  public_key: Record<string, unknown>
  legacy_id?: number
}

export const historicalRecord = (
  key: HistoricalKey,
  fields: { hash_hex: string; registered_at?: string; format_version?: string; legacy_id?: number }
): HistoricalRecord => {
  const registeredAt = fields.registered_at ?? pastTime(400)
  const formatVersion = fields.format_version ?? "2.0.0"
  const payload = `${formatVersion}|${fields.hash_hex}|${registeredAt}`
  return {
    hash_hex: fields.hash_hex,
    registered_at: registeredAt,
    signature: sign("sha256", Buffer.from(payload, "utf8"), { key: key.privateKey, dsaEncoding: "der" }).toString("base64"),
    format_version: formatVersion,
    public_key: key.jwk,
    ...(fields.legacy_id !== undefined ? { legacy_id: fields.legacy_id } : {})
  }
}

export const jsonl = (lines: ReadonlyArray<HistoricalRecord | string>): string =>
  lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n") + "\n"
