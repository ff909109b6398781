/**
 * One linear pass over a JSON body before it is parsed: how deep it nests and
 * whether any string holds U+0000 (written as an escape; a raw control byte is
 * invalid JSON anyway). Postgres text cannot hold U+0000, so it is refused at
 * the edge on both stores alike, in every string field and key.
 */
export const MAX_JSON_DEPTH = 64

export type JsonScanVerdict = "ok" | "too_deep" | "nul"

export const scanJson = (text: string, maxDepth: number = MAX_JSON_DEPTH): JsonScanVerdict => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) {
        // backslash: an escape; \u0000 is the one a store cannot hold
        if (text.charCodeAt(i + 1) === 0x75 && text.slice(i + 2, i + 6) === "0000") return "nul"
        i++
      } else if (c === 0x22) {
        inString = false
      } else if (c === 0) {
        return "nul"
      }
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) return "too_deep"
    } else if (c === 0x7d || c === 0x5d) {
      depth--
    }
  }
  return "ok"
}

/** Whether a request target holds an encoded or raw U+0000 (in a path id or a query). */
export const urlHasNul = (url: string): boolean => /%00|\u0000/i.test(url)
