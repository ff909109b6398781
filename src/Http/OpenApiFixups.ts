/**
 * Post-processing of the generated OpenAPI document: paths are published under
 * /v1 (the stable contract; unprefixed aliases are served too), and
 * request-decoding failures are documented as the VALIDATION_ERROR envelope
 * that the edge really answers with.
 */
type Json = Record<string, any>

const UNPREFIXED = new Set(["/test-vectors.json"])

export const openApiFixups = (spec: Json): Json => {
  const schemas: Json = spec.components?.schemas ?? {}
  if (schemas.HttpApiDecodeError && schemas.ValidationErrorEnvelope) {
    schemas.HttpApiDecodeError = schemas.ValidationErrorEnvelope
  }
  const paths: Json = {}
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    paths[UNPREFIXED.has(path) ? path : `/v1${path}`] = item
  }
  return { ...spec, paths }
}
