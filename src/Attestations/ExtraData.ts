import { Effect } from "effect"
import { ValidationError } from "../Domain/Errors.js"
import { EXTRA_DATA_MAX_BYTES } from "./Domain.js"

/**
 * Checks extra_data's size. With client_encrypted the object is an opaque blob
 * (spec 2.4): any JSON object is accepted, stored and returned exactly as sent;
 * our helpers' `{alg, iv, ciphertext}` layout is a recommendation, not a rule.
 */
export const checkExtraData = (extraData: unknown, clientEncrypted: boolean): Effect.Effect<void, ValidationError> => {
  const refused = extraDataError(extraData, clientEncrypted)
  return refused ? Effect.fail(refused) : Effect.void
}

/** checkExtraData's refusal, synchronously: undefined when the extra data is fine. */
export const extraDataError = (extraData: unknown, _clientEncrypted: boolean): ValidationError | undefined => {
  if (extraData === null || extraData === undefined) return undefined
  const size = Buffer.byteLength(JSON.stringify(extraData), "utf8")
  return size > EXTRA_DATA_MAX_BYTES
    ? new ValidationError({
      message: `extra_data must be at most ${EXTRA_DATA_MAX_BYTES} bytes of JSON`,
      details: [{ path: ["extra_data"], message: `${size} bytes` }]
    })
    : undefined
}
