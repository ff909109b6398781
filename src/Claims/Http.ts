/** Handlers of claim metadata. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Clock, Effect } from "effect"
import { Api } from "../Api.js"
import { checkExtraData } from "../Attestations/ExtraData.js"
import { findAttestation } from "../Attestations/Find.js"
import type { Attestation, Claim } from "../Attestations/Domain.js"
import { requireScope } from "../Auth/Http.js"
import { NotFound, PreconditionFailed, ValidationError } from "../Domain/Errors.js"
import { formatMillis } from "../Domain/Time.js"
import { readerKeyId } from "./Access.js"
import { ClaimRepo } from "./Repo.js"

const body = (a: Attestation, c: Claim) => ({
  attestation_id: a.id,
  claim_id: c.id,
  source: c.source,
  extra_data: c.extraData ?? null,
  client_encrypted: c.clientEncrypted,
  etag: c.etag,
  updated_at: c.updatedAt
})

/** The body goes through the endpoint's Metadata schema; the ETag header rides on a pre-response handler. */
const withEtag = (a: Attestation, c: Claim) =>
  Effect.as(
    HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(HttpServerResponse.setHeader(response, "etag", `"${c.etag}"`))),
    body(a, c)
  )

const noClaim = (a: Attestation) => new NotFound({ message: `you hold no claim on attestation ${a.id}` })

/** `"abc"`, `abc`, `W/"abc"`, lists of those, or `*`. */
export const parseIfMatch = (header: string | undefined): ReadonlyArray<string> | undefined =>
  header === undefined
    ? undefined
    : header.split(",").map((v) => v.trim().replace(/^W\//, "").replace(/^"(.*)"$/, "$1")).filter((v) => v.length > 0)

export const ClaimsLive = HttpApiBuilder.group(Api, "claims", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ClaimRepo
    const now = Effect.map(Clock.currentTimeMillis, formatMillis)
    return handlers
      .handle("getMetadata", ({ path }) =>
        Effect.gen(function*() {
          const a = yield* findAttestation(path.id)
          const keyId = yield* readerKeyId(a, "metadata:read")
          const claim = yield* Effect.orDie(repo.liveClaim(keyId, a.seq))
          if (!claim) return yield* noClaim(a)
          return yield* withEtag(a, claim)
        }))
      .handle("patchMetadata", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("metadata:write")
          const a = yield* findAttestation(path.id)
          if (payload.source === undefined && payload.extra_data === undefined && payload.client_encrypted === undefined) {
            return yield* new ValidationError({ message: "nothing to update: send source, extra_data and/or client_encrypted" })
          }
          const current = yield* Effect.orDie(repo.liveClaim(key.id, a.seq))
          if (!current) return yield* noClaim(a)
          const clientEncrypted = payload.client_encrypted ?? current.clientEncrypted
          yield* checkExtraData(payload.extra_data !== undefined ? payload.extra_data : current.extraData, clientEncrypted)
          const ifMatch = parseIfMatch(headers["if-match"])
          const result = yield* Effect.orDie(repo.update(key.id, a.seq, {
            ...(payload.source !== undefined ? { source: payload.source } : {}),
            ...(payload.extra_data !== undefined ? { extraData: payload.extra_data } : {}),
            ...(payload.client_encrypted !== undefined ? { clientEncrypted: payload.client_encrypted } : {})
          }, ifMatch, yield* now))
          switch (result._tag) {
            case "Updated":
              return yield* withEtag(a, result.claim)
            case "NoClaim":
              return yield* noClaim(a)
            case "EtagMismatch":
              return yield* new PreconditionFailed({
                message: "If-Match does not match the claim's current etag",
                details: { etag: result.current }
              })
          }
        }))
      .handle("deleteMetadata", ({ path }) =>
        Effect.gen(function*() {
          const key = yield* requireScope("metadata:write")
          const a = yield* findAttestation(path.id)
          if (!(yield* Effect.orDie(repo.softDelete(key.id, a.seq, yield* now)))) return yield* noClaim(a)
          return { deleted: true as const }
        }))
  }))
