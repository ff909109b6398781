/** `attestd/client`: the portable client (Node 20 and browsers; no node:*, no server code). */
export {
  type AttestationItem,
  type AttestdClient,
  AttestdError,
  type AttestRequest,
  type ClientOptions,
  createClient,
  type GroupName,
  hashString,
  hmacDigest,
  type RequestOf,
  type ResponseOf,
  type RetryOptions
} from "./Client/Client.js"
export { hashBlob, hashStream } from "./Client/Hash.js"
export {
  decryptExtraData,
  type EncryptedBlob,
  encryptExtraData,
  generateExtraDataKey,
  importExtraDataKey
} from "./Client/Encryption.js"
export { type VerifiedWebhook, verifyWebhook, type WebhookVerification } from "./Client/Webhooks.js"
export { deriveValues } from "./Client/DerivedLists.js"
export {
  type CheckStatus,
  type InputCheck,
  type Jwk,
  parseBlockHeaders,
  parseKeysDocument,
  parseOtsHeaders,
  type Report,
  sha256Hex,
  type SubCheck,
  summarize,
  type T0Check,
  type T1Check,
  type T2Check,
  type Verdict,
  verifyBundle,
  type VerifyOptions
} from "./Verify/Verifier.js"
