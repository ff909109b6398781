/**
 * The page's document hashing (web/verifier/hashWorker.ts) in real headless
 * Chromium: a Blob streamed through the Worker, chunk by chunk, gives the same
 * SHA-256 as node:crypto, for sizes across Blob.stream()'s chunk boundaries.
 */
import { createHash, randomBytes } from "node:crypto"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "esbuild"
import fc from "fast-check"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { browserAvailable, launchChromium } from "../helpers/browser.js"

// Callbacks given to page.evaluate run in the page; the test program has no DOM types.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const Worker: any

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..")

describe.runIf(browserAvailable())("document hashing in a Worker, in Chromium", () => {
  let browser: Browser
  let page: Page
  let workerSource: string

  beforeAll(async () => {
    const out = await build({
      entryPoints: [join(ROOT, "web", "verifier", "hashWorker.ts")],
      bundle: true,
      write: false,
      format: "iife",
      platform: "browser",
      logLevel: "silent"
    })
    workerSource = out.outputFiles[0]!.text
    browser = await launchChromium()
    page = await browser.newPage()
    await page.setContent("<!doctype html><title>hash</title>")
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
  })

  const hashInWorker = (bytes: Buffer): Promise<{ digest: string; progress: Array<number> }> =>
    page.evaluate(([src, b64]) =>
      new Promise((resolve, reject) => {
        const raw = atob(b64 as string)
        const data = new Uint8Array(raw.length)
        for (let i = 0; i < raw.length; i++) data[i] = raw.charCodeAt(i)
        const worker = new Worker(URL.createObjectURL(new Blob([src as string], { type: "text/javascript" })))
        const progress: Array<number> = []
        worker.onmessage = (e: { data: { progress?: number; digest?: string; error?: string } }) => {
          if (e.data.progress !== undefined) progress.push(e.data.progress)
          else if (e.data.digest !== undefined) resolve({ digest: e.data.digest, progress })
          else reject(new Error(e.data.error))
        }
        worker.postMessage({ blob: new Blob([data]) })
      }), [workerSource, bytes.toString("base64")] as const)

  it("the empty document and 'abc'", async () => {
    expect((await hashInWorker(Buffer.alloc(0))).digest).toBe(createHash("sha256").update("").digest("hex"))
    expect((await hashInWorker(Buffer.from("abc"))).digest).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  })

  it("a 1 MB document is streamed (progress rises monotonically to 1) and hashes like node:crypto", async () => {
    const data = randomBytes(1_000_000)
    const r = await hashInWorker(data)
    expect(r.digest).toBe(createHash("sha256").update(data).digest("hex"))
    expect(r.progress.at(-1)).toBe(1)
    expect([...r.progress].sort((a, b) => a - b)).toEqual(r.progress)
  })

  it("random sizes around chunk boundaries", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 200_000 }), async (n) => {
        const data = randomBytes(n)
        expect((await hashInWorker(data)).digest).toBe(createHash("sha256").update(data).digest("hex"))
      }),
      { numRuns: 15 }
    )
  })
})
