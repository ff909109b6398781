/**
 * Graceful shutdown of the HTTP listener. On SIGTERM/SIGINT the main fiber is
 * interrupted and the layers are released in reverse order; the finalizer of
 * `DrainLive` runs first, while the request handlers, the database and the
 * workers are still there:
 *
 * 1. keep listening until quiet (at most 1 s), so connections already in the
 *    kernel's accept queue are accepted and answered rather than reset, then stop
 *    listening;
 * 2. every response from now on carries `Connection: close` (a header node honours
 *    by closing the connection after the response);
 * 3. wait until no request is in flight and none has arrived for 250 ms and 10
 *    turns of the event loop (bounded
 *    by ATTESTD_SHUTDOWN_TIMEOUT), then close idle keep-alive connections, or every
 *    connection on timeout.
 *
 * Then the HTTP server, the workers (a seal / anchor / delivery transaction in
 * progress commits or rolls back as its fiber is interrupted) and the database
 * close, and the process exits 0.
 */
import { Duration, Effect, Layer } from "effect"
import type { IncomingMessage, Server, ServerResponse } from "node:http"
import { shutdownTimeout } from "../Platform/Config.js"

export interface Drainer {
  /** Called for every request before it is handled. */
  readonly track: (req: IncomingMessage, res: ServerResponse) => void
  /** Resolves when no request is in flight any more (or after `timeoutMs`); true if drained in time. */
  readonly drain: (timeoutMs: number) => Promise<boolean>
  server: Server | undefined
}

/** How long the server must see no request before idle keep-alive connections are closed. */
const QUIET_MS = 250
/** …and for at least this many turns of the event loop (each polls the sockets). */
const QUIET_TURNS = 10
/** How long the listener stays open after the signal, at most, while the server is not quiet. */
const ACCEPT_GRACE_MS = 1_000

const pause = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

/**
 * The responses in flight: an array whose entries know their index, so a response
 * leaves by moving the last entry into its slot. Not a Set: one that gains and loses an
 * entry per request kept answered responses alive into the old generation (attest-new
 * spent 5–24% more CPU per request; docs/performance.md).
 */
export interface InFlight<A> {
  /** Adds `item`; the function returned removes it (once: later calls do nothing). */
  readonly add: (item: A) => () => void
  readonly size: () => number
  readonly items: () => ReadonlyArray<A>
}

export const makeInFlight = <A>(): InFlight<A> => {
  interface Entry {
    item: A | undefined
    index: number
  }
  const entries: Array<Entry> = []
  return {
    add: (item) => {
      const entry: Entry = { item, index: entries.length }
      entries.push(entry)
      return () => {
        if (entry.index < 0) return
        const last = entries.pop()!
        if (last !== entry) {
          entries[entry.index] = last
          last.index = entry.index
        }
        entry.index = -1
        // V8 may allocate these entries in the old generation (they often outlive a young
        // collection); one that still held its response would keep the whole request alive
        // there until a full collection
        entry.item = undefined
      }
    },
    size: () => entries.length,
    items: () => entries.map((e) => e.item as A)
  }
}

export const makeDrainer = (): Drainer => {
  const inFlight = makeInFlight<ServerResponse>()
  let draining = false
  let requests = 0
  const drainer: Drainer = {
    server: undefined,
    track: (_req, res) => {
      const leave = inFlight.add(res)
      requests++
      if (draining) res.setHeader("connection", "close")
      // 'close' follows 'finish' on every response, and comes alone when the connection went first
      res.on("close", leave)
    },
    drain: async (timeoutMs) => {
      const server = drainer.server
      if (server === undefined || draining) return true
      draining = true
      const deadline = Date.now() + timeoutMs
      // Quiet: no request in flight and none seen for QUIET_MS and QUIET_TURNS turns of the
      // event loop (a process starved of CPU can see 250 ms pass in one turn, before it has
      // polled its sockets). Each request seen restarts it.
      const quiet = async (until: number) => {
        let quietSince = inFlight.size() === 0 ? Date.now() : undefined
        let quietTurns = 0
        let seen = requests
        while (Date.now() < until) {
          if (inFlight.size() > 0 || requests !== seen) {
            quietSince = undefined
            quietTurns = 0
          } else if (quietSince === undefined) quietSince = Date.now()
          else quietTurns++
          seen = requests
          if (quietSince !== undefined && Date.now() - quietSince >= QUIET_MS && quietTurns >= QUIET_TURNS) return
          await pause(20)
        }
      }
      // 1. Keep listening for a short grace: connections the kernel has already queued are
      //    accepted and answered (with Connection: close) instead of reset when the listener
      //    closes. A busy process was seen leaving connections in its accept queue for
      //    300-600 ms under a burst of new connections; closing the listener resets those.
      await quiet(Math.min(deadline, Date.now() + ACCEPT_GRACE_MS))
      // 2. Stop listening. http.Server#close also closes the connections idle now; the
      //    quiet period above makes it unlikely that one of them was accepted a moment
      //    ago with its request not parsed yet.
      if (server.listening) server.close()
      for (const res of inFlight.items()) if (!res.headersSent) res.setHeader("connection", "close")
      // 3. Quiet again: a keep-alive client may have written its next request just before the
      //    signal, on a connection the server has not read yet; such a request is answered
      //    (with Connection: close) rather than reset.
      await quiet(deadline)
      const drained = inFlight.size() === 0
      if (drained) server.closeIdleConnections()
      else server.closeAllConnections()
      return drained
    }
  }
  return drainer
}

/** Drains `drainer` when its scope closes; built after the HTTP layers so it is released before them. */
export const DrainLive = (drainer: Drainer) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const timeout = yield* Effect.orDie(shutdownTimeout)
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (drainer.server === undefined) return
        yield* Effect.logInfo("shutting down: no new connections, finishing requests in flight")
        const drained = yield* Effect.promise(() => drainer.drain(Duration.toMillis(timeout)))
        if (drained) yield* Effect.logInfo("requests drained")
        else yield* Effect.logWarning(`requests still in flight after ATTESTD_SHUTDOWN_TIMEOUT (${Duration.format(timeout)}); connections closed`)
      })
    )
  }))
