import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { staleBundleFiles, staleDistFiles } from "../helpers/process.js"

// Process tests run dist/; a dist/ older than src/ must stop them instead of testing old code.
describe("stale dist/ detection", () => {
  const roots: Array<string> = []
  afterEach(() => roots.splice(0).forEach((r) => rmSync(r, { recursive: true, force: true })))

  const tree = (srcAge: number, distAge: number | null): string => {
    const root = mkdtempSync(join(tmpdir(), "attestd-stale-"))
    roots.push(root)
    mkdirSync(join(root, "src", "Feature"), { recursive: true })
    mkdirSync(join(root, "dist", "Feature"), { recursive: true })
    const now = Date.now() / 1000
    writeFileSync(join(root, "src", "Feature", "Repo.ts"), "export {}")
    utimesSync(join(root, "src", "Feature", "Repo.ts"), now - srcAge, now - srcAge)
    if (distAge !== null) {
      writeFileSync(join(root, "dist", "Feature", "Repo.js"), "export {}")
      utimesSync(join(root, "dist", "Feature", "Repo.js"), now - distAge, now - distAge)
    }
    return root
  }

  it("accepts a build newer than its sources", () => {
    expect(staleDistFiles(tree(100, 10))).toEqual([])
  })

  it("names a source edited after the build", () => {
    expect(staleDistFiles(tree(10, 100))).toEqual([join("src", "Feature", "Repo.ts")])
  })

  it("names a source that was never compiled", () => {
    expect(staleDistFiles(tree(10, null))).toEqual([join("src", "Feature", "Repo.ts")])
  })

  const bundled = (srcAge: number, bundleAge: number | null): string => {
    const root = tree(srcAge, srcAge - 1)
    if (bundleAge !== null) {
      const now = Date.now() / 1000
      writeFileSync(join(root, "dist", "cli.mjs"), "")
      utimesSync(join(root, "dist", "cli.mjs"), now - bundleAge, now - bundleAge)
    }
    return root
  }

  it("accepts a bundle (dist/cli.mjs, what process tests run) newer than its sources", () => {
    expect(staleBundleFiles(bundled(100, 10))).toEqual([])
  })

  it("names a source edited after the bundle, and every source when there is no bundle", () => {
    expect(staleBundleFiles(bundled(10, 100))).toEqual([join("src", "Feature", "Repo.ts")])
    expect(staleBundleFiles(bundled(10, null))).toEqual([join("src", "Feature", "Repo.ts")])
  })
})
