/**
 * The bounded multi-instance soak (scripts/soak.mjs, issue 14 §5): three API
 * processes and one worker on one fresh Postgres, 12 s of paced attest load
 * with a random SIGKILL + restart every 1.5–3 s (at least 3 kills), then the audit: every
 * acknowledged attestation stored once and verifiable, each window sealed
 * once, each day anchored once and confirmed, every T1/T2 event delivered at
 * least once, and the per-key rate limit held across instances.
 * Postgres only; under CI=true `dialects()` insists on it.
 */
import { describe, expect, it } from "vitest"
import { dialects, PG_ADMIN_URL } from "../helpers/databases.js"
import { requireDist } from "../helpers/process.js"
// @ts-expect-error: a plain ESM script without type declarations
import { runSoak } from "../../scripts/soak.mjs"

interface SoakResult {
  readonly ok: boolean
  readonly table: string
  readonly rows: ReadonlyArray<readonly [string, string, string, boolean]>
  readonly figures: { readonly acknowledged: number; readonly kills: number }
  readonly tails: ReadonlyArray<string>
}

const pg = (await dialects()).includes("pg")

describe.skipIf(!pg)("multi-instance soak (bounded)", () => {
  it("keeps every acknowledged attestation, seals and anchors once, delivers every event, holds the rate limit", async () => {
    requireDist()
    const result: SoakResult = await runSoak({
      durationMs: 12_000,
      killEveryMs: [1_500, 3_000],
      minKills: 3,
      adminUrl: PG_ADMIN_URL,
      rateLimit: 60,
      attestsPerSecond: 20,
      anchorInterval: "5s",
      drainTimeoutMs: 60_000,
      log: () => {}
    })
    const failed = result.rows.filter((r) => !r[3]).map((r) => `${r[0]}: ${r[1]} = ${r[2]}`)
    expect(failed, `${result.table}\n${result.tails.join("\n")}`).toEqual([])
    expect(result.figures.acknowledged).toBeGreaterThan(100)
    expect(result.figures.kills).toBeGreaterThanOrEqual(3)
  }, 240_000)
})
