/** A public ECDSA P-256 signing key as JWK (spec 2.8); its kid is the RFC 7638 thumbprint. */
import { Schema } from "effect"

export const Jwk = Schema.Struct({
  kty: Schema.Literal("EC"),
  crv: Schema.Literal("P-256"),
  alg: Schema.Literal("ES256"),
  kid: Schema.String,
  x: Schema.String,
  y: Schema.String,
  use: Schema.optional(Schema.Literal("sig")),
  status: Schema.optional(Schema.Literal("retired").annotations({
    description: "Present on keys that sign nothing new: the keys of imported historical attestations (attestd import). Their signatures stay verifiable."
  }))
}).annotations({ identifier: "PublicJwk" })
