/**
 * Timeouts and connection caps of the HTTP listener (ATTESTD_REQUEST_TIMEOUT,
 * ATTESTD_HEADERS_TIMEOUT, ATTESTD_KEEP_ALIVE_TIMEOUT, ATTESTD_MAX_CONNECTIONS,
 * ATTESTD_MAX_CONNECTIONS_PER_ADDRESS). A client that dribbles its headers or
 * body is answered 408 and closed once the deadline passes, and one address
 * cannot hold more than its share of connections, so slow connections
 * (slowloris) cannot starve other clients. A request Node cannot read gets the
 * error envelope, and an answer given while input is still arriving lingers,
 * so the client reads it.
 */
import { type IncomingMessage, type Server, type ServerOptions, type ServerResponse, STATUS_CODES } from "node:http"
import type { Socket } from "node:net"
import { normalizeIp, peerIsTrustedProxy, type TrustProxy } from "../Platform/ClientAddress.js"
import { publicBucketOf } from "../Auth/PublicLimit.js"
import type { ServerLimits } from "../Platform/Config.js"
import { envelopeBody } from "../Http/Envelope.js"
import { requestIdOf } from "./Edge.js"
import { lingeringClose } from "./Linger.js"

export interface ConnectionStats {
  /** Connections refused on accept because their address held its maximum. */
  refusedPerAddress: number
}

/** The node:http server options of `limits`, given to `createServer`. */
export const serverOptionsOf = (limits: ServerLimits): ServerOptions => {
  // node:http requires headersTimeout <= requestTimeout.
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs)
  return {
    requestTimeout: limits.requestTimeoutMs,
    headersTimeout,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node checks the two deadlines every connectionsCheckingInterval (default 30 s):
    // check often enough that they hold roughly as configured.
    connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(headersTimeout / 4)))
  }
}

/** Applies the connection caps of `limits` to a node:http server before it listens; returns counters for tests and metrics. */
export const applyServerLimits = (server: Server, limits: ServerLimits, trustProxy: TrustProxy): ConnectionStats => {
  const stats: ConnectionStats = { refusedPerAddress: 0 }
  if (limits.maxConnections > 0) server.maxConnections = limits.maxConnections
  if (limits.maxConnectionsPerAddress > 0) {
    const open = new Map<string, number>()
    server.prependListener("connection", (socket: Socket) => {
      const peer = normalizeIp(socket.remoteAddress ?? "")
      if (peerIsTrustedProxy(trustProxy, peer)) return
      const bucket = publicBucketOf(peer)
      const n = (open.get(bucket) ?? 0) + 1
      if (n > limits.maxConnectionsPerAddress) {
        stats.refusedPerAddress++
        socket.destroy()
        return
      }
      open.set(bucket, n)
      socket.once("close", () => {
        const left = (open.get(bucket) ?? 1) - 1
        if (left <= 0) open.delete(bucket)
        else open.set(bucket, left)
      })
    })
  }
  return stats
}

/** Status, code and message for a request Node could not read (its `clientError`). */
const clientErrorAnswer = (code: string | undefined): readonly [number, string, string] => {
  switch (code) {
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return [408, "REQUEST_TIMEOUT", "the request did not arrive whole within the server's timeout"]
    case "HPE_HEADER_OVERFLOW":
      return [431, "VALIDATION_ERROR", "the request's headers are too large"]
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return [413, "VALIDATION_ERROR", "the request's chunk extensions are too large"]
    default:
      return [400, "VALIDATION_ERROR", "malformed HTTP request"]
  }
}

/**
 * Requests Node cannot read: a malformed request line or header, headers too large, or
 * a request still arriving when ATTESTD_HEADERS_TIMEOUT / ATTESTD_REQUEST_TIMEOUT pass.
 * Node's own answer is a bare status line (no body, no X-Request-Id) and an immediate
 * destroy, which can reset the connection before the client reads even that. Here the
 * answer has the error envelope (408 is `REQUEST_TIMEOUT`, the others
 * `VALIDATION_ERROR`), an X-Request-Id (spec §7: every response carries one) and
 * `Connection: close`, then the socket closes lingering, as after a refused upload.
 * `onAnswer` counts each answer by status (metrics).
 */
export const answerClientErrors = (server: Server, onAnswer: (status: number) => void = () => {}) => {
  const answered = new WeakSet<Socket>()
  // The newest response on each socket: an answer is under way while it has begun and is not
  // yet sent (what node's own handler checks), so a request that cannot be read after an
  // answered one on a keep-alive connection is answered as on a fresh one. An idle connection
  // keeps its last response (and request) until its next request or its end: one per open
  // connection, in exchange for no listener per request.
  const responses = new WeakMap<Socket, ServerResponse>()
  server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => {
    responses.set(req.socket, res)
  })
  const answerUnderWay = (socket: Socket): boolean => {
    const res = responses.get(socket)
    return res !== undefined && res.headersSent && !res.writableFinished
  }
  server.on("clientError", (error: Error & { readonly code?: string }, socket: Socket) => {
    // the parser may report again on data that follows: the first answer stands
    if (answered.has(socket)) return
    answered.add(socket)
    // an answer already under way on this socket cannot be followed by another
    if (error.code === "ECONNRESET" || !socket.writable || answerUnderWay(socket)) {
      socket.destroy()
      return
    }
    const [status, code, message] = clientErrorAnswer(error.code)
    const body = JSON.stringify(envelopeBody(code, message))
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `x-request-id: ${requestIdOf(undefined)}\r\nconnection: close\r\n\r\n${body}`
    )
    onAnswer(status)
    // what the client still sends is read and dropped, not parsed
    socket.removeAllListeners("data")
    socket.on("data", () => {})
    socket.resume()
    lingeringClose(socket)
  })
}
