/** Handlers for attest, verify and lookup. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Clock, Effect, Option } from "effect"
import { Authenticator, bearerCredential } from "../Auth/Authenticator.js"
import { requireAnyScope, requireScope } from "../Auth/Http.js"
import { hasScope } from "../Auth/Domain.js"
import { Quota } from "../Auth/Quota.js"
import { PublicLimit } from "../Auth/PublicLimit.js"
import { RequestMetas } from "../Auth/RequestMeta.js"
import { AuthError } from "../Domain/Errors.js"
import { T0_ALGORITHM, t0Payload } from "../Domain/T0.js"
import { formatMillis } from "../Domain/Time.js"
import { Api } from "../Api.js"
import { type Attested, Attestor } from "./Attestor.js"
import { type Attestation, type AttestationStatus, legacyOf } from "./Domain.js"
import { AttestationItem, type VerifyResponse } from "./Api.js"
import { Evidence } from "./Evidence.js"
import type { HashHex } from "../Domain/HashHex.js"
import { checkExtraData } from "./ExtraData.js"
import { findPublicAttestation } from "./Find.js"
import { PublicReads } from "./PublicReads.js"
import { readWithClaims, StatusReads } from "./StatusReads.js"

const itemOf = (a: Attested) => ({
  id: a.attestation.id,
  hash_hex: a.attestation.hashHex,
  timestamp: a.attestation.registeredAt,
  signature: a.attestation.signature,
  signing_key_id: a.attestation.signingKeyId,
  format_version: a.attestation.formatVersion,
  status: a.created ? "created" as const : "existing" as const,
  etag: a.claim.etag,
  claim_id: a.claim.id,
  source: a.claim.source,
  extra_data: a.claim.extraData ?? null,
  client_encrypted: a.claim.clientEncrypted
})

const statusOf = (a: Attestation) => ({
  id: a.id,
  hash_hex: a.hashHex,
  level: a.level,
  t0_timestamp: a.registeredAt,
  t1_timestamp: a.t1At,
  t2_timestamp: a.t2At,
  t2_bitcoin_block: a.t2Block,
  signature_available: true,
  merkle_proof_available: a.level !== "T0",
  ots_available: false,
  ...legacyOf(a)
})

/** An attest item's JSON response, its encoder built once. */
const attestItemJson = HttpServerResponse.schemaJson(AttestationItem)

/** An attest's item, encoded by its schema, with the status the endpoint declares for it: 201 created, 200 existing. */
const attestReply = (result: Attested) =>
  Effect.orDie(attestItemJson(itemOf(result), { status: result.created ? 201 : 200 }))

/**
 * The answer to a verify of `hashHex`: its attestation's status, and `source` when the
 * caller's key holds a claim on it (that claim's source, null included).
 */
const verifyAnswer = (
  hashHex: HashHex,
  a: AttestationStatus | undefined,
  claim: { readonly source: string | null } | undefined,
  nowMillis: number
): typeof VerifyResponse.Type =>
  a === undefined ? { exists: false, hash_hex: hashHex } : {
    exists: true,
    hash_hex: a.hashHex,
    id: a.id,
    timestamp: a.registeredAt,
    level: a.level,
    verified_at: formatMillis(nowMillis),
    ...(claim ? { source: claim.source } : {})
  }

export const AttestationsLive = HttpApiBuilder.group(Api, "attestations", (handlers) =>
  Effect.gen(function*() {
    const attestor = yield* Attestor
    const quota = yield* Quota
    // each handler's generator function made once (Effect.fnUntraced), not per request: edgeFor, Server/Edge.ts
    return handlers
      // A response of its own: the endpoint declares the same schema for 201 (created) and
      // 200 (existing), and HttpApi picks a success status by schema, not by value.
      .handle("attest", Effect.fnUntraced(function*({ payload }) {
        const key = yield* requireScope("attest")
        const clientEncrypted = payload.client_encrypted ?? false
        yield* checkExtraData(payload.extra_data, clientEncrypted)
        yield* quota.consume(key, 1)
        const [result] = yield* attestor.attest({
          key,
          hashes: [payload.hash_hex],
          source: payload.source ?? null,
          extraData: payload.extra_data ?? null,
          clientEncrypted
        })
        return yield* attestReply(result!)
      }))
      .handle("attestBatch", Effect.fnUntraced(function*({ payload }) {
        const key = yield* requireAnyScope(["attest", "batch"])
        const clientEncrypted = payload.client_encrypted ?? false
        yield* checkExtraData(payload.extra_data, clientEncrypted)
        const hashes = [...new Set(payload.hashes)]
        yield* quota.consume(key, hashes.length)
        const results = yield* attestor.attest({
          key,
          hashes,
          source: payload.source ?? null,
          extraData: payload.extra_data ?? null,
          clientEncrypted
        })
        const created = results.filter((r) => r.created).length
        return ({
          created,
          existing: results.length - created,
          attestations: results.map(itemOf)
        })
      }))
  }))

