/**
 * The verification page with an RFC 3161 time-stamp token (CONTRACT §6), in headless
 * Chromium: a `.tsr` made by `openssl ts -reply` dropped on the evidence zone verifies
 * against the instance's published TSA chain (GET /v1/timestamp/certchain), with the
 * token's evidence pasted beside it up to T1; a tampered token fails the token row;
 * without a published chain the token is partial; and the page's core gives the report
 * the CLI's core gives for the same inputs.
 *
 * The tokens come from an openssl TSA, so the page's request for the certchain is
 * answered by Playwright with that TSA's chain (and with the 404 of an instance whose
 * time-stamping is off, for the case without one); every other request goes to a real
 * in-process attestd whose T1 evidence covers the token's SHA-256.
 */
import { createHash } from "node:crypto"
import { readFile } from "node:fs/promises"
import { Duration } from "effect"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { tokenOfFile, verifyTimestampToken } from "../../src/Verify/Token.js"
import { poll } from "../helpers/anchoring.js"
import { browserAvailable, launchChromium } from "../helpers/browser.js"
import { client, startTestServer, type TestServer } from "../helpers/server.js"
import { makeTsrFixtures, type TsrFixtures } from "../helpers/tsrFixtures.js"

// The callbacks given to page.evaluate run in the page; the test program has no DOM types.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const document: any
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const window: any
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const DataTransfer: any
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const DragEvent: any
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const File: any

const sha256Hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")

/** Drops `bytes` as a file named `name` on the evidence zone, as a person dragging it there would. */
const drop = (page: Page, name: string, bytes: Buffer) =>
  page.evaluate(([b64, fileName]) => {
    const data = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))
    const transfer = new DataTransfer()
    transfer.items.add(new File([data], fileName))
    document.querySelector("#evidence-zone").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }))
  }, [bytes.toString("base64"), name] as const)

/** Presses Verify and reads the verdict and each row's status. */
const verifyThroughDom = async (page: Page) => {
  await page.evaluate(() => document.querySelector("#verdict")?.setAttribute("data-verdict", ""))
  await page.click("[data-action=verify]")
  await page.waitForFunction(() => (document.querySelector("#verdict")?.getAttribute("data-verdict") ?? "") !== "")
  return page.evaluate(() => ({
    verdict: document.querySelector("#verdict").getAttribute("data-verdict"),
    text: document.querySelector("#verdict").textContent,
    rows: Object.fromEntries([...document.querySelectorAll("#tiers [data-tier]")].map((r: any) => [r.dataset.tier, r.dataset.status]))
  }))
}

describe.runIf(browserAvailable())("a time-stamp token on the verification page", () => {
  let fx: TsrFixtures
  let server: TestServer
  let browser: Browser
  let page: Page
  let evidence: unknown
  let chainPem: string

  beforeAll(async () => {
    fx = await makeTsrFixtures()
    chainPem = await readFile(fx.files.chain, "utf8")
    server = await startTestServer("sqlite", { sealInterval: Duration.millis(300) })
    const { key } = await server.createKey()
    const created = await client(server.url, key).post("/v1/attest", { hash_hex: sha256Hex(fx.goodToken) })
    expect(created.status).toBe(201)
    evidence = await poll("the token's T1", async () => {
      const b = (await client(server.url).get(`/v1/attestation/${created.body.id}/evidence`)).body
      return b?.level === "T1" ? b : undefined
    }, 15_000)
    browser = await launchChromium()
    page = await (await browser.newContext()).newPage()
    await page.route("**/v1/timestamp/certchain", (route) =>
      route.fulfill({ status: 200, contentType: "application/pem-certificate-chain", body: chainPem }))
    await page.goto(`${server.url}/verifier`)
    await page.waitForFunction(() => document.body.dataset.ready === "true")
  }, 90_000)

  afterAll(async () => {
    await browser?.close()
    await server?.close()
    await fx?.close()
  })

  it("a dropped .tsr with its hash and evidence: verified against the published chain, evidence up to T1", async () => {
    await page.fill("input[name=hash]", sha256Hex(fx.data))
    await page.fill("textarea[name=evidence]", JSON.stringify(evidence))
    await drop(page, "good.tsr", await readFile(fx.files.good))
    await page.waitForFunction(() => !document.querySelector("#token-loaded").hidden)
    const r = await verifyThroughDom(page)
    expect(r.verdict).toBe("verified")
    expect(r.text).toMatch(/^Verified: time-stamp token [0-9a-f]+, its evidence up to T1$/)
    expect(r.rows).toEqual({ token: "ok", input: "ok", evidence: "ok", T0: "ok", T1: "ok" })
    const trusts = await page.textContent("[data-tier=token] .trusts")
    expect(trusts).toContain(`TSA chain published by ${server.url}`)
    await page.screenshot({ path: "/tmp/attestd-token-verified.png", fullPage: true })
  })

  it("a tampered token fails its row; the wrong hash fails the data row", async () => {
    await page.setInputFiles("input[name=tsr]", fx.files.tampered)
    await page.fill("textarea[name=evidence]", "")
    const tampered = await verifyThroughDom(page)
    expect(tampered.verdict).toBe("failed")
    expect(tampered.rows).toMatchObject({ token: "failed", input: "ok" })
    await page.setInputFiles("input[name=tsr]", fx.files.good)
    await page.fill("input[name=hash]", sha256Hex(Buffer.from("other")))
    const wrong = await verifyThroughDom(page)
    expect(wrong.verdict).toBe("failed")
    expect(wrong.rows).toEqual({ token: "ok", input: "failed" })
  })

  it("without a published chain the token is partial; the page's core reports what the CLI's core reports", async () => {
    await page.unroute("**/v1/timestamp/certchain")
    await page.route("**/v1/timestamp/certchain", (route) =>
      route.fulfill({
        status: 404,
        contentType: "application/json",
        body: JSON.stringify({ error: "Not Found", code: "NOT_FOUND", message: "time-stamping is off on this instance", details: {} })
      }))
    await page.setInputFiles("input[name=tsr]", fx.files.good)
    await page.fill("input[name=hash]", sha256Hex(fx.data))
    const r = await verifyThroughDom(page)
    expect(r.verdict).toBe("partial")
    expect(r.rows).toEqual({ token: "unanchored", input: "ok" })

    const tsr = await readFile(fx.files.good)
    const options = { hash: sha256Hex(fx.data), tsaChainPem: chainPem, evidence }
    const inPage = await page.evaluate(([b64, o]) => window.attestdVerifier.verifyToken(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)), o),
      [tsr.toString("base64"), options] as const)
    const inNode = await verifyTimestampToken(tokenOfFile(new Uint8Array(tsr)), options)
    // no trusted keys or upstream anchors given for the evidence: its tiers are unanchored
    expect(inPage.verdict).toBe("partial")
    expect({ ...inPage, crypto: null }).toEqual({ ...inNode, crypto: null })
  })
})
