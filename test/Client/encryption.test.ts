import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { decryptExtraData, encryptExtraData, generateExtraDataKey, importExtraDataKey } from "../../src/index.js"
import { createDecipheriv, randomBytes } from "node:crypto"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"

describe("client-side extra_data encryption (AES-256-GCM)", () => {
  it("round-trips any JSON value", async () => {
    const key = await generateExtraDataKey()
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (value) => {
        const blob = await encryptExtraData(key, value)
        expect(blob.alg).toBe("A256GCM")
        expect(blob.iv).toMatch(/^[A-Za-z0-9_-]{16}$/)
        expect(await decryptExtraData(key, blob)).toEqual(JSON.parse(JSON.stringify(value)))
      }),
      { numRuns: 50 }
    )
  })

  it("is standard AES-256-GCM: node:crypto decrypts it with the same raw key", async () => {
    const raw = randomBytes(32)
    const blob = await encryptExtraData(await importExtraDataKey(raw), { patient: "x", n: 1 })
    const data = Buffer.from(blob.ciphertext, "base64url")
    const decipher = createDecipheriv("aes-256-gcm", raw, Buffer.from(blob.iv, "base64url"))
    decipher.setAuthTag(data.subarray(data.length - 16))
    const plain = Buffer.concat([decipher.update(data.subarray(0, data.length - 16)), decipher.final()])
    expect(JSON.parse(plain.toString("utf8"))).toEqual({ patient: "x", n: 1 })
  })

  it("rejects a wrong key, tampering and wrong associated data", async () => {
    const key = await generateExtraDataKey()
    const blob = await encryptExtraData(key, { a: 1 }, "hash-1")
    await expect(decryptExtraData(await generateExtraDataKey(), blob, "hash-1")).rejects.toThrow()
    await expect(decryptExtraData(key, blob, "hash-2")).rejects.toThrow()
    const bytes = Buffer.from(blob.ciphertext, "base64url")
    bytes[0] = bytes[0]! ^ 1
    await expect(decryptExtraData(key, { ...blob, ciphertext: bytes.toString("base64url") }, "hash-1")).rejects.toThrow()
    await expect(importExtraDataKey(new Uint8Array(16))).rejects.toThrow()
  })
})

describe("encrypted extra_data through the service", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer("sqlite")
  })
  afterAll(async () => {
    await server?.close()
  })

  it("is stored and returned as the opaque blob, and decrypts on the client", async () => {
    const { key } = await server.createKey()
    const aes = await generateExtraDataKey()
    const hash = randomHash()
    const blob = await encryptExtraData(aes, { secret: "only-the-client-knows" }, hash)
    const api = client(server.url, key)
    const r = await api.post("/v1/attest", { hash_hex: hash, extra_data: blob, client_encrypted: true })
    expect(r.status).toBe(201)
    expect(r.text).not.toContain("only-the-client-knows")
    const meta = await api.get(`/v1/attestation/${r.body.id}/metadata`)
    expect(meta.body.client_encrypted).toBe(true)
    expect(meta.body.extra_data).toEqual(blob)
    expect(await decryptExtraData(aes, meta.body.extra_data, hash)).toEqual({ secret: "only-the-client-knows" })
  })
})
