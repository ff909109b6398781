/**
 * The check every server answer passes before `attestd stamp` or `attestd upgrade` writes
 * it into a receipt: the portable verifier (src/Verify) against the trust the instance
 * publishes. A receipt is evidence a person keeps; a server that is confused, spoofed or
 * hostile must not be able to put a bad signature or a foreign tier into one.
 */
import { type Report, verifyBundle } from "../Verify/Verifier.js"
import type { PublishedTrust } from "./PublishedTrust.js"

/** Why `bundle` must not be written, or null when it may: T0 verified with a published key, no tier failing, T1 anchored when the instance publishes TSA anchors. */
export const refusalOf = async (bundle: Record<string, unknown>, trust: PublishedTrust): Promise<string | null> => {
  const report: Report = await verifyBundle(bundle, trust)
  const { t0, t1, t2 } = report.checks
  if (t0.status !== "ok") return `its T0 signature does not verify against the instance's published keys: ${t0.detail}`
  if (t1?.status === "failed") return `its T1 evidence does not verify: ${t1.detail}`
  if (t1?.status === "unanchored" && trust.tsaCaPem !== undefined) return `its T1 evidence is not anchored in the instance's TSA trust anchors: ${t1.detail}`
  if (t2?.status === "failed") return `its T2 evidence does not verify: ${t2.detail}`
  return null
}
