/** Stored signing keys: checked against the PublicJwk schema, published in the order they were stored. */
import { describe, expect, it } from "vitest"
import { storedJwk } from "../../src/Platform/SigningKeys.js"

describe("storedJwk", () => {
  const stored = { crv: "P-256", kty: "EC", x: "x-coordinate", y: "y-coordinate", kid: "kid-1", alg: "ES256", use: "sig" }

  it("returns the stored key as stored, key order included", () => {
    const jwk = storedJwk(JSON.stringify(stored))
    expect(jwk).toEqual(stored)
    expect(JSON.stringify(jwk)).toBe(JSON.stringify(stored))
  })

  it("refuses a stored key that does not match the schema", () => {
    expect(() => storedJwk(JSON.stringify({ ...stored, crv: "P-384" }))).toThrow(/does not match/)
    expect(() => storedJwk(JSON.stringify({ ...stored, x: 1 }))).toThrow(/does not match/)
    const { kid: _kid, ...noKid } = stored
    expect(() => storedJwk(JSON.stringify(noKid))).toThrow(/does not match/)
  })
})
