/**
 * The verification core's cases, data-driven and portable (no node:*, no
 * Buffer, no test framework): each case prepares a bundle and options from
 * the fixtures (real bundles, see fixtures.ts) and states the verdict and the
 * status of every tier it expects. `runCase` returns the mismatches (none =
 * pass), so the same cases run in Node (core.test.ts) and in a browser.
 */
import { blockHash, headerBytes, mineHeader, parseHeader } from "../../src/Domain/BitcoinHeader.js"
import { base64ToBytes, bytesToBase64, bytesToHex, hexToBytes } from "../../src/Domain/Bytes.js"
import { jwkThumbprint, normalizeLowS, t0Payload } from "../../src/Domain/T0.js"
import { p256 } from "@noble/curves/nist.js"
import { formatMicros, parseMicros } from "../../src/Domain/Time.js"

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Bundle = any
type Status = "ok" | "failed" | "not_performed" | "unanchored"

export interface Fixtures {
  /** The attested document, hex. */
  readonly dataHex: string
  readonly t0: Bundle
  readonly t1: Bundle
  readonly t2: Bundle
  /** GET /v1/keys of the instance. */
  readonly keys: ReadonlyArray<Record<string, unknown>>
  /** The instance's TSA trust anchor. */
  readonly tsaCaPem: string
  /** The block height of t2. */
  readonly height: string
  /** height → the confirmed 80-byte header (hex). */
  readonly bitcoinHeaders: Record<string, string>
  /** height → header merkle root in OTS byte order. */
  readonly otsHeaders: Record<string, string>
}

/** The report fields the cases look at (the same shape the CLI prints). */
export interface ReportLike {
  readonly ok: boolean
  readonly verdict: string
  readonly verified_level: string | null
  readonly checks: Record<string, { readonly status: string; readonly detail: string; readonly trust?: string | null } | undefined>
}

export type VerifyFn = (bundle: unknown, options: Record<string, unknown>) => Promise<ReportLike>

export interface VerifyCase {
  readonly name: string
  readonly prepare: (fx: Fixtures) => Promise<{ readonly bundle: unknown; readonly options: Record<string, unknown> }>
  readonly verdict: "verified" | "failed" | "partial"
  readonly checks: Partial<Record<"input" | "t0" | "t1" | "t2", Status | "absent">>
  /** Tier → a pattern its detail must match. */
  readonly detail?: Partial<Record<"input" | "t0" | "t1" | "t2", RegExp>>
  /** Tier → a pattern its trust label must match. */
  readonly trust?: Partial<Record<"t0" | "t1" | "t2", RegExp>>
}

// ---------------------------------------------------------------------------
// Helpers (portable)

const clone = (b: Bundle): Bundle => JSON.parse(JSON.stringify(b))

const trusted = (fx: Fixtures): Record<string, unknown> => ({ keys: fx.keys, tsaCaPem: fx.tsaCaPem, bitcoinHeaders: fx.bitcoinHeaders })

const flipHex = (hex: string, i = 0): string => hex.slice(0, i) + (hex[i] === "0" ? "1" : "0") + hex.slice(i + 1)

const flipB64 = (b64: string, i: number): string => {
  const bytes = base64ToBytes(b64)
  const at = i < 0 ? bytes.length + i : i
  bytes[at] = bytes[at]! ^ 0x01
  return bytesToBase64(bytes)
}

const shiftMicros = (wire: string, delta: bigint): string => formatMicros(parseMicros(wire)! + delta)

