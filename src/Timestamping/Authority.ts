/**
 * attestd as an RFC 3161 time-stamping authority (CONTRACT §6). A request is
 * answered with a DER TimeStampResp, granted or refused, never with an error:
 * refusals are `rejection`s whose failInfo and statusString are all an RFC
 * 3161 client shows its user. A granted token is signed by the TSA key
 * (which one, under which chain: TsaSigning.ts) through the Signer port, and
 * registered before it is handed out: the SHA-256 of the whole token (and a
 * SHA-256 imprint itself) is attested through the Attestor, as POST /v1/attest
 * does, so it seals into T1 and T2; the token is stored by its serial. Issuing stops with `timeNotAvailable`
 * while the clock discipline does not trust the clock.
 */
import { Cause, Clock, Context, Effect, Layer, Option } from "effect"
import { createHash } from "node:crypto"
import * as asn1js from "asn1js"
import { Attestor } from "../Attestations/Attestor.js"
import type { ApiKey } from "../Auth/Domain.js"
import { bytesToHex, hexToBytes } from "../Domain/Bytes.js"
import { NotFound } from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { HealthChecks } from "../Platform/HealthChecks.js"
import * as Metrics from "../Platform/Metrics.js"
import { Signer } from "../Platform/Signer.js"
import { OID } from "../Platform/Tsa/Rfc3161.js"
import {
  checkTimeStampRequest,
  IMPRINT_LENGTHS,
  isRefusal,
  type IssuingPolicy,
  prepareToken,
  randomSerial,
  readTimeStampRequest,
  type Refusal,
  rejectionResponse,
  SIGNATURE_OID,
  type TimeStampRequestFields
} from "../Platform/Tsa/TokenIssuer.js"
import { ClockDiscipline, issuable } from "./Clock.js"
import { TimestampRepo } from "./Repo.js"
import { tsaSigning } from "./TsaSigning.js"

/** The imprint algorithms by the names of the JSON form and the lookup. */
export const HASH_ALGORITHMS = { sha256: OID.sha256, sha384: OID.sha384, sha512: OID.sha512 } as const
export type HashAlgorithmName = keyof typeof HASH_ALGORITHMS

const nameOfAlgorithm = (oid: string): string =>
  (Object.keys(HASH_ALGORITHMS) as Array<HashAlgorithmName>).find((name) => HASH_ALGORITHMS[name] === oid) ?? oid

/** The JSON form of a request (CONTRACT §6), schema-checked. */
export interface JsonTimestampRequest {
  readonly artifact_hash: string
  readonly hash_algorithm: HashAlgorithmName
  /** A decimal integer. */
  readonly nonce?: string | undefined
  readonly cert_req?: boolean | undefined
  readonly tsa_policy_oid?: string | undefined
}

/** A JSON request as the fields of the TimeStampReq it stands for. */
export const fieldsOfJson = (r: JsonTimestampRequest): TimeStampRequestFields => ({
  version: 1,
  hashAlgorithm: HASH_ALGORITHMS[r.hash_algorithm],
  hashedMessage: hexToBytes(r.artifact_hash.toLowerCase()),
  reqPolicy: r.tsa_policy_oid,
  nonce: r.nonce === undefined ? undefined : asn1js.Integer.fromBigInt(BigInt(r.nonce)).valueBlock.valueHexView.slice(),
  certReq: r.cert_req ?? false,
  extensionCount: 0
})

const sha256Hex = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

/** Tries to store a token under a fresh serial; three taken serials in a row is a broken random source. */
const SERIAL_ATTEMPTS = 3

const disabled = new NotFound({ message: "time-stamping is off on this instance (ATTESTD_TIMESTAMPING=off)" })

