/** A public ECDSA P-256 signing key as JWK (spec 2.8); its kid is the RFC 7638 thumbprint. */
import { Schema } from "effect"

export const Jwk = Schema.Struct({
  kty: Schema.Literal("EC"),
  crv: Schema.Literal("P-256"),
  alg: Schema.Literal("ES256"),
  kid: Schema.String,
  x: Schema.String,
  y: Schema.String,
  use: Schema.optional(Schema.Literal("sig"))
}).annotations({ identifier: "PublicJwk" })