/** A fake fetch serving Esplora's two endpoints from height → header maps, one per source base URL. */
const esplora = (chains: Record<string, Record<string, string>>) => async (url: string) => {
  const answer = (status: number, text: string) => ({ ok: status === 200, status, text: async () => text })
  for (const [base, chain] of Object.entries(chains)) {
    if (!url.startsWith(base + "/")) continue
    const path = url.slice(base.length)
    const byHeight = /^\/block-height\/(\d+)$/.exec(path)
    if (byHeight) {
      const header = chain[byHeight[1]!]
      if (header === undefined) return answer(404, "Block not found")
      return answer(200, blockHash(headerBytes(header)))
    }
    const byHash = /^\/block\/([0-9a-f]{64})\/header$/.exec(path)
    if (byHash) {
      const header = Object.values(chain).find((h) => blockHash(headerBytes(h)) === byHash[1])
      return header === undefined ? answer(404, "Block not found") : answer(200, header)
    }
  }
  return answer(404, "not found")
}

/** Another valid header for the same height: a different chain's block (same merkle root, other time). */
const otherHeaderFor = (header: string): string => {
  const h = parseHeader(header)
  return bytesToHex(mineHeader({ prevBlockHash: "11".repeat(32), merkleRoot: h.merkleRoot, time: h.time + 1 }))
}

/**
 * A forger's bundle: the genuine hash, registeredAt back-dated to 2001, signed
 * with the forger's own P-256 key (WebCrypto), that key embedded in the bundle.
 */
