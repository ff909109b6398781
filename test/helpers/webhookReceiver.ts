/**
 * A webhook receiver on 127.0.0.1 for the webhook suites: records every request
 * (headers and the exact raw body bytes) and answers as told — a status code,
 * or "hang" (keep the request open, never answer; the socket is destroyed on
 * close). Only loopback: nothing here ever talks to a non-loopback address.
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http"
import { type AddressInfo, createServer as createNetServer, type Socket } from "node:net"

export interface Received {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** The exact bytes of the body. */
  readonly raw: Buffer
  readonly text: string
  readonly json: any
  /** Real time of arrival (ms). */
  readonly at: number
  /** Resolves when the client gave up on the request (aborted / socket closed before an answer). */
  readonly aborted: Promise<void>
  /** True once the client aborted the request. */
  readonly wasAborted: () => boolean
}

export type Answer = number | "hang"

export interface Receiver {
  readonly url: string
  readonly port: number
  readonly requests: Array<Received>
  /** Replaces the answering rule: `(request, index of the request, 0-based)` → status or "hang". */
  setAnswer(answer: (r: Received, index: number) => Answer): void
  /** Polls (real time) until `n` requests (matching `filter`) arrived. */
  waitForRequests(n: number, timeoutMs?: number, filter?: (r: Received) => boolean): Promise<Array<Received>>
  close(): Promise<void>
}

export const startReceiver = async (
  options: { readonly port?: number; readonly answer?: (r: Received, index: number) => Answer } = {}
): Promise<Receiver> => {
  let answer = options.answer ?? (() => 200)
  const requests: Array<Received> = []
  const sockets = new Set<Socket>()

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Array<Buffer> = []
    let aborted = false
    let answered = false
    let resolveAborted: () => void = () => {}
    const abortedP = new Promise<void>((r) => {
      resolveAborted = r
    })
    res.on("close", () => {
      if (!answered) {
        aborted = true
        resolveAborted()
      }
    })
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const raw = Buffer.concat(chunks)
      const text = raw.toString("utf8")
      let json: any = undefined
      try {
        json = JSON.parse(text)
      } catch {
        json = undefined
      }
      const r: Received = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        raw,
        text,
        json,
        at: Date.now(),
        aborted: abortedP,
        wasAborted: () => aborted
      }
      const index = requests.length
      requests.push(r)
      const a = answer(r, index)
      if (a === "hang") return
      answered = true
      res.writeHead(a, { "content-type": "text/plain" })
      res.end(a >= 200 && a < 300 ? "ok" : `status ${a}`)
    })
  }

  const server = createServer(handle)
  server.on("connection", (s) => {
    sockets.add(s)
    s.on("close", () => sockets.delete(s))
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject)
      resolve()
    })
  })
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    setAnswer: (f) => {
      answer = f
    },
    waitForRequests: async (n, timeoutMs = 15_000, filter = () => true) => {
      const deadline = Date.now() + timeoutMs
      while (true) {
        const got = requests.filter(filter)
        if (got.length >= n) return got
        if (Date.now() > deadline) {
          throw new Error(`receiver: expected ${n} request(s), got ${got.length} after ${timeoutMs} ms`)
        }
        await new Promise((r) => setTimeout(r, 25))
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}

/** `sha256=<hex>` of HMAC-SHA256 over `raw`, keyed with the ASCII bytes of `secret` — computed independently of src/. */
export const expectedSignature = (raw: Buffer | string, secret: string): string =>
  `sha256=${createHmac("sha256", Buffer.from(secret, "ascii")).update(raw).digest("hex")}`

/** Constant-time comparison of a received X-Service-Signature with the expected one. */
export const signatureMatches = (header: string | Array<string> | undefined, raw: Buffer, secret: string): boolean => {
  if (typeof header !== "string") return false
  const a = Buffer.from(header)
  const b = Buffer.from(expectedSignature(raw, secret))
  return a.length === b.length && timingSafeEqual(a, b)
}

export interface BlackHole {
  readonly url: string
  /** Connections accepted so far. */
  readonly accepted: () => number
  /** Connections the client has closed so far (an attempt given up). */
  readonly closedByClient: () => number
  /** Connections open now, and the most ever open at once. */
  readonly open: () => number
  readonly maxOpen: () => number
  /** Real time (ms) each connection was accepted at, in order. */
  readonly acceptedAt: ReadonlyArray<number>
  waitForAccepted(n: number, timeoutMs?: number): Promise<void>
  close(): Promise<void>
}

/** A TCP listener on 127.0.0.1 that accepts every connection, reads it, and never answers a byte. */
export const startBlackHole = async (): Promise<BlackHole> => {
  const sockets = new Set<Socket>()
  let accepted = 0
  let closedByClient = 0
  let closing = false
  let maxOpen = 0
  const acceptedAt: Array<number> = []
  const server = createNetServer((s) => {
    accepted++
    acceptedAt.push(Date.now())
    sockets.add(s)
    maxOpen = Math.max(maxOpen, sockets.size)
    s.on("data", () => {})
    s.on("error", () => {})
    s.on("close", () => {
      sockets.delete(s)
      if (!closing) closedByClient++
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    accepted: () => accepted,
    closedByClient: () => closedByClient,
    open: () => sockets.size,
    maxOpen: () => maxOpen,
    acceptedAt,
    waitForAccepted: async (n, timeoutMs = 15_000) => {
      const deadline = Date.now() + timeoutMs
      while (accepted < n) {
        if (Date.now() > deadline) throw new Error(`black hole: expected ${n} connection(s), got ${accepted} after ${timeoutMs} ms`)
        await new Promise((r) => setTimeout(r, 25))
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        closing = true
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}
