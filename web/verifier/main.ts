/**
 * The browser verification page (issue 10 §3): the portable core of src/Verify
 * behind a small UI. Everything runs here; nothing is uploaded. The only
 * requests the page makes: same-origin `?id=` evidence and `?brand=` lookups,
 * the instance's TSA chain (GET /v1/timestamp/certchain) for a dropped time-stamp
 * token, and, when the user presses "Check the chain", the Esplora sources they named.
 */
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex } from "@noble/hashes/utils.js"
import { shown } from "../../src/Verify/Display.js"
import { summarize, verifyBundle } from "../../src/Verify/Verifier.js"
import { parseTimeStampToken } from "../../src/Platform/Tsa/Rfc3161.js"
import { summarizeToken, tokenOfFile, type TokenReport, type TokenVerifyOptions, verifyTimestampToken } from "../../src/Verify/Token.js"

declare const __HASH_WORKER_SOURCE__: string

/** What the serving instance embedded at serve time (absent in an unserved build). */
interface EmbeddedTrust {
  readonly origin: string
  readonly mode?: string
  readonly keys?: ReadonlyArray<Record<string, unknown>>
  readonly tsaCaPem?: ReadonlyArray<string>
  readonly simulatedHeaders?: Readonly<Record<string, string>> | null
  readonly trustLabels?: Readonly<Record<string, string>>
}

/** Options of `window.attestdVerifier.verify`: the core's, with `data` also accepted as a Blob. */
export type PageVerifyOptions = Record<string, unknown> & { readonly data?: Uint8Array | Blob }

type AnyReport = Record<string, any>

const TIERS = ["T0", "T1", "T2"] as const

// ---------------------------------------------------------------------------
// Crypto availability

/** WebCrypto exists only in secure contexts (https, localhost, file://). The core falls back to noble. */
export const webCryptoAvailable = (): boolean =>
  typeof globalThis.crypto !== "undefined" && typeof globalThis.crypto.subtle !== "undefined"

// ---------------------------------------------------------------------------
// Hashing a document in a Worker (streamed), with an in-page fallback

let workerUrl: string | null = null

const hashInPage = async (blob: Blob): Promise<string> => {
  const h = sha256.create()
  const reader = blob.stream().getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    h.update(r.value)
  }
  return bytesToHex(h.digest())
}

export const hashBlob = (blob: Blob, onProgress: (fraction: number) => void = () => {}): Promise<string> => {
  let worker: Worker
  try {
    workerUrl ??= URL.createObjectURL(new Blob([__HASH_WORKER_SOURCE__], { type: "text/javascript" }))
    worker = new Worker(workerUrl)
  } catch {
    return hashInPage(blob)
  }
  return new Promise((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<{ progress?: number; digest?: string; error?: string }>) => {
      if (e.data.progress !== undefined) onProgress(e.data.progress)
      else {
        worker.terminate()
        if (e.data.digest !== undefined) resolve(e.data.digest)
        else reject(new Error(e.data.error ?? "hashing failed"))
      }
    }
    worker.onerror = (e) => {
      worker.terminate()
      e.preventDefault()
      hashInPage(blob).then(resolve, reject)
    }
    worker.postMessage({ blob })
  })
}

// ---------------------------------------------------------------------------
// The automation hook: the same report as the CLI for the same inputs

export const verify = async (bundle: unknown, options: PageVerifyOptions = {}): Promise<AnyReport> => {
  const { data, ...rest } = options
  const core: Record<string, unknown> = { ...rest }
  if (typeof Blob !== "undefined" && data instanceof Blob) core.dataSha256 = await hashBlob(data)
  else if (data !== undefined) core.data = data
  return (await verifyBundle(bundle, core as Parameters<typeof verifyBundle>[1])) as unknown as AnyReport
}

/** A time-stamp reply or token (DER), checked as `attestd verify --tsr` checks it. */
export const verifyToken = async (tsr: Uint8Array, options: TokenVerifyOptions = {}): Promise<AnyReport> =>
  (await verifyTimestampToken(tokenOfFile(tsr), options)) as unknown as AnyReport

