/**
 * The verification core's data-driven cases (test/Verify/cases.ts) in real
 * headless Chromium, through the core the page was built with: the served
 * /verifier page's `window.attestdVerifier.verify`. The cases (and runCase)
 * are bundled for the browser by esbuild and evaluated in the page; the
 * fixtures are the same real bundles core.test.ts uses in Node.
 */
import { build } from "esbuild"
import { join } from "node:path"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { cases } from "../Verify/cases.js"
import { type LiveFixtures, makeFixtures } from "../Verify/fixtures.js"
import { browserAvailable, launchChromium } from "../helpers/browser.js"

// The callbacks given to page.evaluate run in the page; the test program has no DOM types.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const document: any
// eslint-disable-next-line @typescript-eslint/no-explicit-any
declare const window: any

/** cases.ts for the browser: `window.attestdCases.run(fixtures, i)` runs case i with the page's verify. */
const bundleCases = async (): Promise<string> => {
  const cases = join(__dirname, "..", "Verify", "cases.ts")
  const result = await build({
    stdin: {
      contents: `import { cases, runCase } from ${JSON.stringify(cases)}
window.attestdCases = {
  names: cases.map((c) => c.name),
  run: (fx, i) => runCase((b, o) => window.attestdVerifier.verify(b, o), fx, cases[i])
}`,
      resolveDir: __dirname,
      loader: "ts"
    },
    bundle: true,
    write: false,
    format: "iife",
    platform: "browser",
    target: ["es2022"],
    logLevel: "error"
  })
  return result.outputFiles[0]!.text
}

describe.runIf(browserAvailable())("verification cases in Chromium, through the page's built core", () => {
  let live: LiveFixtures
  let browser: Browser
  let page: Page

  beforeAll(async () => {
    const [fixtures, code] = await Promise.all([makeFixtures(), bundleCases()])
    live = fixtures
    browser = await launchChromium()
    page = await browser.newPage()
    await page.goto(`${live.server.url}/verifier`)
    await page.waitForFunction(() => document.body.dataset.ready === "true")
    // Evaluated by the driver (the page's CSP admits only its own script).
    await page.evaluate(code)
    expect(await page.evaluate(() => window.attestdCases.names)).toEqual(cases.map((c) => c.name))
    expect(await page.evaluate(() => window.attestdVerifier.webCrypto)).toBe(true)
  }, 120_000)

  afterAll(async () => {
    await browser?.close()
    await live?.close()
  })

  cases.forEach((c, i) => {
    it(c.name, async () => {
      const mismatches = await page.evaluate(([fx, n]) => window.attestdCases.run(fx, n), [live.fixtures, i] as const)
      expect(mismatches).toEqual([])
    })
  })
})
