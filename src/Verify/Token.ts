/**
 * Verification of an RFC 3161 time-stamp token (CONTRACT §6: `attestd verify --tsr`
 * and the browser page), portable like Verifier.ts. The token gets the checks every
 * T1 token gets (Platform/Tsa/Rfc3161.ts: CMS signature and messageDigest, ESSCertIDv2,
 * the signer's critical timeStamping EKU and validity at genTime, its chain at genTime
 * to the TSA trust input); its imprint is compared with the data or hash given; and its
 * evidence bundle (the instance that issued it attested the token's SHA-256) has its
 * T0/T1/T2 checked by verifyBundle. The report has a bundle report's shape and verdicts.
 */
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { bytesToHex } from "../Domain/Bytes.js"
import { derToPem, parseTimeStampResponse, parseTimeStampToken, pemToDers, type TokenDetails, verifyTokenOffline } from "../Platform/Tsa/Rfc3161.js"
import { cryptoBackend, digest, type ImprintAlgorithm, sha256 } from "./Crypto.js"
import { shown } from "./Display.js"
import { type CheckStatus, type InputCheck, type Report, type SubCheck, type Verdict, verifyBundle, type VerifyOptions } from "./Verifier.js"

export interface TokenCheck extends SubCheck {
  readonly status: "ok" | "failed" | "unanchored"
  /** The TSA trust input the token's chain was checked against (null: none). */
  readonly trust: string | null
  /** Lowercase hex, as GET /v1/timestamp/{serial} takes it. */
  readonly serial_number: string | null
  readonly gen_time: string | null
  readonly policy: string | null
  readonly hash_algorithm: string | null
  readonly hashed_message: string | null
  readonly accuracy_ms: number | null
  /** Decimal, as in the token. */
  readonly nonce: string | null
  readonly tsa_name: string | null
  /** Subject of the certificate whose key signed the token (null when the signature did not verify). */
  readonly signer: string | null
  /** True only when the signer certificate was chained (at genTime) to the TSA trust input. */
  readonly chain_verified: boolean
}

export interface EvidenceCheck extends SubCheck {
  readonly status: "ok" | "failed"
  /** The attestation id of the evidence bundle. */
  readonly id: string | null
}

export interface TokenReport {
  readonly ok: boolean
  readonly verdict: Verdict
  /** The token's attestation id (from its evidence), null without evidence. */
  readonly id: string | null
  /** SHA-256 of the token (the CMS ContentInfo DER): what its evidence attests. */
  readonly hash_hex: string
  /** The level its evidence claims, null without evidence. */
  readonly level: string | null
  /** The highest tier of the token's evidence that checks (null without evidence, or when the token fails). */
  readonly verified_level: Report["verified_level"]
  readonly checks: {
    /** The imprint against the data or hash given. */
    readonly input?: InputCheck
    readonly token: TokenCheck
    /** The evidence bundle attests this token. */
    readonly evidence?: EvidenceCheck
    readonly t0?: Report["checks"]["t0"]
    readonly t1?: Report["checks"]["t1"]
    readonly t2?: Report["checks"]["t2"]
  }
  readonly notes: ReadonlyArray<string>
  readonly crypto: string
}

export interface TokenVerifyOptions {
  /** The time-stamped data: hashed with the token's imprint algorithm and compared. */
  readonly data?: Uint8Array
  /** Digests of the data already computed (hex), by algorithm (e.g. streamed from a large file). */
  readonly dataDigests?: Readonly<Partial<Record<ImprintAlgorithm, string>>>
  /** The hash the imprint must equal (hex). */
  readonly hash?: string
  /**
   * The TSA's certificates (PEM, e.g. GET /v1/timestamp/certchain or --tsa-ca): its
   * self-signed ones are the trust anchors (all of them when none is); every one may
   * also supply the signer when the token embeds no certificate.
   */
  readonly tsaChainPem?: string | ReadonlyArray<string>
  /** How the report names that input ("TSA chain published by https://host", "--tsa-ca ca.pem"). */
  readonly tsaChainLabel?: string
  /** The token's evidence bundle (GET /v1/timestamp/{serial}/evidence), parsed. */
  readonly evidence?: unknown
  /** Why the evidence could not be had: a failed evidence check. */
  readonly evidenceError?: string
  /** The trust inputs the evidence's tiers are verified with (keys, upstream TSA anchors, headers). */
  readonly evidenceOptions?: VerifyOptions
}