// ---------------------------------------------------------------------------
// Report reading (tolerant of the report's additive fields)

export const verdictOf = (r: AnyReport): "verified" | "failed" | "partial" =>
  r.verdict === "verified" || r.verdict === "failed" || r.verdict === "partial" ? r.verdict : r.ok ? "verified" : "failed"

const statusOf = (r: AnyReport, tier: string): string => {
  const c = r.checks?.[tier.toLowerCase()]
  return typeof c?.status === "string" ? c.status : "not_performed"
}

/** The block time field of an 80-byte header (hex), as ISO 8601; null when absent or malformed. */
export const headerTime = (headerHex: unknown): string | null => {
  if (typeof headerHex !== "string" || !/^[0-9a-fA-F]{160}$/.test(headerHex)) return null
  let t = 0
  for (let i = 3; i >= 0; i--) t = t * 256 + parseInt(headerHex.slice(136 + 2 * i, 138 + 2 * i), 16)
  return new Date(t * 1000).toISOString()
}

const TRUSTS: Record<string, string> = {
  T0: "the service's signing key (ECDSA P-256)",
  T1: "the time-stamping authority (RFC 3161) and its certificate chain",
  T2: "Bitcoin: the block header's proof of work and, when checked, its place in the chain",
  T2sim: "a SIMULATED chain (demo mode, not Bitcoin): its block header and its place in that chain"
}

// ---------------------------------------------------------------------------
// The page

const $ = <T extends Element>(sel: string): T => {
  const el = document.querySelector<T>(sel)
  if (el === null) throw new Error(`missing ${sel}`)
  return el
}

const el = (tag: string, attrs: Record<string, string> = {}, ...children: Array<Node | string>): HTMLElement => {
  const e = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v)
  for (const c of children) e.append(c)
  return e
}

const readEmbedded = (): EmbeddedTrust | null => {
  const node = document.getElementById("attestd-trust")
  const text = node?.textContent?.trim() ?? ""
  if (text === "" || text.startsWith("{{")) return null
  try {
    const v = JSON.parse(text) as EmbeddedTrust
    return typeof v === "object" && v !== null && typeof v.origin === "string" ? v : null
  } catch {
    return null
  }
}

const state = {
  embedded: null as EmbeddedTrust | null,
  documentDigest: null as string | null,
  userKeys: null as Array<Record<string, unknown>> | null,
  userTsaPem: null as string | null,
  report: null as AnyReport | null,
  bundle: null as unknown,
  /** A time-stamp token to verify instead of a bundle. */
  tsr: null as { readonly name: string; readonly bytes: Uint8Array } | null,
  documentFile: null as File | null
}

const setMessage = (text: string, kind: "info" | "error" = "info") => {
  const m = $<HTMLElement>("#message")
  m.textContent = text
  m.dataset.kind = kind
}

const parseEvidence = (): unknown => {
  const text = $<HTMLTextAreaElement>("textarea[name=evidence]").value.trim()
  if (text === "") throw new Error("Give the evidence bundle: drop its JSON file or paste it.")
  try {
    return JSON.parse(text)
  } catch (e) {
    throw new Error(`The evidence is not JSON: ${e instanceof Error ? e.message : String(e)}`)
  }
}

/** The trust inputs the page uses: what the user loaded, else what the serving instance published. */
const trustOptions = (): Record<string, unknown> => {
  const o: Record<string, unknown> = {}
  const e = state.embedded
  const keys = state.userKeys ?? e?.keys
  if (keys !== undefined && keys.length > 0) o.keys = keys
  const pem = state.userTsaPem ?? (e?.tsaCaPem && e.tsaCaPem.length > 0 ? e.tsaCaPem.join("\n") : undefined)
  if (pem !== undefined) o.tsaCaPem = pem
  if (e?.simulatedHeaders) o.simulatedHeaders = e.simulatedHeaders
  const labels: Record<string, string> = { ...(e?.trustLabels ?? {}) }
  if (state.userKeys) labels.keys = "keys you loaded"
  if (state.userTsaPem) labels.tsa = "TSA anchors you loaded"
  if (Object.keys(labels).length > 0) o.trustLabels = labels
  return o
}

