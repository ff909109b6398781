/**
 * Attestation handles: `att_` + 24 Base64URL characters (18 random bytes), and
 * legacy numeric handles accepted as input. A legacy number belongs only to an
 * historical attestation imported with one (`attestd import`, its `legacy_id`);
 * attestations created through the API have none, so the registry cannot be
 * walked by number (CONTRACT §2, spec §1.8).
 */
import { Schema } from "effect"
import { bytesToBase64Url, randomChunks } from "./Bytes.js"

export const ATTESTATION_ID_PATTERN = /^att_[A-Za-z0-9_-]{24}$/

/** `n` new handles, from one draw of WebCrypto randomness (Node 20 and browsers): Domain stays portable. */
export const newAttestationIds = (n: number): Array<string> => randomChunks(n, 18).map((bytes) => "att_" + bytesToBase64Url(bytes))

export type AttestationRef =
  | { readonly _tag: "Id"; readonly id: string }
  | { readonly _tag: "Legacy"; readonly legacyId: number }

export const LEGACY_ID_MAX = Number.MAX_SAFE_INTEGER

export const isLegacyId = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 1 && n <= LEGACY_ID_MAX

/** Parses a raw (already URL-decoded) reference; whitespace around it is ignored. */
export const parseAttestationRef = (raw: string): AttestationRef | undefined => {
  const ref = raw.trim()
  if (ATTESTATION_ID_PATTERN.test(ref)) return { _tag: "Id", id: ref }
  if (/^[0-9]{1,16}$/.test(ref)) {
    const legacyId = Number(ref)
    if (isLegacyId(legacyId)) return { _tag: "Legacy", legacyId }
  }
  return undefined
}

/** An attestation's own handle as stored and returned (legacy numbers are input only). */
export const AttestationId = Schema.String.pipe(Schema.pattern(ATTESTATION_ID_PATTERN), Schema.brand("AttestationId"))
export type AttestationId = typeof AttestationId.Type
