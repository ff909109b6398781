/** What the Attestor's path tests (attestorPaths*.test.ts) check the same way on each path and store. */
import { type Effect } from "effect"
import { expect } from "vitest"
import type { Attested } from "../../src/Attestations/Attestor.js"
import { AttestationRepo } from "../../src/Attestations/Repo.js"
import { Signer } from "../../src/Platform/Signer.js"
import { jwkToKeyObject, verifyT0 } from "../../src/Platform/T0Node.js"

/** A statement's first three words. */
export const firstWords = (texts: ReadonlyArray<string>) => texts.map((t) => t.trim().split(/\s+/).slice(0, 3).join(" "))

interface Runs {
  readonly runPromise: <A, E>(effect: Effect.Effect<A, E, AttestationRepo | Signer>) => Promise<A>
}

/** The group's answers are what the store holds (attestations and `keyId`'s claims), each signature verifying. */
export const expectAnsweredAsStored = async (rt: Runs, keyId: string, hashes: ReadonlyArray<string>, results: ReadonlyArray<Attested>) => {
  const repo = await rt.runPromise(AttestationRepo)
  const stored = await rt.runPromise(repo.findByHashes(hashes))
  expect(new Map(stored.map((a) => [a.hashHex, a]))).toEqual(new Map(results.map((r) => [r.attestation.hashHex, r.attestation])))
  const claims = await rt.runPromise(repo.liveClaims(keyId, results.map((r) => r.attestation.seq)))
  expect(new Map(claims.map((c) => [c.attestationSeq, c]))).toEqual(new Map(results.map((r) => [r.attestation.seq, r.claim])))
  const signer = await rt.runPromise(Signer)
  for (const { attestation } of results) {
    const jwk = signer.localKeys.find((k) => k.kid === attestation.signingKeyId)!.jwk
    expect(verifyT0(attestation, jwkToKeyObject(jwk))).toBe(true)
  }
}

/**
 * Attesting `hashes` again, which the key holds: answered from the two reads (noted in `ran`),
 * nothing written, no span, the same attestations and claims.
 */
export const expectAgainFromReads = async (options: {
  readonly again: () => Promise<ReadonlyArray<Attested>>
  readonly results: ReadonlyArray<Attested>
  readonly ran: Array<string>
  readonly spans: Array<string>
}) => {
  const { ran, results, spans } = options
  ran.length = 0
  spans.length = 0
  const again = await options.again()
  expect(again.map((r) => [r.created, r.attestation, r.claim])).toEqual(results.map((r) => [false, r.attestation, r.claim]))
  expect(firstWords(ran)).toEqual(["SELECT * FROM", "SELECT * FROM"])
  expect(spans).toEqual([])
}