const trustLabel = (tier: string): string => {
  const e = state.embedded
  const by = e ? `published by ${e.origin}` : null
  if (tier === "T0") return state.userKeys ? "keys you loaded" : e?.keys?.length ? `keys ${by}` : "no trusted keys given"
  if (tier === "T1") return state.userTsaPem ? "TSA anchors you loaded" : e?.tsaCaPem?.length ? `TSA anchors ${by}` : "no TSA anchors given"
  return e?.simulatedHeaders ? `simulated chain ${by}` : "block headers checked against the sources you ask"
}

const timeOf = (tier: string, r: AnyReport, bundle: any): string | null => {
  if (tier === "T0") return r.checks?.t0?.registered_at ?? bundle?.t0?.registeredAt ?? null
  if (tier === "T1") return r.checks?.t1?.tsa?.gen_time ?? bundle?.t1?.tsaTimestamp ?? null
  const t = headerTime(bundle?.t2?.bitcoinBlockHeader)
  return t === null ? null : `${t} (block time; Bitcoin allows about two hours of drift)`
}

const STATUS_TEXT: Record<string, string> = {
  ok: "verified",
  failed: "failed",
  not_performed: "not present / not checked",
  unanchored: "math holds, but not anchored in anything trusted"
}

/** The rows a token's report has before its evidence's tiers: the data, the token, the evidence. */
const tokenRows = (r: AnyReport): Array<HTMLElement> => {
  const row = (name: string, label: string, check: AnyReport | undefined, trusts: string, when: string | null) =>
    check === undefined ? [] : [el("li", { "data-tier": name, "data-status": String(check.status), class: `tier ${String(check.status)}` },
      el("div", { class: "tier-head" }, el("strong", {}, label), el("span", { class: "badge" }, STATUS_TEXT[check.status] ?? String(check.status))),
      el("div", { class: "trusts" }, trusts),
      ...(when !== null ? [el("div", { class: "when" }, when)] : []),
      el("div", { class: "detail" }, shown(String(check.detail ?? ""))))]
  const token = r.checks?.token
  const genTime = typeof token?.gen_time === "string" && (token.status === "ok" || token.status === "unanchored") ? token.gen_time : null
  return [
    ...row("token", `Time-stamp token ${shown(String(token?.serial_number ?? ""))}`, token,
      `Trusts: the time-stamping authority (RFC 3161) and its certificate chain — ${shown(typeof token?.trust === "string" ? token.trust : "no TSA chain given")}`,
      genTime === null ? null : `Time-stamped at ${shown(genTime)} (its imprint existed no later than then)`),
    ...row("input", "The data", r.checks?.input, "Compared with the token's imprint", null),
    ...row("evidence", "The token's evidence", r.checks?.evidence, "The instance registered this token: its SHA-256 is attested, sealed and anchored like any hash", null)
  ]
}

