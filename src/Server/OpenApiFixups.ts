/**
 * Post-processing of the generated OpenAPI document: paths are published under
 * /v1 (the stable contract; unprefixed aliases are served too), and
 * request-decoding failures are documented as the VALIDATION_ERROR envelope
 * that the edge really answers with, and each request body carries the
 * operation's size limit as `x-max-body-bytes` (413 above it).
 */
import { bodyLimitOf } from "./BodyLimits.js"

type Json = Record<string, any>

/** The published scan limit is the one of the default ATTESTD_SCAN_MAX_HASHES. */
const DEFAULT_SCAN_MAX_HASHES = 50_000

const UNPREFIXED: ReadonlySet<string> = new Set(["/test-vectors.json"])

export const openApiFixups = (spec: Json): Json => {
  const schemas: Json = spec.components?.schemas ?? {}
  if (schemas.HttpApiDecodeError && schemas.ValidationErrorEnvelope) {
    schemas.HttpApiDecodeError = schemas.ValidationErrorEnvelope
  }
  const paths: Json = {}
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const operation of Object.values(item as Json)) {
      const op = operation as Json
      if (op?.requestBody && typeof op.operationId === "string") {
        op.requestBody["x-max-body-bytes"] = bodyLimitOf(op.operationId, DEFAULT_SCAN_MAX_HASHES)
      }
    }
    paths[UNPREFIXED.has(path) ? path : `/v1${path}`] = item
  }
  return { ...spec, paths }
}