const ALGORITHMS: ReadonlyArray<ImprintAlgorithm> = ["SHA-256", "SHA-384", "SHA-512"]
const asAlgorithm = (name: string | null): ImprintAlgorithm | undefined => ALGORITHMS.find((a) => a === name)

const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * The token in a `.tsr` file: a DER TimeStampResp (what `openssl ts -reply` and a TSA's
 * HTTP reply hold) or a bare TimeStampToken. Throws an Error saying why there is none.
 */
export const tokenOfFile = (bytes: Uint8Array): Uint8Array => {
  const parsed = asn1js.fromBER(bytes)
  if (parsed.offset === -1 || parsed.offset !== bytes.byteLength || !(parsed.result instanceof asn1js.Sequence)) {
    throw new Error("not a DER TimeStampResp or TimeStampToken")
  }
  if (parsed.result.valueBlock.value[0] instanceof asn1js.ObjectIdentifier) return bytes
  let resp: ReturnType<typeof parseTimeStampResponse>
  try {
    resp = parseTimeStampResponse(bytes)
  } catch (e) {
    throw new Error(`not a DER TimeStampResp or TimeStampToken (${errText(e)})`)
  }
  if (resp.token === undefined || resp.status > 1) {
    const why = [resp.failInfo?.join(", "), resp.statusText].filter((s) => s !== undefined && s !== "").join(": ")
    throw new Error(`a TimeStampResp with status ${resp.status}${why === "" ? "" : ` (${why})`} holds no token`)
  }
  return resp.token
}

/** Lowercase hex of a decimal serial number (no leading zeros). */
const serialHex = (decimal: string): string => BigInt(decimal).toString(16)

/** The self-signed certificates of a PEM chain as PEM (all of them when none is self-signed). */
const anchorsOf = (pem: string): string => {
  const ders = pemToDers(pem)
  const roots = ders.filter((der) => {
    try {
      const cert = pkijs.Certificate.fromBER(der)
      return cert.issuer.isEqual(cert.subject)
    } catch {
      return false
    }
  })
  return (roots.length > 0 ? roots : ders).map((der) => derToPem(der)).join("")
}

const accuracyMs = (a: TokenDetails["accuracy"]): number | null => (a === null ? null : a.seconds * 1000 + a.millis + a.micros / 1000)