const render = (r: AnyReport, bundle: unknown) => {
  const v = verdictOf(r)
  const isToken = r.checks?.token !== undefined
  const out = $<HTMLElement>("#result")
  out.hidden = false
  const verdict = $<HTMLElement>("#verdict")
  verdict.dataset.verdict = v
  verdict.textContent = v === "verified"
    ? isToken
      ? `Verified: time-stamp token ${r.checks.token.serial_number}${r.verified_level ? `, its evidence up to ${r.verified_level}` : ""}`
      : `Verified up to ${r.verified_level ?? "—"}`
    : v === "partial"
    ? "Partial: some math holds against nothing this page trusts"
    : "Verification failed"
  const tiers = $<HTMLElement>("#tiers")
  tiers.replaceChildren(...(isToken ? tokenRows(r) : []))
  for (const tier of TIERS) {
    if (isToken && r.checks?.[tier.toLowerCase()] === undefined) continue
    const status = statusOf(r, tier)
    const check = r.checks?.[tier.toLowerCase()]
    const when = status === "ok" || status === "unanchored" ? timeOf(tier, r, bundle) : null
    const row = el("li", { "data-tier": tier, "data-status": status, class: `tier ${status}` },
      el("div", { class: "tier-head" }, el("strong", {}, tier), el("span", { class: "badge" }, STATUS_TEXT[status] ?? status)),
      el("div", { class: "trusts" }, `Trusts: ${tier === "T2" && check?.simulated === true ? TRUSTS.T2sim : TRUSTS[tier]} — ${shown(typeof check?.trust === "string" ? check.trust : trustLabel(tier))}`),
      ...(when ? [el("div", { class: "when" }, `Existed no later than ${shown(String(when))}`)] : []),
      el("div", { class: "detail" }, shown(typeof check?.detail === "string" ? check.detail : "this tier is not in the bundle")))
    tiers.append(row)
  }
  const notes = Array.isArray(r.notes) ? (r.notes as Array<unknown>).filter((n): n is string => typeof n === "string") : []
  $<HTMLElement>("#notes").replaceChildren(...notes.map((n) => el("li", {}, shown(n))))
  $<HTMLPreElement>("#summary").textContent = (() => {
    try {
      return isToken ? summarizeToken(r as TokenReport) : summarize(r as never)
    } catch {
      return ""
    }
  })()
  $<HTMLButtonElement>("[data-action=download]").disabled = false
  $<HTMLButtonElement>("[data-action=chain-check]").disabled = !(bundle as any)?.t2 || isToken
}

/** The instance's TSA chain (GET /v1/timestamp/certchain), or null where there is none to ask. */
const publishedChain = async (): Promise<string | null> => {
  if (!/^https?:$/.test(location.protocol)) return null
  try {
    const res = await fetch(`${location.origin}/v1/timestamp/certchain`)
    const text = res.ok ? await res.text() : ""
    return text.includes("-----BEGIN CERTIFICATE-----") ? text : null
  } catch {
    return null
  }
}

/** Options for a token: its TSA chain, the data or hash, and its evidence (checked against the published trust). */
const tokenOptions = async (token: Uint8Array): Promise<TokenVerifyOptions> => {
  const o: { -readonly [K in keyof TokenVerifyOptions]?: TokenVerifyOptions[K] } = {}
  if (state.userTsaPem !== null) {
    o.tsaChainPem = state.userTsaPem
    o.tsaChainLabel = "the TSA chain you loaded"
  } else {
    const chain = await publishedChain()
    if (chain !== null) {
      o.tsaChainPem = chain
      o.tsaChainLabel = `TSA chain published by ${location.origin}`
    }
  }
  const typed = $<HTMLInputElement>("input[name=hash]").value.trim().toLowerCase()
  if (state.documentFile !== null) {
    let algorithm = "SHA-256"
    try {
      algorithm = parseTimeStampToken(token).hash_algorithm
    } catch {
      // the token check reports an unreadable token
    }
    if (algorithm === "SHA-256" && state.documentDigest !== null) o.dataDigests = { "SHA-256": state.documentDigest }
    else o.data = new Uint8Array(await state.documentFile.arrayBuffer())
  } else if (typed !== "") o.hash = typed
  const evidence = $<HTMLTextAreaElement>("textarea[name=evidence]").value.trim()
  if (evidence !== "") {
    o.evidence = parseEvidence()
    const { tsaCaPem: _user, ...published } = trustOptions()
    const e = state.embedded
    o.evidenceOptions = { ...published, ...(e?.tsaCaPem && e.tsaCaPem.length > 0 ? { tsaCaPem: e.tsaCaPem.join("\n") } : {}) }
  }
  return o
}

