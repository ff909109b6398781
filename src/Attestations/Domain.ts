/** Attestation and claim records as the service sees them. */
import { Schema } from "effect"

export type Level = "T0" | "T1" | "T2"
export const Level = Schema.Literal("T0", "T1", "T2")

export interface Attestation {
  readonly seq: number
  readonly id: string
  readonly hashHex: string
  readonly registeredAt: string
  readonly signature: string
  readonly signingKeyId: string
  readonly formatVersion: string
  readonly level: Level
  readonly batchId: number | null
  readonly leafIndex: number | null
  readonly t1At: string | null
  readonly t2At: string | null
  readonly t2Block: number | null
  /** The numeric handle of an imported historical attestation; null for every other one. */
  readonly legacyId: number | null
}

/** `legacy_id` on the imported historical attestations that have one, absent otherwise. */
export const legacyOf = (a: Attestation): { legacy_id?: number } => (a.legacyId === null ? {} : { legacy_id: a.legacyId })

export interface Claim {
  readonly id: number
  readonly attestationSeq: number
  readonly apiKeyId: string
  readonly source: string | null
  readonly extraData: unknown
  readonly clientEncrypted: boolean
  readonly etag: string
  readonly createdAt: string
  readonly updatedAt: string
}

export const SOURCE_MAX = 100
export const EXTRA_DATA_MAX_BYTES = 16 * 1024
export const BATCH_MAX = 100
