/**
 * No cryptographic primitive is implemented in src/: signatures, hashes, HMAC,
 * AES, DER and X.509 come from node:crypto / WebCrypto, @noble, pkijs/asn1js or an
 * HSM. Read as text (nothing is run), this fails on the marks a hand-written
 * primitive leaves: a hash function's round constants, modular arithmetic on
 * bigints, a private scalar or nonce taken out of a key.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")

const listTs = (dir: string): Array<string> =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listTs(`${dir}/${e.name}`) : e.name.endsWith(".ts") ? [`${dir}/${e.name}`] : []
  )

const MARKS: ReadonlyArray<readonly [string, RegExp]> = [
  ["SHA-256 round constant or initial value", /0x428a2f98|0x6a09e667|0xbb67ae85|0x71374491/i],
  ["SHA-1 / MD5 initial value", /0x67452301|0xefcdab89/i],
  ["AES S-box", /0x63,\s*0x7c,\s*0x77,\s*0x7b/i],
  ["a private scalar or nonce taken out of a key", /privateScalar|signWithNonce|\bkInv\b|NoncePool|presign/i],
  ["modular inversion or exponentiation by hand", /modInverse|modPow|invert\(|\bpowMod\b/],
  ["bigint modular arithmetic", /%\s*(?:n|N|ORDER|CURVE_ORDER|P256_N)\b/],
  ["a P-256 group order or field prime", /ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551|ffffffff00000001000000000000000000000000ffffffffffffffffffffffff/i],
  ["a private JWK member read", /\.d\b\s*(?:as|!|\))|jwk\.d\b/]
]

describe("src/ implements no cryptographic primitive", () => {
  const files = listTs("src").map((path) => [path, readFileSync(join(ROOT, path), "utf8")] as const)

  it("reads the whole tree", () => {
    expect(files.length).toBeGreaterThan(100)
  })

  for (const [what, mark] of MARKS) {
    it(`no ${what}`, () => {
      const found = files.flatMap(([path, text]) =>
        text.split("\n").flatMap((line, i) => (mark.test(line) ? [`${path}:${i + 1}: ${line.trim()}`] : []))
      )
      expect(found).toEqual([])
    })
  }

  it("the marks find what they are for", () => {
    const samples: Record<string, string> = {
      "SHA-256 round constant or initial value": "const K = [0x428a2f98, 0x71374491]",
      "a private scalar or nonce taken out of a key": "const d = privateScalar(key)",
      "bigint modular arithmetic": "const s = (k * (e + r * d)) % ORDER",
      "a P-256 group order or field prime": "0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n"
    }
    for (const [what, sample] of Object.entries(samples)) {
      expect(MARKS.find(([w]) => w === what)![1].test(sample)).toBe(true)
    }
  })
})