const runVerifyToken = async (tsr: { readonly name: string; readonly bytes: Uint8Array }) => {
  let token: Uint8Array
  try {
    token = tokenOfFile(tsr.bytes)
  } catch (e) {
    throw new Error(`${tsr.name}: ${e instanceof Error ? e.message : String(e)}`)
  }
  return { report: (await verifyTimestampToken(token, await tokenOptions(token))) as unknown as AnyReport, bundle: null }
}

const runVerify = async (extra: Record<string, unknown> = {}, drop: ReadonlyArray<string> = []) => {
  if (state.tsr !== null) {
    const tsr = state.tsr
    return checkAndRender(() => runVerifyToken(tsr))
  }
  return checkAndRender(async () => {
    const bundle = parseEvidence()
    const options: Record<string, unknown> = { ...trustOptions(), ...extra }
    for (const k of drop) delete options[k]
    const typed = $<HTMLInputElement>("input[name=hash]").value.trim().toLowerCase()
    if (state.documentDigest !== null) options.dataSha256 = state.documentDigest
    else if (typed !== "") options.hash = typed
    return { report: await verify(bundle, options), bundle }
  })
}

const checkAndRender = async (check: () => Promise<{ readonly report: AnyReport; readonly bundle: unknown }>) => {
  const button = $<HTMLButtonElement>("[data-action=verify]")
  button.disabled = true
  try {
    setMessage("Verifying…")
    const started = performance.now()
    const { report, bundle } = await check()
    const ms = performance.now() - started
    state.report = report
    state.bundle = bundle
    render(report, bundle)
    document.body.dataset.verifyMs = ms.toFixed(1)
    setMessage(`Checked in ${ms.toFixed(0)} ms, in this browser. Nothing was uploaded.`)
  } catch (e) {
    setMessage(e instanceof Error ? e.message : String(e), "error")
  } finally {
    button.disabled = false
  }
}

const readFileText = (input: HTMLInputElement): Promise<string | null> => {
  const f = input.files?.[0]
  return f ? f.text() : Promise.resolve(null)
}

const onDrop = (zone: HTMLElement, handle: (f: File) => void) => {
  zone.addEventListener("dragover", (e) => {
    e.preventDefault()
    zone.classList.add("over")
  })
  zone.addEventListener("dragleave", () => zone.classList.remove("over"))
  zone.addEventListener("drop", (e) => {
    e.preventDefault()
    zone.classList.remove("over")
    const f = e.dataTransfer?.files?.[0]
    if (f) handle(f)
  })
}

const hashDocument = async (f: File) => {
  state.documentDigest = null
  state.documentFile = f
  const out = $<HTMLElement>("#document-digest")
  out.textContent = `Hashing ${f.name} (${f.size} bytes) in this browser…`
  const digest = await hashBlob(f, (p) => (out.textContent = `Hashing ${f.name}… ${Math.round(p * 100)}%`))
  state.documentDigest = digest
  out.textContent = `SHA-256 of ${f.name}: ${digest}`
  out.dataset.digest = digest
}

const applyBrand = async (slug: string) => {
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(slug) || location.protocol === "file:") return
  try {
    const res = await fetch(`${location.origin}/brand/${slug}`, { headers: { accept: "application/json" } })
    if (!res.ok) return
    const b = await res.json() as { display_name?: string; logo_url?: string | null; colors?: Record<string, string> }
    const color = /^#[0-9a-fA-F]{6}$/
    const root = document.documentElement.style
    for (const k of ["primary", "secondary", "background", "text"]) {
      const c = b.colors?.[k]
      if (typeof c === "string" && color.test(c)) root.setProperty(`--${k}`, c)
    }
    if (typeof b.display_name === "string") {
      $<HTMLElement>("#brand-name").textContent = b.display_name
      document.title = `${b.display_name} — proof verification`
    }
    if (typeof b.logo_url === "string" && /^(https:|data:image\/)/.test(b.logo_url)) {
      const img = $<HTMLImageElement>("#brand-logo")
      img.src = b.logo_url
      img.alt = b.display_name ?? ""
      img.hidden = false
    }
  } catch {
    // a missing brand leaves the default look
  }
}

