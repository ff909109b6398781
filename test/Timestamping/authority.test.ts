/**
 * The time-stamping authority as a service (CONTRACT §6), over SQLite as AppLive
 * wires it: the token it grants (TSTInfo fields, the three signed attributes,
 * the chain it validates against, nonce and certReq), every refusal with its
 * failInfo (nothing stored), timeNotAvailable under a clock discipline that
 * does not trust the clock, unique serials, and the registration of each token
 * through the Attestor (a claim only for a key).
 */
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, Layer, ManagedRuntime } from "effect"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import * as pkijs from "pkijs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { ApiKeyRepo } from "../../src/Auth/ApiKeyRepo.js"
import { hashSecret } from "../../src/Auth/Domain.js"
import { AppLive } from "../../src/main.js"
import { AppConfig } from "../../src/Platform/Config.js"
import { OID, parseTimeStampToken, validateTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { fieldsOfJson, TimestampAuthority } from "../../src/Timestamping/Authority.js"
import { ClockDiscipline } from "../../src/Timestamping/Clock.js"
import { TimestampRepo } from "../../src/Timestamping/Repo.js"
import { createSqliteDatabase, type TestDatabase } from "../helpers/databases.js"
import { MD5_OID, readReply, timestampRequest } from "../helpers/timestampRequests.js"

const EXTRA_POLICY = "1.3.6.1.4.1.99999.7"

const makeRuntime = (db: TestDatabase) => {
  const base = AppConfig.make()
  return ManagedRuntime.make(AppLive(
    AppConfig.make({
      databaseUrl: db.url,
      dataDir: db.dataDir,
      sealInterval: Duration.hours(24),
      timestamping: { ...base.timestamping, acceptedPolicies: [EXTRA_POLICY] }
    }),
    { workers: false }
  ))
}

/** A clock discipline that has lost the clock: the authority built over it. */
const untrustedAuthority = TimestampAuthority.layer.pipe(Layer.provide(Layer.succeed(ClockDiscipline, {
  state: Effect.succeed({ _tag: "Untrusted" as const, offsetMs: 4200, reason: "median offset 4200 ms exceeds the tolerance of 1000 ms", checkedAtMillis: 0 }),
  toleranceMs: 1000
})))

const sha256 = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest())
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex")

