/**
 * `attestd/client/effect`: the Effect client over the server's own contract,
 * with the contract and the error classes it decodes to. Portable (no node:*).
 */
export { Api } from "./Api.js"
export { HashHex } from "./Domain/HashHex.js"
export { AttestdClient, type EffectClient, type EffectClientOptions, makeEffectClient, withRetries } from "./Client/EffectClient.js"
export {
  AuthError,
  Forbidden,
  InternalError,
  NotFound,
  PayloadTooLarge,
  PreconditionFailed,
  QuotaExceeded,
  RateLimited,
  ServiceUnavailable,
  ValidationError
} from "./Domain/Errors.js"