const loadById = async (id: string) => {
  if (!/^att_[A-Za-z0-9_-]{1,100}$/.test(id) && !/^\d{1,20}$/.test(id)) {
    setMessage(`"${id.slice(0, 40)}" is not an attestation id`, "error")
    return
  }
  if (location.protocol === "file:") return
  setMessage(`Loading the evidence of ${id} from ${location.origin}…`)
  const res = await fetch(`${location.origin}/v1/attestation/${encodeURIComponent(id)}/evidence`, { headers: { accept: "application/json" } })
  const text = await res.text()
  if (!res.ok) {
    setMessage(`${location.origin} answered ${res.status} for ${id}`, "error")
    return
  }
  $<HTMLTextAreaElement>("textarea[name=evidence]").value = text
  await runVerify()
}

const describeEmbedded = () => {
  const e = state.embedded
  const box = $<HTMLElement>("#embedded")
  if (e === null) {
    box.textContent = "This copy carries no published trust inputs: load keys and TSA anchors below, or the tiers will be reported unanchored."
    return
  }
  const parts = [
    `${e.keys?.length ?? 0} signing key(s)`,
    `${e.tsaCaPem?.length ?? 0} TSA certificate(s)`,
    ...(e.simulatedHeaders ? [`${Object.keys(e.simulatedHeaders).length} simulated block header(s) (demo mode, not Bitcoin)`] : [])
  ]
  box.textContent = `Trust inputs published by ${e.origin}: ${parts.join(", ")}. They were embedded when this page was served, so a saved copy verifies offline.`
}