const forge = async (fx: Fixtures): Promise<Bundle> => {
  const subtle = globalThis.crypto.subtle
  const pair = (await subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"])) as { privateKey: unknown; publicKey: unknown }
  const jwk = (await subtle.exportKey("jwk", pair.publicKey as never)) as { x: string; y: string }
  const registeredAt = "2001-01-01T00:00:00.000000+00:00"
  const payload = new TextEncoder().encode(t0Payload(fx.t0.hash_hex, registeredAt))
  const raw = new Uint8Array(await subtle.sign({ name: "ECDSA", hash: "SHA-256" }, pair.privateKey as never, payload))
  const der = normalizeLowS(p256.Signature.fromBytes(raw, "compact").toBytes("der"))
  const kid = jwkThumbprint(jwk.x, jwk.y)
  const b = clone(fx.t0)
  b.t0 = {
    ...b.t0,
    registeredAt,
    signature: bytesToBase64(der),
    publicKeyId: kid,
    publicKey: { kty: "EC", crv: "P-256", alg: "ES256", use: "sig", kid, x: jwk.x, y: jwk.y }
  }
  return b
}

/** The same signature with s replaced by n − s: valid ECDSA math, but high-S (malleated). */
const highS = (signatureB64: string): string => {
  const sig = p256.Signature.fromBytes(base64ToBytes(signatureB64), "der")
  return bytesToBase64(new p256.Signature(sig.r, p256.Point.Fn.ORDER - sig.s).toBytes("der"))
}

/**
 * The published keys with the signing key's window set around the T0 bundle's registeredAt:
 * activated `from` µs and retired `to` µs from it (negative: before it).
 */
const withWindow = (fx: Fixtures, from: bigint, to: bigint): Array<Record<string, unknown>> =>
  fx.keys.map((k) =>
    k.kid === fx.t0.t0.publicKeyId
      ? { ...k, attestd_activated_at: shiftMicros(fx.t0.t0.registeredAt, from), attestd_retired_at: shiftMicros(fx.t0.t0.registeredAt, to) }
      : k
  )

// ---------------------------------------------------------------------------
// The cases

const ALL_OK = { t0: "ok", t1: "ok", t2: "ok" } as const

export const cases: ReadonlyArray<VerifyCase> = [
  {
    name: "genuine T0 bundle against the published keys: verified",
    prepare: async (fx) => ({ bundle: fx.t0, options: { keys: fx.keys, trustLabels: { keys: "keys published by the test server" } } }),
    verdict: "verified",
    checks: { t0: "ok", t1: "absent", t2: "absent" },
    trust: { t0: /published by the test server/ }
  },
  {
    name: "genuine T1 bundle with keys and TSA anchors: verified, chain checked at genTime",
    prepare: async (fx) => ({ bundle: fx.t1, options: trusted(fx) }),
    verdict: "verified",
    checks: { t0: "ok", t1: "ok", t2: "absent" },
    detail: { t1: /chains \(at genTime\)/ }
  },
  {
    name: "genuine T2 bundle with every trust input and the document: verified",
    prepare: async (fx) => {
      // the document as a view into a larger buffer (as a Node Buffer or a sliced Blob read may be)
      const doc = hexToBytes(fx.dataHex)
      const pool = new Uint8Array(doc.length + 64).fill(0xaa)
      pool.set(doc, 17)
      return { bundle: fx.t2, options: { ...trusted(fx), data: pool.subarray(17, 17 + doc.length) } }
    },
    verdict: "verified",
    checks: { input: "ok", ...ALL_OK },
    detail: { t2: /anchored in Bitcoin block/ }
  },
  {
    name: "genuine T2 bundle anchored by --ots-headers (merkle roots): verified",
    prepare: async (fx) => ({ bundle: fx.t2, options: { keys: fx.keys, tsaCaPem: fx.tsaCaPem, otsHeaders: fx.otsHeaders } }),
    verdict: "verified",
    checks: ALL_OK
  },
  {
    name: "genuine T2 bundle without trust inputs: partial, every tier unanchored, the header self-consistent",
    prepare: async (fx) => ({ bundle: fx.t2, options: {} }),
    verdict: "partial",
    checks: { t0: "unanchored", t1: "unanchored", t2: "unanchored" },
    detail: { t0: /embedded in the bundle/, t2: /not confirmed/ }
  },
  {
    name: "genuine T2 bundle with keys only: T0 ok, T1 and T2 unanchored, partial",
    prepare: async (fx) => ({ bundle: fx.t2, options: { keys: fx.keys } }),
    verdict: "partial",
    checks: { t0: "ok", t1: "unanchored", t2: "unanchored" }
  },
  {
    name: "forged bundle (own embedded key, registeredAt back-dated to 2001) without trust inputs: never verified",
    prepare: async (fx) => ({ bundle: await forge(fx), options: {} }),
    verdict: "partial",
    checks: { t0: "unanchored" },
    detail: { t0: /anyone can make/ }
  },
  {
    name: "forged bundle against the published keys: failed",
    prepare: async (fx) => ({ bundle: await forge(fx), options: { keys: fx.keys } }),
    verdict: "failed",
    checks: { t0: "failed" },
    detail: { t0: /not among/ }
  },
  {
    name: "forged bundle claiming the service's kid with its own embedded key: failed",
    prepare: async (fx) => {
      const b = await forge(fx)
      b.t0.publicKeyId = fx.t0.t0.publicKeyId
      b.t0.publicKey.kid = fx.t0.t0.publicKeyId
      return { bundle: b, options: { keys: fx.keys } }
    },
    verdict: "failed",
    checks: { t0: "failed" },
    detail: { t0: /not the trusted key/ }
  },
  {
    name: "high-S signature (the genuine one malleated): rejected",
    prepare: async (fx) => {
      const b = clone(fx.t0)
      b.t0.signature = highS(b.t0.signature)
      return { bundle: b, options: { keys: fx.keys } }
    },
    verdict: "failed",
    checks: { t0: "failed" },
    detail: { t0: /low-S/ }
  },
  {
    name: "the published key's window (activated, retired) contains registeredAt: verified",
    prepare: async (fx) => ({ bundle: fx.t0, options: { keys: withWindow(fx, -1_000_000n, 1_000_000n) } }),
    verdict: "verified",
    checks: { t0: "ok", t1: "absent", t2: "absent" }
  },
  {
    name: "key retired before registeredAt (published window): T0 fails, the signature itself is genuine",
    prepare: async (fx) => ({ bundle: fx.t2, options: { ...trusted(fx), keys: withWindow(fx, -2_000_000n, -1n) } }),
    verdict: "failed",
    checks: { t0: "failed", t1: "ok", t2: "ok" },
    detail: { t0: /after key .* was retired .*outside the key's validity window/ }
  },
  {
    name: "key activated after registeredAt (window in the bundle's own key, no trusted keys): T0 fails",
    prepare: async (fx) => {
      const b = clone(fx.t0)
      b.t0.publicKey = { ...b.t0.publicKey, attestd_activated_at: shiftMicros(b.t0.registeredAt, 1n) }
      return { bundle: b, options: {} }
    },
    verdict: "failed",
    checks: { t0: "failed", t1: "absent", t2: "absent" },
    detail: { t0: /before key .* was activated/ }
  },
  {
    name: "a trusted window outranks the bundle's: the bundle omits the retirement, the published keys state it",
    prepare: async (fx) => {
      const b = clone(fx.t0)
      b.t0.publicKey = { ...b.t0.publicKey, attestd_activated_at: shiftMicros(b.t0.registeredAt, -1n) }
      return { bundle: b, options: { keys: withWindow(fx, -10n, -5n) } }
    },
    verdict: "failed",
    checks: { t0: "failed", t1: "absent", t2: "absent" },
    detail: { t0: /was retired/ }
  },
  {
    name: "tamper: registeredAt + 1 µs fails T0 only",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t0.registeredAt = shiftMicros(b.t0.registeredAt, 1n)
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "failed",
    checks: { t0: "failed", t1: "ok", t2: "ok" },
    detail: { t0: /does not verify/ }
  },
  {
    name: "tamper: a Merkle sibling of the batch proof fails T1 only",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t1.merkleProof[0].hash = flipHex(b.t1.merkleProof[0].hash, 10)
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "failed",
    checks: { t0: "ok", t1: "failed", t2: "ok" },
    detail: { t1: /leads from hash_hex/ }
  },
  {
    name: "tamper: a byte of the RFC 3161 token fails T1 only",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t1.tsaToken = flipB64(b.t1.tsaToken, -40)
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "failed",
    checks: { t0: "ok", t1: "failed", t2: "ok" }
  },
  {
    name: "tamper: an OTS operation argument fails T2 only",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      // 31 magic + version + file hash op + 32-byte digest, then the first op: tag, length, argument
      b.t2.otsProof = flipB64(b.t2.otsProof, 33 + 32 + 2 + 4)
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "failed",
    checks: { t0: "ok", t1: "ok", t2: "failed" }
  },
  {
    name: "tamper: a byte of the block header (version) fails T2 only: not the confirmed block",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.bitcoinBlockHeader = flipHex(b.t2.bitcoinBlockHeader, 1)
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "failed",
    checks: { t0: "ok", t1: "ok", t2: "failed" }
  },
  {
    name: "tamper: a byte of the header's merkle root fails T2 even without trust inputs",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.bitcoinBlockHeader = flipHex(b.t2.bitcoinBlockHeader, 80)
      return { bundle: b, options: {} }
    },
    verdict: "failed",
    checks: { t0: "unanchored", t1: "unanchored", t2: "failed" },
    detail: { t2: /merkle root field/ }
  },
  {
    name: "a header whose hash does not meet its nBits target fails T2",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      const bytes = headerBytes(b.t2.bitcoinBlockHeader)
      new DataView(bytes.buffer, bytes.byteOffset).setUint32(72, 0x03000001, true)
      b.t2.bitcoinBlockHeader = bytesToHex(bytes)
      return { bundle: b, options: {} }
    },
    verdict: "failed",
    checks: { t2: "failed" },
    detail: { t2: /proof-of-work/ }
  },
  {
    name: "tamper: a wrong document digest fails the input check only",
    prepare: async (fx) => ({ bundle: fx.t2, options: { ...trusted(fx), hash: flipHex(fx.t2.hash_hex, 3) } }),
    verdict: "failed",
    checks: { input: "failed", ...ALL_OK }
  },
  {
    name: "the confirmed header at that height is another block: T2 fails",
    prepare: async (fx) => ({
      bundle: fx.t2,
      options: { ...trusted(fx), bitcoinHeaders: { [fx.height]: otherHeaderFor(fx.bitcoinHeaders[fx.height]!) } }
    }),
    verdict: "failed",
    checks: { t0: "ok", t1: "ok", t2: "failed" }
  },
  {
    name: "two Esplora sources that agree confirm the header: verified",
    prepare: async (fx) => ({
      bundle: fx.t2,
      options: {
        keys: fx.keys,
        tsaCaPem: fx.tsaCaPem,
        bitcoinSources: ["https://a.example/api", "https://b.example/api"],
        fetch: esplora({ "https://a.example/api": fx.bitcoinHeaders, "https://b.example/api": fx.bitcoinHeaders })
      }
    }),
    verdict: "verified",
    checks: ALL_OK,
    trust: { t2: /a\.example.*b\.example.*agree/ }
  },
  {
    name: "two Esplora sources that disagree: T2 fails",
    prepare: async (fx) => ({
      bundle: fx.t2,
      options: {
        keys: fx.keys,
        tsaCaPem: fx.tsaCaPem,
        bitcoinSources: ["https://a.example/api", "https://b.example/api"],
        fetch: esplora({
          "https://a.example/api": fx.bitcoinHeaders,
          "https://b.example/api": { [fx.height]: otherHeaderFor(fx.bitcoinHeaders[fx.height]!) }
        })
      }
    }),
    verdict: "failed",
    checks: { t0: "ok", t1: "ok", t2: "failed" },
    detail: { t2: /disagree/ }
  },
  {
    name: "an unreachable Esplora source leaves T2 unanchored",
    prepare: async (fx) => ({
      bundle: fx.t2,
      options: { keys: fx.keys, tsaCaPem: fx.tsaCaPem, bitcoinSources: ["https://down.example"], fetch: esplora({}) }
    }),
    verdict: "partial",
    checks: { t0: "ok", t1: "ok", t2: "unanchored" }
  },
  {
    name: "a simulated-chain bundle is anchored by the simulated headers only, and labelled so",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.simulated = true
      return { bundle: b, options: { keys: fx.keys, tsaCaPem: fx.tsaCaPem, simulatedHeaders: fx.bitcoinHeaders } }
    },
    verdict: "verified",
    checks: ALL_OK,
    trust: { t2: /SIMULATED/ }
  },
  {
    name: "a simulated-chain bundle is not confirmed by real Bitcoin headers",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.simulated = true
      return { bundle: b, options: trusted(fx) }
    },
    verdict: "partial",
    checks: { t0: "ok", t1: "ok", t2: "unanchored" }
  },
  {
    name: "a simulated-chain bundle is confirmed by simulated-chain sources given explicitly, when they agree",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.simulated = true
      const chains = { "https://demo-a.example/v1/simulated-chain": fx.bitcoinHeaders, "https://demo-b.example/v1/simulated-chain": fx.bitcoinHeaders }
      return { bundle: b, options: { keys: fx.keys, tsaCaPem: fx.tsaCaPem, simulatedSources: Object.keys(chains), fetch: esplora(chains) } }
    },
    verdict: "verified",
    checks: ALL_OK,
    trust: { t2: /demo-a\.example.*demo-b\.example.*agree.*SIMULATED/ }
  },
  {
    name: "simulated-chain sources that disagree: T2 fails",
    prepare: async (fx) => {
      const b = clone(fx.t2)
      b.t2.simulated = true
      const chains = {
        "https://demo-a.example/v1/simulated-chain": fx.bitcoinHeaders,
        "https://demo-b.example/v1/simulated-chain": { [fx.height]: otherHeaderFor(fx.bitcoinHeaders[fx.height]!) }
      }
      return { bundle: b, options: { keys: fx.keys, tsaCaPem: fx.tsaCaPem, simulatedSources: Object.keys(chains), fetch: esplora(chains) } }
    },
    verdict: "failed",
    checks: { t0: "ok", t1: "ok", t2: "failed" },
    detail: { t2: /simulated chain sources disagree/ }
  },
  {
    name: "simulated-chain sources never confirm a real Bitcoin bundle",
    prepare: async (fx) => ({
      bundle: fx.t2,
      options: {
        keys: fx.keys,
        tsaCaPem: fx.tsaCaPem,
        simulatedSources: ["https://demo-a.example/v1/simulated-chain"],
        fetch: esplora({ "https://demo-a.example/v1/simulated-chain": fx.bitcoinHeaders })
      }
    }),
    verdict: "partial",
    checks: { t0: "ok", t1: "ok", t2: "unanchored" }
  },
  {
    name: "the genuine token against another TSA's anchors: T1 fails",
    prepare: async (fx) => ({ bundle: fx.t1, options: { keys: fx.keys, tsaCaPem: OTHER_ROOT_PEM } }),
    verdict: "failed",
    checks: { t0: "ok", t1: "failed" }
  }
]

