/**
 * How a configured URL is shown: in /v1/info, /v1/healthz, the proof endpoints, logs,
 * metric labels and error messages. Operators put credentials in these URLs
 * (`https://user:pass@tsa.example/…`, `…?apikey=…`, `…?token=…`); only the requests
 * themselves carry them. Userinfo is dropped, a query string becomes `?redacted`, a
 * fragment is dropped; a URL with none of these, or a label that is no URL (the demo
 * TSA's), is shown as written.
 */

export const REDACTED_QUERY = "?redacted"

const SCHEME_AUTHORITY = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//

/** For what `URL` cannot parse: the same cuts, by the characters that start each part. */
const redactText = (text: string): string => {
  const query = text.search(/[?#]/)
  const head = query < 0 ? text : text.slice(0, query)
  const tail = query < 0 || text[query] === "#" ? "" : REDACTED_QUERY
  // userinfo: everything between "//" and the last "@" before the path
  return head.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/]*@/, "$1").replace(/^[^/:]*:[^/@]*@/, "") + tail
}

export const redactUrl = (url: string): string => {
  if (!SCHEME_AUTHORITY.test(url)) return redactText(url)
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return redactText(url)
  }
  if (parsed.username === "" && parsed.password === "" && !/[?#@]/.test(url)) return url
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}${url.includes("?") ? REDACTED_QUERY : ""}`
}

/** Every URL of a list, redacted. */
export const redactUrls = (urls: ReadonlyArray<string>): Array<string> => urls.map(redactUrl)