const start = () => {
  state.embedded = readEmbedded()
  describeEmbedded()
  if (!webCryptoAvailable()) {
    const w = $<HTMLElement>("#crypto-warning")
    w.hidden = false
    w.textContent = "This browser gives this page no WebCrypto (crypto.subtle is missing: plain http to a non-local address). " +
      "T0 signatures, the Merkle proofs and T2 are checked with the bundled noble implementation instead; " +
      "T1 cannot be checked here (its RFC 3161 token and certificate chain need WebCrypto) and is reported failed. " +
      "For a full check open this page over https, from localhost, or save it and open the file."
  }
  const evidenceFile = $<HTMLInputElement>("input[type=file][name=evidence]")
  const evidenceText = $<HTMLTextAreaElement>("textarea[name=evidence]")
  evidenceFile.addEventListener("change", async () => {
    const t = await readFileText(evidenceFile)
    if (t !== null) evidenceText.value = t
  })
  const tsrFile = $<HTMLInputElement>("input[type=file][name=tsr]")
  const loadToken = async (f: File) => {
    state.tsr = { name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) }
    const box = $<HTMLElement>("#token-loaded")
    box.hidden = false
    box.querySelector("span")!.textContent = `Time-stamp token ${f.name} (${f.size} bytes): Verify checks it.`
    setMessage(`Loaded ${f.name}: Verify checks the time-stamp token${evidenceText.value.trim() === "" ? "" : " with the evidence above as its evidence"}.`)
  }
  tsrFile.addEventListener("change", () => {
    const f = tsrFile.files?.[0]
    if (f) void loadToken(f)
  })
  $<HTMLButtonElement>("[data-action=clear-tsr]").addEventListener("click", () => {
    state.tsr = null
    tsrFile.value = ""
    $<HTMLElement>("#token-loaded").hidden = true
    setMessage("")
  })
  // A DER file (a SEQUENCE, 0x30) dropped here is a time-stamp token; anything else is evidence JSON.
  onDrop($("#evidence-zone"), async (f) => {
    const head = new Uint8Array(await f.slice(0, 1).arrayBuffer())
    if (head[0] === 0x30) await loadToken(f)
    else evidenceText.value = await f.text()
  })
  const documentFile = $<HTMLInputElement>("input[type=file][name=document]")
  documentFile.addEventListener("change", () => {
    const f = documentFile.files?.[0]
    if (f) void hashDocument(f).catch((e) => setMessage(String(e), "error"))
  })
  onDrop($("#document-zone"), (f) => void hashDocument(f).catch((e) => setMessage(String(e), "error")))
  $<HTMLInputElement>("input[name=hash]").addEventListener("input", () => {
    state.documentDigest = null
    state.documentFile = null
    $<HTMLElement>("#document-digest").textContent = ""
  })
  const keysFile = $<HTMLInputElement>("input[type=file][name=keys]")
  keysFile.addEventListener("change", async () => {
    const t = await readFileText(keysFile)
    if (t === null) return
    try {
      const doc = JSON.parse(t) as unknown
      const list = Array.isArray(doc) ? doc : (doc as { keys?: unknown }).keys ?? [doc]
      state.userKeys = list as Array<Record<string, unknown>>
      setMessage(`Loaded ${state.userKeys.length} key(s); they replace the published keys.`)
    } catch (e) {
      setMessage(`The keys file is not JSON: ${e instanceof Error ? e.message : String(e)}`, "error")
    }
  })
  const tsaFile = $<HTMLInputElement>("input[type=file][name=tsa]")
  tsaFile.addEventListener("change", async () => {
    const t = await readFileText(tsaFile)
    if (t === null) return
    if (!t.includes("-----BEGIN CERTIFICATE-----")) {
      setMessage("The TSA anchors file holds no PEM certificate", "error")
      return
    }
    state.userTsaPem = t
    setMessage("Loaded TSA trust anchors; they replace the published ones.")
  })
  $<HTMLButtonElement>("[data-action=verify]").addEventListener("click", () => void runVerify())
  $<HTMLButtonElement>("[data-action=download]").addEventListener("click", () => {
    if (state.report === null) return
    const a = document.createElement("a")
    a.href = URL.createObjectURL(new Blob([JSON.stringify(state.report, null, 2) + "\n"], { type: "application/json" }))
    a.download = `verification-report${state.report.id ? "-" + String(state.report.id) : ""}.json`
    a.click()
  })
  $<HTMLButtonElement>("[data-action=chain-check]").addEventListener("click", () => {
    const sources = $<HTMLInputElement>("input[name=bitcoin-sources]").value.split(/[\s,]+/).filter((s) => s !== "")
    if (sources.length === 0) {
      setMessage("Name at least one Esplora-compatible source", "error")
      return
    }
    // The sources decide the chain: Bitcoin ones for a real anchor, a demo instance's
    // /v1/simulated-chain for a simulated one (then the embedded headers are set aside).
    void runVerify({ bitcoinSources: sources, simulatedSources: sources }, ["simulatedHeaders"])
  })
  // A demo instance's bundles are on its simulated chain: check them against its Esplora endpoints.
  if (state.embedded?.simulatedHeaders && /^https?:/.test(state.embedded.origin)) {
    $<HTMLInputElement>("input[name=bitcoin-sources]").value = `${state.embedded.origin}/v1/simulated-chain`
  }
  const params = new URLSearchParams(location.search)
  const brand = params.get("brand")
  if (brand) void applyBrand(brand)
  const id = params.get("id")
  if (id) void loadById(id).catch((e) => setMessage(String(e), "error"))
  document.body.dataset.ready = "true"
}

declare global {
  interface Window {
    attestdVerifier: {
      verify: typeof verify
      verifyToken: typeof verifyToken
      hashBlob: typeof hashBlob
      webCrypto: boolean
      readonly embedded: EmbeddedTrust | null
    }
  }
}

window.attestdVerifier = {
  verify,
  verifyToken,
  hashBlob,
  webCrypto: webCryptoAvailable(),
  get embedded() {
    return state.embedded
  }
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start)
else start()