/** Checks one case; returns the mismatches (empty: the case passes). */
export const runCase = async (verify: VerifyFn, fx: Fixtures, c: VerifyCase): Promise<Array<string>> => {
  const { bundle, options } = await c.prepare(fx)
  const r = await verify(bundle, options)
  const out: Array<string> = []
  if (r.verdict !== c.verdict) out.push(`verdict ${r.verdict}, expected ${c.verdict}`)
  if (r.ok !== (c.verdict === "verified")) out.push(`ok ${r.ok} with verdict ${c.verdict}`)
  for (const [tier, want] of Object.entries(c.checks)) {
    const got = r.checks[tier]?.status ?? "absent"
    if (got !== want) out.push(`${tier}: ${got}, expected ${want} (${r.checks[tier]?.detail ?? ""})`)
  }
  for (const [tier, re] of Object.entries(c.detail ?? {})) {
    const d = r.checks[tier]?.detail ?? ""
    if (!re.test(d)) out.push(`${tier} detail ${JSON.stringify(d)} does not match ${re}`)
  }
  for (const [tier, re] of Object.entries(c.trust ?? {})) {
    const t = r.checks[tier]?.trust ?? ""
    if (!re.test(t)) out.push(`${tier} trust ${JSON.stringify(t)} does not match ${re}`)
  }
  return out
}

