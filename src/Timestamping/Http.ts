/** Handlers of the RFC 3161 time-stamping authority: issue, certificate chain, lookup and evidence by serial. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { Evidence } from "../Attestations/Evidence.js"
import { findAttestation } from "../Attestations/Find.js"
import { Authenticator, presentedCredential } from "../Auth/Authenticator.js"
import { keyWithScope } from "../Auth/Http.js"
import { Quota } from "../Auth/Quota.js"
import { RequestMetas } from "../Auth/RequestMeta.js"
import { bytesToBase64 } from "../Domain/Bytes.js"
import { excerpt, NotFound } from "../Domain/Errors.js"
import { AppConfig } from "../Platform/Config.js"
import { keyedTimestamping } from "./Api.js"
import { fieldsOfJson, TimestampAuthority } from "./Authority.js"
import { TimestampRepo } from "./Repo.js"

const SERIAL = /^[0-9a-f]{1,64}$/

export const TimestampingLive = HttpApiBuilder.group(Api, "timestamping", (handlers) =>
  Effect.gen(function*() {
    const authority = yield* TimestampAuthority
    const repo = yield* TimestampRepo
    const evidence = yield* Evidence
    const auth = yield* Authenticator
    const quota = yield* Quota
    const metas = yield* RequestMetas
    const keyed = keyedTimestamping(yield* AppConfig)

    /** The calling key under `key` access (the edge authenticated it before the body), counted against its quota; null when public. */
    const caller = Effect.gen(function*() {
      if (!keyed) return null
      const meta = yield* metas.current
      const authorization = (yield* HttpServerRequest.HttpServerRequest).headers.authorization
      const principal = meta.principal ?? (yield* auth.authenticate(presentedCredential(authorization, true) ?? ""))
      const key = yield* keyWithScope(principal, "timestamp")
      yield* quota.consume(key, 1)
      return key
    })

    /** A stored token by the serial of a path (hex, any case, leading zeros or not), or 404. */
    const stored = (raw: string) =>
      Effect.gen(function*() {
        const serial = raw.trim().toLowerCase().replace(/^0+(?=.)/, "")
        const found = SERIAL.test(serial) ? yield* repo.bySerial(serial) : undefined
        if (found === undefined) return yield* new NotFound({ message: `no time-stamp token with serial ${excerpt(raw.trim(), 80)}` })
        return found
      })

    return handlers
      .handle("timestamp", ({ payload }) =>
        Effect.flatMap(caller, (key) => authority.respond(payload instanceof Uint8Array ? payload : fieldsOfJson(payload), key)))
      .handle("certificateChain", () => authority.certificateChain)
      .handle("lookup", ({ path }) =>
        Effect.map(stored(path.serial), (t) => ({
          serial_number: t.serial,
          gen_time: t.genTime,
          policy: t.policy,
          hash_algorithm: t.hashAlgorithm as "sha256" | "sha384" | "sha512",
          hashed_message: t.hashedMessage,
          token: bytesToBase64(t.token),
          token_sha256: t.tokenSha256,
          token_attestation_id: t.tokenAttestationId,
          imprint_attestation_id: t.imprintAttestationId
        })))
      .handle("evidence", ({ path }) =>
        Effect.flatMap(stored(path.serial), (t) => Effect.flatMap(findAttestation(t.tokenAttestationId), evidence.bundle)))
  }))
