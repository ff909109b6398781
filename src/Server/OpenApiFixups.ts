/**
 * Post-processing of the generated OpenAPI document: paths are published under
 * /v1 (the stable contract; unprefixed aliases are served too), and
 * request-decoding failures are documented as the VALIDATION_ERROR envelope
 * that the edge really answers with, and each request body carries the
 * operation's size limit as `x-max-body-bytes` (413 above it). The HTTP
 * Basic scheme that configured-access operations also take (the key as
 * password) is declared beside the bearer one.
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
  let basic = false
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const operation of Object.values(item as Json)) {
      const op = operation as Json
      if (Array.isArray(op?.security) && op.security.some((r: Json) => r !== null && typeof r === "object" && "basic" in r)) basic = true
      if (op?.requestBody && typeof op.operationId === "string") {
        op.requestBody["x-max-body-bytes"] = bodyLimitOf(op.operationId, DEFAULT_SCAN_MAX_HASHES)
      }
    }
    paths[UNPREFIXED.has(path) ? path : `/v1${path}`] = item
  }
  const components: Json = spec.components ?? {}
  if (basic) {
    components.securitySchemes = {
      ...components.securitySchemes,
      basic: {
        type: "http",
        scheme: "basic",
        description: "HTTP Basic with an API key as the password (the user name is ignored), where an operation says so"
      }
    }
  }
  return { ...spec, components, paths }
}