describe("time-stamping authority (service, SQLite)", () => {
  let db: TestDatabase
  let runtime: ReturnType<typeof makeRuntime>
  let rootPem = ""
  let tsaDer: Uint8Array

  const respond = (der: Uint8Array, key: Parameters<TimestampAuthority["Type"]["respond"]>[1] = null) =>
    runtime.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.respond(der, key))).then(readReply)
  const tokenCount = () =>
    runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM timestamp_tokens`)).then((r) => Number(r[0]!.n))
  const stored = (serialDecimal: string) =>
    runtime.runPromise(Effect.flatMap(TimestampRepo, (repo) => repo.bySerial(BigInt(serialDecimal).toString(16))))

  beforeAll(async () => {
    db = await createSqliteDatabase()
    runtime = makeRuntime(db)
    await runtime.runPromise(Effect.void)
    rootPem = readFileSync(join(db.dataDir, "tsa", "root.pem"), "utf8")
    tsaDer = new Uint8Array(Buffer.from(readFileSync(join(db.dataDir, "tsa", "tsa.pem"), "utf8").replace(/-----[A-Z ]+-----|\s/g, ""), "base64"))
  })

  afterAll(async () => {
    await runtime?.dispose()
    await db?.drop()
  })

  it("grants a token that chains to <dataDir>/tsa/root.pem, with the contract's fields and signed attributes", async () => {
    const digest = sha256(new TextEncoder().encode("grant"))
    const nonce = new Uint8Array([0x00, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07])
    const reply = await respond(timestampRequest({ digest, nonce }))
    expect(reply.status).toBe(0)
    const token = reply.token!
    const valid = await validateTimeStampToken(token, { digest, nonce: nonce.subarray(1), trustAnchorsPem: rootPem, requireChain: true })
    expect(valid.policy).toBe("2.999.1")
    expect(valid.accuracy).toEqual({ seconds: 1, millis: 0, micros: 0 })
    expect(valid.tsaName).toBe("CN=attestd time-stamping authority (demo\\, unqualified),O=attestd demo (not a qualified trust service)")
    expect(BigInt(valid.serialNumber) > 0n && BigInt(valid.serialNumber) < 2n ** 160n).toBe(true)
    expect(valid.details.certificates).toHaveLength(1)

    const signed = new pkijs.SignedData({ schema: pkijs.ContentInfo.fromBER(token).content })
    const signerInfo = signed.signerInfos[0]!
    expect(signerInfo.signedAttrs!.attributes.map((a) => a.type).sort()).toEqual([OID.contentType, OID.messageDigest, OID.signingCertificateV2].sort())
    expect(signerInfo.signatureAlgorithm.algorithmId).toBe("1.2.840.10045.4.3.2")
    // ESSCertIDv2: the SHA-256 of the TSA certificate (the default algorithm, so none named)
    const essValue = signerInfo.signedAttrs!.attributes.find((a) => a.type === OID.signingCertificateV2)!.values[0]
    expect(Buffer.from(essValue.toBER()).includes(Buffer.from(sha256(tsaDer)))).toBe(true)

    // stored with genTime in milliseconds, as in the token
    const row = await stored(valid.serialNumber)
    expect(row?.genTime).toBe(valid.genTime.toISOString())
    expect(row?.genTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(row?.token).toEqual(token)
  })

  it("embeds certificates only when the request asks (certReq)", async () => {
    const without = await respond(timestampRequest({ certReq: false }))
    expect(without.status).toBe(0)
    expect(parseTimeStampToken(without.token!).certificates).toEqual([])
    const withCerts = await respond(timestampRequest({ certReq: true }))
    expect(parseTimeStampToken(withCerts.token!).certificates.map((c) => c.subject)).toEqual([
      "CN=attestd time-stamping authority (demo\\, unqualified),O=attestd demo (not a qualified trust service)"
    ])
  })

  it("echoes the nonce as sent, and none when none was sent", async () => {
    const big = new Uint8Array([0x7f, ...Array.from({ length: 19 }, (_, i) => i)])
    const echoed = parseTimeStampToken((await respond(timestampRequest({ nonce: big }))).token!)
    expect(echoed.nonce).toBe(BigInt(`0x${hex(big)}`).toString())
    expect(parseTimeStampToken((await respond(timestampRequest())).token!).nonce).toBeNull()
  })

  it("grants SHA-384 and SHA-512 imprints; only a SHA-256 imprint is attested itself", async () => {
    for (const [algorithm, length, name] of [[OID.sha384, 48, "sha384"], [OID.sha512, 64, "sha512"]] as const) {
      const reply = await respond(timestampRequest({ algorithm, digest: new Uint8Array(length).fill(7) }))
      expect(reply.status).toBe(0)
      const details = parseTimeStampToken(reply.token!)
      const row = (await stored(details.serial_number))!
      expect(row).toMatchObject({ hashAlgorithm: name, hashedMessage: "07".repeat(length), imprintAttestationId: null })
      expect(row.tokenSha256).toBe(hex(sha256(reply.token!)))
    }
  })

  it("registers the token's SHA-256 and a SHA-256 imprint through the Attestor; public access makes no claim", async () => {
    const digest = sha256(new TextEncoder().encode("registered"))
    const reply = await respond(timestampRequest({ digest }))
    const row = (await stored(parseTimeStampToken(reply.token!).serial_number))!
    const byHash = async (hash: string) => (await runtime.runPromise(Effect.flatMap(AttestationRepo, (repo) => repo.statusByHashes([hash]))))[0]
    const [tokenAttestation, imprintAttestation] = [await byHash(hex(sha256(reply.token!))), await byHash(hex(digest))]
    expect(tokenAttestation?.id).toBe(row.tokenAttestationId)
    expect(imprintAttestation?.id).toBe(row.imprintAttestationId)
    const claims = await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ n: number }>`SELECT COUNT(*) AS n FROM claims WHERE attestation_seq IN (${tokenAttestation!.seq}, ${imprintAttestation!.seq})`))
    expect(Number(claims[0]!.n)).toBe(0)
  })

  it("under key access the caller's key holds the claims, labelled with the serial", async () => {
    const key = await runtime.runPromise(Effect.gen(function*() {
      const repo = yield* ApiKeyRepo
      const created = yield* repo.create({ label: "tsa", scopes: ["timestamp"], orgId: null, env: null, allowIps: null, rateLimit: null, monthlyQuota: null })
      return (yield* repo.findByHash(hashSecret(created.secret)))!
    }))
    const reply = await respond(timestampRequest(), key)
    const serial = BigInt(parseTimeStampToken(reply.token!).serial_number).toString(16)
    const sources = await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ source: string }>`SELECT source FROM claims WHERE api_key_id = ${key.id}`))
    expect(sources.map((s) => s.source)).toEqual([`rfc3161 token ${serial}`, `rfc3161 token ${serial}`])
  })

  const refusals: ReadonlyArray<readonly [string, () => Uint8Array, string]> = [
    ["SHA-1", () => timestampRequest({ algorithm: OID.sha1, digest: new Uint8Array(20) }), "badAlg"],
    ["MD5", () => timestampRequest({ algorithm: MD5_OID, digest: new Uint8Array(16) }), "badAlg"],
    ["an unknown algorithm", () => timestampRequest({ algorithm: "1.2.3.4", digest: new Uint8Array(32) }), "badAlg"],
    ["bytes that are not DER", () => new TextEncoder().encode("not a TimeStampReq"), "badDataFormat"],
    ["a request with trailing bytes", () => new Uint8Array([...timestampRequest(), 0]), "badDataFormat"],
    ["a SHA-256 imprint of 31 bytes", () => timestampRequest({ digest: new Uint8Array(31) }), "badDataFormat"],
    ["a SHA-512 imprint of 32 bytes", () => timestampRequest({ algorithm: OID.sha512, digest: new Uint8Array(32) }), "badDataFormat"],
    ["an extension", () => timestampRequest({ extension: true }), "unacceptedExtension"],
    ["a policy it does not accept", () => timestampRequest({ policy: "1.2.3.4.5" }), "unacceptedPolicy"],
    ["version 2", () => timestampRequest({ version: 2 }), "badRequest"]
  ]

  it("refuses with the right failInfo and a statusString, storing nothing", async () => {
    const before = await tokenCount()
    for (const [what, request, failInfo] of refusals) {
      const reply = await respond(request())
      expect({ what, status: reply.status, failInfo: reply.failInfo }).toEqual({ what, status: 2, failInfo: [failInfo] })
      expect(reply.statusText, what).toMatch(/\S/)
      expect(reply.token, what).toBeUndefined()
    }
    expect(await tokenCount()).toBe(before)
  })

  it("grants under a policy of ATTESTD_TSA_POLICIES when asked for it", async () => {
    const reply = await respond(timestampRequest({ policy: EXTRA_POLICY }))
    expect(reply.status).toBe(0)
    expect(parseTimeStampToken(reply.token!).policy).toBe(EXTRA_POLICY)
  })

  it("refuses with timeNotAvailable while the clock discipline does not trust the clock", async () => {
    const before = await tokenCount()
    const reply = await runtime.runPromise(Effect.scoped(Effect.flatMap(Layer.build(untrustedAuthority), (ctx) =>
      Context.get(ctx, TimestampAuthority).respond(timestampRequest(), null)))).then(readReply)
    expect(reply).toMatchObject({ status: 2, failInfo: ["timeNotAvailable"] })
    expect(reply.statusText).toContain("median offset 4200 ms")
    expect(await tokenCount()).toBe(before)
  })

  it("gives every token its own serial; the store refuses a serial twice", async () => {
    const replies = await Promise.all(Array.from({ length: 12 }, () => respond(timestampRequest())))
    const serials = new Set(replies.map((r) => parseTimeStampToken(r.token!).serial_number))
    expect(serials.size).toBe(12)
    const row = (await stored([...serials][0]!))!
    const again = await runtime.runPromise(Effect.flatMap(TimestampRepo, (repo) =>
      repo.insert({
        serial: row.serial,
        gen_time: row.genTime,
        policy: row.policy,
        hash_algorithm: row.hashAlgorithm,
        hashed_message: row.hashedMessage,
        token: row.token,
        token_sha256: row.tokenSha256,
        token_attestation_id: row.tokenAttestationId,
        imprint_attestation_id: row.imprintAttestationId
      })))
    expect(again).toBe(false)
  })

  it("reads the JSON form as the TimeStampReq it stands for (decimal nonce, any-case hex)", async () => {
    const fields = fieldsOfJson({ artifact_hash: "AB".repeat(32), hash_algorithm: "sha256", nonce: "340282366920938463463374607431768211457", cert_req: true })
    const reply = await runtime.runPromise(Effect.flatMap(TimestampAuthority, (a) => a.respond(fields, null))).then(readReply)
    const details = parseTimeStampToken(reply.token!)
    expect(details).toMatchObject({ hashed_message: "ab".repeat(32), nonce: "340282366920938463463374607431768211457" })
    expect(details.certificates).toHaveLength(1)
  })
})
