/**
 * The digests this instance has attested lately, remembered approximately: a
 * direct-mapped table of 65,536 slots (256 KiB), a digest's first 16 bits choosing
 * its slot and the next 32 its tag. A newer digest takes an older one's slot; two
 * digests share a slot and a tag with odds of 2^-48.
 *
 * It only chooses a plan, never an answer (Attestor): a group of digests none of
 * which is remembered is written first and read after (most likely all new: one
 * round trip on Postgres), any other group read first. A digest forgotten, or
 * attested through another instance, costs its group a round trip, not a wrong
 * answer; one remembered by mistake costs nothing the read-first plan does not.
 */
const SLOTS = 1 << 16

export interface RecentDigests {
  /** Whether `hashHex` (64 lowercase hex digits) was remembered and not pushed out since. */
  readonly has: (hashHex: string) => boolean
  readonly remember: (hashHex: string) => void
}

export const makeRecentDigests = (): RecentDigests => {
  const tags = new Uint32Array(SLOTS)
  const filled = new Uint8Array(SLOTS)
  const slotOf = (hashHex: string) => parseInt(hashHex.slice(0, 4), 16)
  const tagOf = (hashHex: string) => parseInt(hashHex.slice(4, 12), 16) >>> 0
  return {
    has: (hashHex) => {
      const slot = slotOf(hashHex)
      return filled[slot] === 1 && tags[slot] === tagOf(hashHex)
    },
    remember: (hashHex) => {
      const slot = slotOf(hashHex)
      tags[slot] = tagOf(hashHex)
      filled[slot] = 1
    }
  }
}