const checkToken = async (token: Uint8Array, opts: TokenVerifyOptions): Promise<{ check: TokenCheck; details: TokenDetails | null }> => {
  const label = opts.tsaChainLabel ?? "the TSA chain given"
  const base = {
    trust: null,
    serial_number: null,
    gen_time: null,
    policy: null,
    hash_algorithm: null,
    hashed_message: null,
    accuracy_ms: null,
    nonce: null,
    tsa_name: null,
    signer: null,
    chain_verified: false
  } as const
  let details: TokenDetails
  try {
    details = parseTimeStampToken(token)
  } catch (e) {
    return { check: { ...base, status: "failed", detail: errText(e) }, details: null }
  }
  const fields = {
    ...base,
    serial_number: serialHex(details.serial_number),
    gen_time: details.gen_time,
    policy: details.policy,
    hash_algorithm: details.hash_algorithm,
    hashed_message: details.hashed_message,
    accuracy_ms: accuracyMs(details.accuracy),
    nonce: details.nonce,
    tsa_name: details.tsa_name
  }
  const chain = opts.tsaChainPem === undefined ? undefined : typeof opts.tsaChainPem === "string" ? opts.tsaChainPem : opts.tsaChainPem.join("\n")
  if (chain !== undefined && pemToDers(chain).length === 0) {
    return { check: { ...fields, status: "failed", detail: `${label} holds no certificate` }, details }
  }
  try {
    const v = await verifyTokenOffline(token, null, chain === undefined ? undefined : anchorsOf(chain), chain)
    const what = `RFC 3161 token ${fields.serial_number} signed by "${v.signer.subject}" at ${fields.gen_time} (policy ${v.policy}, ${v.hashAlgorithm} imprint)`
    return {
      check: v.chainVerified
        ? { ...fields, signer: v.signer.subject, chain_verified: true, trust: label, status: "ok", detail: `${what}; its certificate chains (at genTime) to ${label}` }
        : {
          ...fields,
          signer: v.signer.subject,
          status: "unanchored",
          detail: `${what}, checked against the token's own certificate only: its chain was not checked (no TSA chain: pass --tsa-ca or --server)`
        },
      details
    }
  } catch (e) {
    return { check: { ...fields, status: "failed", detail: errText(e) }, details }
  }
}

const checkImprint = async (details: TokenDetails | null, opts: TokenVerifyOptions): Promise<InputCheck | undefined> => {
  if (opts.data === undefined && opts.dataDigests === undefined && opts.hash === undefined) return undefined
  const source: "file" | "hash" = opts.hash !== undefined && opts.data === undefined && opts.dataDigests === undefined ? "hash" : "file"
  if (details === null) return { status: "failed", source, hash_hex: null, detail: "the token cannot be read: no imprint to compare" }
  const algorithm = asAlgorithm(details.hash_algorithm)
  if (algorithm === undefined) {
    return { status: "failed", source, hash_hex: null, detail: `the token's imprint algorithm ${details.hash_algorithm} is not SHA-256, SHA-384 or SHA-512` }
  }
  const given: Array<{ source: "file" | "hash"; value: string; what: string }> = []
  if (opts.data !== undefined) given.push({ source: "file", value: bytesToHex(await digest(algorithm, opts.data)), what: `${algorithm} of the file` })
  if (opts.dataDigests !== undefined) {
    const d = opts.dataDigests[algorithm]
    if (d === undefined) return { status: "failed", source: "file", hash_hex: null, detail: `no ${algorithm} of the file was computed` }
    given.push({ source: "file", value: d.toLowerCase(), what: `${algorithm} of the file` })
  }
  if (opts.hash !== undefined) given.push({ source: "hash", value: opts.hash.trim().toLowerCase(), what: "given hash" })
  const hexLength = details.hashed_message.length
  for (const g of given) {
    if (!/^[0-9a-f]*$/.test(g.value) || g.value.length !== hexLength) {
      return { status: "failed", source: g.source, hash_hex: g.value, detail: `the ${g.what} is not ${hexLength} hex characters (the token's ${algorithm} imprint)` }
    }
    if (g.value !== details.hashed_message) {
      return { status: "failed", source: g.source, hash_hex: g.value, detail: `the ${g.what} is ${g.value}, the token time-stamps ${details.hashed_message}` }
    }
  }
  const first = given[0]!
  return { status: "ok", source: first.source, hash_hex: first.value, detail: `the ${first.what} equals the token's imprint` }
}

