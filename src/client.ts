/** `attestd/client`: the portable client (Node 20 and browsers; no server code). */
export { AttestdError, type AttestdClient, type ClientOptions, createClient, hashString, hmacDigest, type RetryOptions } from "./Client/Client.js"
export { hashBlob, hashStream } from "./Client/Hash.js"
export {
  decryptExtraData,
  type EncryptedBlob,
  encryptExtraData,
  generateExtraDataKey,
  importExtraDataKey
} from "./Client/Encryption.js"
