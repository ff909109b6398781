/**
 * Key files (ATTESTD_SIGNER=file): encrypted PKCS#8 with a passphrase, plain without,
 * refused when open to group or others or when they do not match the configuration;
 * `signing-keys encrypt` converts in place. And the public key of a PKCS#11 token's key,
 * read from its CKA_EC_POINT.
 */
import * as asn1js from "asn1js"
import { createPublicKey } from "node:crypto"
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { encryptKeyFiles, ephemeralKey, generateKeyFile, keyDir, loadKeyFiles, publicJwkOf } from "../../src/Platform/Keys/FileKeys.js"
import { jwkFromEcPoint } from "../../src/Platform/Keys/Pkcs11Keys.js"

const dirs: Array<string> = []
const dataDir = () => {
  const d = mkdtempSync(join(tmpdir(), "attestd-keyfiles-"))
  dirs.push(d)
  return d
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const onlyFile = (dir: string) => join(keyDir(dir, "t0"), readdirSync(keyDir(dir, "t0"))[0]!)

describe("key files", () => {
  it("with a passphrase: encrypted PKCS#8, 0600 in a 0700 directory; read back only with the passphrase", () => {
    const dir = dataDir()
    const made = generateKeyFile(dir, "t0", Date.now(), "s3cret")
    const file = onlyFile(dir)
    expect(readFileSync(file, "utf8")).toMatch(/^-----BEGIN ENCRYPTED PRIVATE KEY-----/)
    expect((statSync(file).mode & 0o777).toString(8)).toBe("600")
    expect((statSync(keyDir(dir, "t0")).mode & 0o777).toString(8)).toBe("700")
    expect(loadKeyFiles(dir, "t0", "s3cret").map((k) => k.kid)).toEqual([made.kid])
    expect(() => loadKeyFiles(dir, "t0", undefined)).toThrow(/is encrypted: set ATTESTD_KEY_PASSPHRASE_FILE/)
    expect(() => loadKeyFiles(dir, "t0", "wrong")).toThrow(new RegExp(`cannot decrypt signing key file ${file}.*wrong passphrase`))
  })

  it("a plain file is refused once a passphrase is configured; signing-keys encrypt converts it in place, same key", () => {
    const dir = dataDir()
    const made = generateKeyFile(dir, "t0", Date.now(), undefined)
    const file = onlyFile(dir)
    expect(readFileSync(file, "utf8")).toMatch(/^-----BEGIN PRIVATE KEY-----/)
    expect(() => loadKeyFiles(dir, "t0", "pw")).toThrow(/not encrypted .* run attestd signing-keys encrypt/)
    expect(encryptKeyFiles(dir, "pw")).toEqual({ encrypted: [file], already: [] })
    expect(readFileSync(file, "utf8")).toMatch(/^-----BEGIN ENCRYPTED PRIVATE KEY-----/)
    expect((statSync(file).mode & 0o777).toString(8)).toBe("600")
    expect(loadKeyFiles(dir, "t0", "pw").map((k) => k.kid)).toEqual([made.kid])
    expect(encryptKeyFiles(dir, "pw")).toEqual({ encrypted: [], already: [file] })
    expect(readdirSync(keyDir(dir, "t0"))).toHaveLength(1) // no partial file left beside it
  })

  it("a key file open to group or others is refused, with or without a passphrase, naming the file", () => {
    for (const passphrase of [undefined, "pw"]) {
      const dir = dataDir()
      generateKeyFile(dir, "t0", Date.now(), passphrase)
      const file = onlyFile(dir)
      chmodSync(file, 0o640)
      expect(() => loadKeyFiles(dir, "t0", passphrase)).toThrow(`signing key file ${file} has mode 0640: it is open to group or others`)
      chmodSync(file, 0o604)
      expect(() => loadKeyFiles(dir, "t0", passphrase)).toThrow(/open to group or others/)
    }
  })
})

describe("a token key's public key from CKA_EC_POINT", () => {
  it("reads the DER OCTET STRING around the uncompressed point", () => {
    const key = ephemeralKey()
    const spki = createPublicKey(key.privateKey).export({ format: "der", type: "spki" })
    const point = (asn1js.fromBER(spki).result as asn1js.Sequence).valueBlock.value[1] as asn1js.BitString
    const ecPoint = new asn1js.OctetString({ valueHex: point.valueBlock.valueHexView }).toBER()
    expect(jwkFromEcPoint(new Uint8Array(ecPoint))).toEqual(publicJwkOf(key.privateKey))
  })

  it("refuses anything else", () => {
    expect(() => jwkFromEcPoint(new Uint8Array([0x04, 1, 2, 3]))).toThrow(/not a DER OCTET STRING/)
    expect(() => jwkFromEcPoint(new Uint8Array(new asn1js.OctetString({ valueHex: new Uint8Array(65) }).toBER()))).toThrow()
  })
})