/** A self-signed root of an unrelated CA (not the instance's TSA anchor). */
export const OTHER_ROOT_PEM = `-----BEGIN CERTIFICATE-----
MIIBkzCCATmgAwIBAgIUalQOlQR2QOlTtLLxCHDbF0vdAtYwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTVW5yZWxhdGVkIFRlc3QgUm9vdDAgFw0yNjExMjIxOTM0MjBa
GA8yMTI2MTAyOTE5MzQyMFowHjEcMBoGA1UEAwwTVW5yZWxhdGVkIFRlc3QgUm9v
dDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFMK4O1wJGz75G7+9as2gNVj1xy2
O4KR0ePMVLXWOUlxad3mhyZO7Cvlu83pulxZ1ail+wzt8ut5D6DDPWsjBYejUzBR
MB0GA1UdDgQWBBTWcltvCaIEtWBJc4m+O7Q1embGaDAfBgNVHSMEGDAWgBTWcltv
CaIEtWBJc4m+O7Q1embGaDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gA
MEUCIQCxTO9DCqAi6u6Jc2r/EQ94SLXyL3lw1NHGLbljSaONrQIgNci/UXIbfduw
N0L5iAVaOPZ4LSUXySSs35RHMghi74g=
-----END CERTIFICATE-----
`
