/**
 * Client-side encryption of claim extra_data (and tag values) with WebCrypto
 * AES-256-GCM, so the server stores an opaque blob it cannot read. Send the
 * result as extra_data with client_encrypted: true. Works in Node 20+ and
 * browsers (globalThis.crypto.subtle).
 */
import { base64ToBytes, bytesToBase64Url } from "../Domain/Bytes.js"
// Types read off globalThis.crypto (no node:* import, not even type-only): this module runs in browsers.
type SubtleCrypto = typeof globalThis.crypto.subtle
type CryptoKey = Awaited<ReturnType<SubtleCrypto["importKey"]>>

export interface EncryptedBlob {
  readonly alg: "A256GCM"
  /** 12-byte nonce, Base64URL. */
  readonly iv: string
  /** Ciphertext followed by the 16-byte GCM tag, Base64URL. */
  readonly ciphertext: string
}

const subtle = (): SubtleCrypto => {
  const s = (globalThis.crypto as typeof globalThis.crypto | undefined)?.subtle
  if (!s) throw new Error("WebCrypto (crypto.subtle) is not available")
  return s
}

/** A fresh extractable AES-256-GCM key; keep it on the client side. */
export const generateExtraDataKey = (): Promise<CryptoKey> =>
  subtle().generateKey({ name: "AES-GCM", length: 256 }, true, ["encrypt", "decrypt"])

/** Imports 32 raw key bytes (e.g. from your KMS) as an AES-256-GCM key. */
export const importExtraDataKey = (raw: Uint8Array): Promise<CryptoKey> => {
  if (raw.length !== 32) return Promise.reject(new Error("an AES-256 key is 32 bytes"))
  return subtle().importKey("raw", raw, { name: "AES-GCM" }, false, ["encrypt", "decrypt"])
}

/**
 * Encrypts any JSON value. `associatedData` (optional) is authenticated but
 * not stored — e.g. the attestation's hash_hex, binding the blob to it.
 */
export const encryptExtraData = async (
  key: CryptoKey,
  value: unknown,
  associatedData?: string
): Promise<EncryptedBlob> => {
  const iv = globalThis.crypto.getRandomValues(new Uint8Array(12))
  const plaintext = new TextEncoder().encode(JSON.stringify(value))
  const ciphertext = new Uint8Array(
    await subtle().encrypt(
      { name: "AES-GCM", iv, ...(associatedData !== undefined ? { additionalData: new TextEncoder().encode(associatedData) } : {}) },
      key,
      plaintext
    )
  )
  return { alg: "A256GCM", iv: bytesToBase64Url(iv), ciphertext: bytesToBase64Url(ciphertext) }
}

/** Decrypts a blob made by encryptExtraData; rejects on a wrong key, tampering or wrong associated data. */
export const decryptExtraData = async (key: CryptoKey, blob: EncryptedBlob, associatedData?: string): Promise<unknown> => {
  if (blob.alg !== undefined && blob.alg !== "A256GCM") throw new Error(`unsupported alg ${String(blob.alg)}`)
  const plaintext = await subtle().decrypt(
    {
      name: "AES-GCM",
      iv: base64ToBytes(blob.iv),
      ...(associatedData !== undefined ? { additionalData: new TextEncoder().encode(associatedData) } : {})
    },
    key,
    base64ToBytes(blob.ciphertext)
  )
  return JSON.parse(new TextDecoder().decode(plaintext))
}
