/**
 * Text from a bundle made safe to show a person: a terminal (the CLI's summary) or a
 * page (the verifier's text summary). Portable: it imports nothing of Node.
 *
 * A bundle is untrusted input; printed raw, an ESC or C1 CSI starts a terminal control
 * sequence (cursor moves, OSC titles and links), CR/LF forge extra lines under a verdict,
 * and bidi overrides or U+2028/2029 reorder or break what is shown. Each such character is
 * written as a visible escape (`\x1b`, `\u202e`), so what is shown is what the bundle holds.
 */

/** C0 controls (TAB, LF and CR included), DEL, C1 controls, the line and paragraph separators, bidi embeddings, overrides and isolates, and the BOM. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g

const escapeChar = (c: string): string => {
  const code = c.charCodeAt(0)
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`
}

/** One field shown to a person: every control, separator and bidi character escaped. */
export const shown = (text: string): string => text.replace(UNSAFE, escapeChar)

/** What `JSON.stringify` leaves raw inside strings (it escapes C0 itself; C0 outside strings is its own layout). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g

/** JSON for a terminal: DEL, C1, U+2028/2029 and bidi characters as `\uXXXX` escapes too; the value parsed back is the same. */
export const jsonForTerminal = (value: unknown, indent?: number): string =>
  JSON.stringify(value, null, indent).replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