export class TimestampAuthority extends Context.Tag("Timestamping/TimestampAuthority")<TimestampAuthority, {
  /** The DER TimeStampResp for a DER TimeStampReq or its JSON form; `key`: the caller's key under `key` access. */
  readonly respond: (request: Uint8Array | TimeStampRequestFields, key: ApiKey | null) => Effect.Effect<Uint8Array, NotFound>
  /** The TSA's certificate chain, PEM, its own certificate first. */
  readonly certificateChain: Effect.Effect<string, NotFound>
}>() {
  /** ATTESTD_TIMESTAMPING=off: every time-stamping route answers 404. */
  static readonly disabled = Layer.succeed(TimestampAuthority, {
    respond: () => Effect.fail(disabled),
    certificateChain: Effect.fail(disabled)
  })

  static readonly layer = Layer.scoped(
    TimestampAuthority,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const signer = yield* Signer
      const clock = yield* ClockDiscipline
      const attestor = yield* Attestor
      const repo = yield* TimestampRepo
      const keys = yield* Option.match(signer.tsa, {
        onNone: () => Effect.dieMessage("time-stamping is on but the signer holds no TSA key"),
        onSome: Effect.succeed
      })
      const signing = yield* tsaSigning(config, keys)
      yield* (yield* HealthChecks).register({ features: ["rfc3161_timestamping"] })
      const policy: IssuingPolicy = {
        algorithms: IMPRINT_LENGTHS,
        defaultPolicy: config.timestamping.policy,
        acceptedPolicies: config.timestamping.acceptedPolicies
      }

      const refuse = (r: Refusal) => {
        Metrics.inc(Metrics.timestampsAnswered, { outcome: r.failInfo })
        return rejectionResponse(r)
      }

      /** Issues, registers and stores a token; its granted response. */
      const grant = (req: TimeStampRequestFields, grantedPolicy: string, caller: ApiKey | null) =>
        Effect.gen(function*() {
          const { key, chain } = yield* signing.now
          for (let attempt = 1; attempt <= SERIAL_ATTEMPTS; attempt++) {
            const serial = randomSerial()
            const genTime = new Date(yield* Clock.currentTimeMillis)
            const prepared = prepareToken({
              signer: chain.tokens,
              includeCertificates: req.certReq,
              signatureAlgorithm: SIGNATURE_OID.ecdsaWithSha256,
              policy: grantedPolicy,
              hashAlgorithm: req.hashAlgorithm,
              hashedMessage: req.hashedMessage,
              serial: serial.integer,
              genTime,
              accuracyMs: clock.toleranceMs,
              nonce: req.nonce
            })
            const { token, response } = prepared.finishGranted(yield* key.sign(prepared.signedAttributes))
            const tokenSha256 = sha256Hex(token)
            const imprint = req.hashAlgorithm === OID.sha256 ? bytesToHex(req.hashedMessage) : undefined
            const hashes = imprint === undefined || imprint === tokenSha256 ? [tokenSha256] : [tokenSha256, imprint]
            const registered = caller === null
              ? yield* attestor.register(hashes)
              : yield* attestor.attest({
                key: caller,
                hashes,
                source: `rfc3161 token ${serial.hex}`,
                extraData: null,
                clientEncrypted: false
              })
            const stored = yield* repo.insert({
              serial: serial.hex,
              gen_time: genTime.toISOString(),
              policy: grantedPolicy,
              hash_algorithm: nameOfAlgorithm(req.hashAlgorithm),
              hashed_message: bytesToHex(req.hashedMessage),
              token,
              token_sha256: tokenSha256,
              token_attestation_id: registered[0]!.attestation.id,
              imprint_attestation_id: imprint === undefined ? null : registered[hashes.indexOf(imprint)]!.attestation.id
            })
            if (stored) {
              Metrics.inc(Metrics.timestampsAnswered, { outcome: "granted" })
              return response
            }
          }
          return yield* Effect.dieMessage(`${SERIAL_ATTEMPTS} random serials in a row were taken`)
        })

      /** Signing, registering or storing failed: a systemFailure rejection (logged), never an HTTP error. */
      const systemFailure = (cause: Cause.Cause<unknown>) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.failCause(cause as Cause.Cause<never>)
          : Effect.as(
            Effect.logError("a time-stamp token could not be issued", cause),
            refuse({ failInfo: "systemFailure", text: "the token could not be issued and registered now; retry shortly" })
          )

      const respond = (request: Uint8Array | TimeStampRequestFields, caller: ApiKey | null) =>
        Effect.gen(function*() {
          const req = request instanceof Uint8Array ? readTimeStampRequest(request) : request
          if (isRefusal(req)) return refuse(req)
          const checked = checkTimeStampRequest(req, policy)
          if (isRefusal(checked)) return refuse(checked)
          const state = yield* clock.state
          if (!issuable(state)) {
            return refuse({
              failInfo: "timeNotAvailable",
              text: `this TSA's clock is not trusted now${state._tag === "Untrusted" ? ` (${state.reason})` : ""}; no token is issued until it is`
            })
          }
          return yield* Effect.catchAllCause(grant(req, checked.policy, caller), systemFailure)
        })

      // While nothing can sign (an operator's chain that certifies no key held), the last chain stays published.
      const certificateChain = Effect.map(signing.published, (s) => s.chain.pem)
      return { respond, certificateChain }
    })
  )
}
