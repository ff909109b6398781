/**
 * Attestation handles: `att_` + 24 Base64URL characters (18 random bytes), and
 * legacy numeric handles (the attestation's sequence number) accepted as input.
 */
import { randomBytes } from "node:crypto"

export const ATTESTATION_ID_PATTERN = /^att_[A-Za-z0-9_-]{24}$/

export const newAttestationId = (): string => "att_" + randomBytes(18).toString("base64url")

export type AttestationRef =
  | { readonly _tag: "Id"; readonly id: string }
  | { readonly _tag: "Seq"; readonly seq: number }

const MAX_SEQ = Number.MAX_SAFE_INTEGER

/** Parses a raw (already URL-decoded) reference; whitespace around it is ignored. */
export const parseAttestationRef = (raw: string): AttestationRef | undefined => {
  const ref = raw.trim()
  if (ATTESTATION_ID_PATTERN.test(ref)) return { _tag: "Id", id: ref }
  if (/^[0-9]{1,16}$/.test(ref)) {
    const seq = Number(ref)
    if (seq >= 1 && seq <= MAX_SEQ) return { _tag: "Seq", seq }
  }
  return undefined
}
