/** The attestd package: client-side helpers shipped with the service. */
export { verifyWebhook, type VerifiedWebhook, type WebhookVerification } from "./Client/Webhooks.js"
export { deriveValues } from "./Client/DerivedLists.js"
export {
  decryptExtraData,
  type EncryptedBlob,
  encryptExtraData,
  generateExtraDataKey,
  importExtraDataKey
} from "./Client/Encryption.js"
