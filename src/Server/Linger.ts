/**
 * Lingering: an answer given while the client is still sending is followed by
 * reading (and dropping) what it sends, for a while, before the connection
 * closes, so the close resets nothing the client has yet to read. Only public
 * node APIs: the request's events, `resume`, the socket's `end` and `destroy`.
 */
import type { IncomingMessage } from "node:http"
import type { Socket } from "node:net"

/** How long an answer given before its request's body arrived waits for that body (read and dropped). */
export const LINGER_MS = 2_000

/**
 * A lingering answer. An answer given before its request's body has arrived
 * (a 413 for a body over the limit, any refusal of an upload before reading
 * it) closes its connection, and node closes a socket as soon as the response
 * ends: if the body were still arriving then, the client's next write would
 * meet a reset and a client such as Node's own would drop the answer it has
 * not read yet. So such an answer is written at once but ended only when
 * `done` runs: once the rest of the body has been read and dropped, the
 * request has gone, or LINGER_MS pass, as nginx's lingering_close does.
 */
export const afterRequestBody = (req: IncomingMessage, done: () => void): void => {
  let finished = false
  const finish = () => {
    if (finished) return
    finished = true
    clearTimeout(timer)
    req.off("end", finish)
    req.off("close", finish)
    done()
  }
  const timer = setTimeout(finish, LINGER_MS)
  req.once("end", finish)
  req.once("close", finish)
  req.resume()
}

/** Ends our side of a socket Node gave up on, then reads and discards until the client closes its side or LINGER_MS pass. */
export const lingeringClose = (socket: Socket): void => {
  const timer = setTimeout(() => socket.destroy(), LINGER_MS)
  socket.once("end", () => socket.destroy())
  socket.once("close", () => clearTimeout(timer))
  socket.end()
}
