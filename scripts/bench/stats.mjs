// The bench scripts' one pair of summary statistics.

/**
 * The q-quantile (0 ≤ q ≤ 1) of the numbers, by nearest rank: the smallest value with at
 * least q of them at or below it (q = 0 gives the least). undefined for none.
 */
export const quantile = (xs, q) => {
  if (xs.length === 0) return undefined
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]
}

/** The median: the middle value, or the mean of the two middle ones for an even count. undefined for none. */
export const median = (xs) => {
  if (xs.length === 0) return undefined
  const s = [...xs].sort((a, b) => a - b)
  const mid = s.length >> 1
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}
