/**
 * Ports for what a test starts and others connect to: `attestd serve` children, Postgres
 * clusters, PgBouncer, webhook receivers, metrics listeners.
 *
 * A port read from the kernel (listen on 0, read it, close) is free only for a moment: the
 * kernel may hand it to the next listen on 0 of another suite running beside this one, which
 * then answers this suite's readiness probe in place of its own child (an import test ran a
 * ~2 s CLI command between taking its port and starting its server, and read a stranger's
 * /v1/healthz). So these ports come from below the kernel's ephemeral range (32768–60999 on
 * Linux), which a listen on 0 or an outgoing connection never takes, and each vitest worker has
 * a block of its own, so two workers never pick the same port. A port is still checked free by
 * binding it (a server of this worker's previous file, a service of the machine).
 */
import { createServer } from "node:net"
import { isMainThread, threadId } from "node:worker_threads"

const FIRST = 10_000
const BLOCK = 2_000
/** Blocks 0–4: the `unit` project's forks; 5–9: the `processes` project's threads (vitest.config.ts). */
const BLOCKS = 10

/**
 * This worker's block. VITEST_POOL_ID numbers the live workers of a pool from 1, so it tells
 * apart the forks, and apart the threads; the two pools number from 1 each, and a fork runs in
 * its process's main thread while a thread does not. Outside vitest (a script), a block by
 * process and thread.
 */
const block = (): number => {
  const poolId = Number(process.env.VITEST_POOL_ID)
  if (Number.isInteger(poolId) && poolId >= 1) return (isMainThread ? 0 : BLOCKS / 2) + ((poolId - 1) % (BLOCKS / 2))
  return (process.pid + threadId) % BLOCKS
}

/** Resolves whether 127.0.0.1:`port` could be bound just now (it is closed again). */
const bindable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const srv = createServer()
    srv.once("error", () => resolve(false))
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)))
  })

/**
 * The next port of this worker's block after the last one given, starting at a random place
 * (a thread's modules are fresh for each file: a counter from 0 would give the port of the
 * previous file's server, which may not have closed yet).
 */
let next = Math.floor(Math.random() * BLOCK)

/** A free TCP port on 127.0.0.1 that no other vitest worker will be given. */
export const freePort = async (): Promise<number> => {
  const base = FIRST + block() * BLOCK
  for (let tries = 0; tries < BLOCK; tries++) {
    const port = base + (next++ % BLOCK)
    if (await bindable(port)) return port
  }
  throw new Error(`no free port in ${base}–${base + BLOCK - 1}`)
}