/** Verifies a time-stamp token (the DER TimeStampToken). Never rejects: every problem is a failed check. */
export const verifyTimestampToken = async (token: Uint8Array, opts: TokenVerifyOptions = {}): Promise<TokenReport> => {
  const notes: Array<string> = []
  const hashHex = bytesToHex(await sha256(token))
  const { check, details } = await checkToken(token, opts)
  const input = await checkImprint(details, opts)

  let evidence: EvidenceCheck | undefined
  let tiers: Partial<Pick<Report["checks"], "t0" | "t1" | "t2">> = {}
  let bundle: Report | undefined
  if (opts.evidenceError !== undefined) evidence = { status: "failed", id: null, detail: opts.evidenceError }
  else if (opts.evidence !== undefined) {
    const { data: _data, dataSha256: _sha, hash: _hash, ...trust } = opts.evidenceOptions ?? {}
    bundle = await verifyBundle(opts.evidence, { ...trust, hash: hashHex })
    const matches = bundle.checks.input?.status === "ok"
    evidence = matches
      ? { status: "ok", id: bundle.id, detail: `evidence bundle ${bundle.id} attests the SHA-256 of this token (${hashHex})` }
      : { status: "failed", id: bundle.id, detail: `the evidence bundle attests ${bundle.hash_hex ?? "(no hash_hex)"}, not the SHA-256 of this token ${hashHex}` }
    const { t0, t1, t2 } = bundle.checks
    tiers = { t0, ...(t1 !== undefined ? { t1 } : {}), ...(t2 !== undefined ? { t2 } : {}) }
    notes.push(...bundle.notes.map((n) => `evidence: ${n}`))
  }

  if (check.status === "unanchored") notes.push("the TSA certificate chain was not checked (no TSA chain): the token is unanchored")
  if (input === undefined && details !== null) notes.push("the imprint was not compared with any data (pass --file or --hash)")

  const statuses: Array<CheckStatus> = [input?.status, check.status, evidence?.status, tiers.t0?.status, tiers.t1?.status, tiers.t2?.status]
    .flatMap((s) => (s === undefined ? [] : [s]))
  const verdict: Verdict = statuses.includes("failed") ? "failed" : statuses.some((s) => s !== "ok") ? "partial" : "verified"
  const tokenHolds = check.status === "ok" && input?.status !== "failed" && evidence?.status === "ok"
  return {
    ok: verdict === "verified",
    verdict,
    id: bundle?.id ?? null,
    hash_hex: hashHex,
    level: bundle?.level ?? null,
    verified_level: tokenHolds && bundle !== undefined ? bundle.verified_level : null,
    checks: {
      ...(input !== undefined ? { input } : {}),
      token: check,
      ...(evidence !== undefined ? { evidence } : {}),
      ...tiers
    },
    notes,
    crypto: cryptoBackend()
  }
}

/** A few lines for stderr and the page's text summary; every field from the token or an input goes through `shown`. */
export const summarizeToken = (r: TokenReport): string => {
  const mark = (s: CheckStatus) => (s === "ok" ? "OK" : s === "failed" ? "FAILED" : s === "unanchored" ? "UNANCHORED" : "NOT PERFORMED")
  const verdict = r.verdict === "verified" ? "VERIFIED" : r.verdict === "failed" ? "FAILED" : "PARTIAL (the math holds, but not everything is anchored in a trust input)"
  const lines = [`attestd verify: ${verdict} time-stamp token ${shown(r.checks.token.serial_number ?? "(unreadable)")} ${r.hash_hex}`]
  const trust = (c: { readonly trust: string | null }) => (c.trust === null ? "" : ` [trust: ${shown(c.trust)}]`)
  if (r.checks.input) lines.push(`  input    ${mark(r.checks.input.status)}: ${shown(r.checks.input.detail)}`)
  lines.push(`  token    ${mark(r.checks.token.status)}: ${shown(r.checks.token.detail)}${trust(r.checks.token)}`)
  if (r.checks.evidence) lines.push(`  evidence ${mark(r.checks.evidence.status)}: ${shown(r.checks.evidence.detail)}`)
  for (const [name, c] of [["T0", r.checks.t0], ["T1", r.checks.t1], ["T2", r.checks.t2]] as const) {
    if (c !== undefined) lines.push(`  ${name}       ${mark(c.status)}: ${shown(c.detail)}${trust(c)}`)
  }
  for (const n of r.notes) lines.push(`  note: ${shown(n)}`)
  return lines.join("\n")
}
