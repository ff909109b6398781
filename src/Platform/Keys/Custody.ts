/**
 * Where signing keys live: the port the Signer signs through. A custody holds keys by
 * role (`t0`: attestation signatures; `tsa`: the RFC 3161 authority's key) and kid (the
 * JWK thumbprint), generates new ones, and signs with them: ECDSA P-256 over
 * SHA-256(message), low-S DER. Two adapters: PKCS#8 files in the data dir (FileKeys.ts)
 * and a PKCS#11 token (Pkcs11Keys.ts). Nothing outside them touches key material.
 */
import { Context, Data, type Effect } from "effect"
import type { ServiceUnavailable } from "../../Domain/Errors.js"
import type { PublicJwk } from "../../Domain/T0.js"

export type KeyRole = "t0" | "tsa"

/** A custody that cannot be used as configured: a key file open to others, a token that is not there, a wrong PIN. */
export class KeyCustodyError extends Data.TaggedError("KeyCustodyError")<{ readonly message: string }> {}

export interface HeldKey {
  readonly role: KeyRole
  readonly kid: string
  readonly jwk: PublicJwk
  /** When the key was made, where the custody records it (a key file's name); wire time format. */
  readonly createdAt: string | undefined
  /** ECDSA P-256 over SHA-256(message): DER, low-S. A key that cannot sign now is a ServiceUnavailable. */
  readonly sign: (message: Uint8Array) => Effect.Effect<Uint8Array, ServiceUnavailable>
}

export interface KeyCustodyShape {
  readonly kind: "file" | "pkcs11"
  /** Where the keys are, for messages: a directory, or a token and its module. */
  readonly where: string
  /** The keys of `role` in custody now (a directory read again, a token searched again). */
  readonly held: (role: KeyRole) => Effect.Effect<ReadonlyArray<HeldKey>, KeyCustodyError>
  /** Makes a new key of `role` in custody. */
  readonly generate: (role: KeyRole, nowMillis: number) => Effect.Effect<HeldKey, KeyCustodyError>
  /** Whether the keys can be used now (a token answers). */
  readonly healthy: Effect.Effect<boolean>
  /** How many signatures it makes at once (a token's sessions; in-process signing: one). */
  readonly parallelism: number
}

export class KeyCustody extends Context.Tag("Platform/KeyCustody")<KeyCustody, KeyCustodyShape>() {}
