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
  attestd_activated_at: Schema.optional(Schema.String.annotations({
    description: "Start of the key's validity window (ISO 8601, the registered_at format): it signs only attestations registered from then on. " +
      "For a key of imported historical attestations, the earliest registered_at imported with it."
  })),
  attestd_retired_at: Schema.optional(Schema.String.annotations({
    description: "End of the key's validity window, once it was rotated out (or, for an imported key, the latest registered_at imported with it). " +
      "A T0 signature whose registeredAt lies outside the window fails verification."
  })),
  status: Schema.optional(Schema.Literal("retired").annotations({
    description: "Present on keys that sign nothing new: keys rotated out (attestd signing-keys rotate) and the keys of imported historical attestations (attestd import). Their signatures stay verifiable within their window."
  }))
}).annotations({ identifier: "PublicJwk" })
