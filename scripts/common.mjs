// Small helpers the scripts share (bench, soak, kill loop, webhook starvation). No side effects
// on import: test/Soak imports scripts/soak.mjs, which imports this.
import { randomBytes } from "node:crypto"
import { createServer } from "node:net"

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** A random SHA-256-shaped digest, 64 hex digits. */
export const randomHashHex = () => randomBytes(32).toString("hex")

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export const freePort = () =>
  new Promise((resolve, reject) => {
    const srv = createServer()
    srv.unref()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