export const VerificationLive = HttpApiBuilder.group(Api, "verification", (handlers) =>
  Effect.gen(function*() {
    const auth = yield* Authenticator
    const publicLimit = yield* PublicLimit
    const metas = yield* RequestMetas

    const reads = yield* PublicReads
    const statuses = yield* StatusReads

    /** The whole rows of `hashes` and the live claims `keyId` holds on them, by hash, in one read. */
    const lookup = (hashes: ReadonlyArray<string>, keyId: string | undefined) =>
      readWithClaims(reads, hashes, keyId, (repo, part) => repo.findByHashes(part))

    // each handler's generator function made once (Effect.fnUntraced), not per request: edgeFor, Server/Edge.ts
    return handlers
      .handle("verify", Effect.fnUntraced(function*({ payload }) {
        const request = yield* HttpServerRequest.HttpServerRequest
        const key = yield* auth.optionalKey(request.headers.authorization)
        const found = yield* statuses.status(payload.hash_hex, Option.getOrUndefined(key)?.id)
        if (found === undefined) return verifyAnswer(payload.hash_hex, undefined, undefined, 0)
        return verifyAnswer(payload.hash_hex, found.a, found.claim, yield* Clock.currentTimeMillis)
      }))
      .handle("verifyBatch", Effect.fnUntraced(function*({ payload }) {
        const request = yield* HttpServerRequest.HttpServerRequest
        const detailed = payload.detailed === true
        // The public limit counts hashes here: the edge counted the request as one.
        yield* publicLimit.charge(yield* metas.current, payload.hashes.length - 1)
        let key = yield* auth.optionalKey(request.headers.authorization)
        if (detailed) {
          const presented = bearerCredential(request.headers.authorization)
          if (presented === undefined) {
            return yield* new AuthError({ message: "detailed batch verify needs an API key" })
          }
          const principal = yield* auth.authenticate(presented)
          if (principal._tag !== "ApiKey") return yield* new AuthError({ message: "detailed batch verify needs an API key" })
          key = Option.some(principal.key)
        }
        const hashes = [...new Set(payload.hashes)]
        const byHash = yield* lookup(hashes, Option.getOrUndefined(key)?.id)
        const verifiedAt = formatMillis(yield* Clock.currentTimeMillis)
        const showMetadata = Option.match(key, { onNone: () => false, onSome: (k) => hasScope(k, "metadata:read") })
        const results = payload.hashes.map((hash) => {
          const found = byHash.get(hash)
          if (!found) return { exists: false, hash_hex: hash }
          const { a, claim } = found
          return {
            exists: true,
            hash_hex: a.hashHex,
            id: a.id,
            timestamp: a.registeredAt,
            level: a.level,
            verified_at: verifiedAt,
            ...(claim ? { source: claim.source } : {}),
            ...(detailed
              ? {
                certification_level: a.level,
                t0_timestamp: a.registeredAt,
                t1_timestamp: a.t1At,
                t2_timestamp: a.t2At,
                ...(showMetadata
                  ? {
                    claim: claim
                      ? {
                        claim_id: claim.id,
                        source: claim.source,
                        extra_data: claim.extraData ?? null,
                        client_encrypted: claim.clientEncrypted,
                        etag: claim.etag
                      }
                      : null
                  }
                  : {})
              }
              : {})
          }
        })
        return ({
          found: results.filter((r) => r.exists).length,
          count: results.length,
          results
        })
      }))
  }))

export const LookupLive = HttpApiBuilder.group(Api, "lookup", (handlers) =>
  Effect.gen(function*() {
    const withEvidence = <A>(f: (evidence: Evidence, a: Attestation) => Effect.Effect<A>) => (a: Attestation) =>
      Effect.flatMap(Evidence, (evidence) => f(evidence, a))
    return handlers
      .handle("attestation", ({ path }) =>
        findPublicAttestation(path.id, (a) =>
          Effect.succeed({
            id: a.id,
            hash_hex: a.hashHex,
            timestamp: a.registeredAt,
            signature: a.signature,
            format_version: a.formatVersion,
            signing_key_id: a.signingKeyId,
            ...legacyOf(a)
          })))
      .handle("status", ({ path }) =>
        findPublicAttestation(
          path.id,
          withEvidence((evidence, a) =>
            Effect.map(evidence.otsAvailable(a), (ots) => ({
              ...statusOf(a),
              hash_hex: a.hashHex,
              ots_available: ots
            })))
        ))
      .handle("signature", ({ path }) =>
        findPublicAttestation(path.id, (a) =>
          Effect.succeed({
            id: a.id,
            signature: a.signature,
            algorithm: T0_ALGORITHM,
            signing_key_id: a.signingKeyId,
            format_version: a.formatVersion,
            registered_at: a.registeredAt,
            signed_payload: t0Payload(a.hashHex, a.registeredAt, a.formatVersion),
            ...legacyOf(a)
          })))
      .handle("evidence", ({ path }) => findPublicAttestation(path.id, withEvidence((evidence, a) => evidence.bundle(a))))
  }))
