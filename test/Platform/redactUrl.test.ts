/** redactUrl: how every configured URL is shown (issue 42, finding 2). */
import { describe, expect, it } from "vitest"
import { redactUrl } from "../../src/Platform/RedactUrl.js"

describe("redactUrl", () => {
  it("drops userinfo and fragment, replaces the query; leaves plain URLs and labels as written", () => {
    expect(redactUrl("http://u:p@host/tsa?apikey=SECRET")).toBe("http://host/tsa?redacted")
    expect(redactUrl("https://cal:PASS@cal.example:8443/")).toBe("https://cal.example:8443/")
    expect(redactUrl("https://blockstream.info/api?token=SECRET")).toBe("https://blockstream.info/api?redacted")
    expect(redactUrl("http://host/p#SECRET")).toBe("http://host/p")
    expect(redactUrl("http://127.0.0.1:5000")).toBe("http://127.0.0.1:5000")
    expect(redactUrl("https://tsa.example/tsr/")).toBe("https://tsa.example/tsr/")
    expect(redactUrl("embedded demo TSA (not qualified)")).toBe("embedded demo TSA (not qualified)")
  })

  it("what URL cannot parse loses the same parts", () => {
    expect(redactUrl("http://u:SECRET@[::1/x?k=SECRET")).not.toMatch(/SECRET/)
    expect(redactUrl("user:SECRET@host/x?y=SECRET")).not.toMatch(/SECRET/)
  })
})
