/**
 * A delivery in production reaches only public addresses, with one DNS query:
 * the attempt checks the URL's shape (an IP address must be public) and leaves
 * a host name to the connection, whose lookup refuses non-public addresses
 * (publicOnlyLookup). Webhooks here are written straight to the repository, as
 * if registered while their host still resolved to a public address.
 *
 * The target is a TCP listener that counts connections; the same webhook in
 * demo mode is the positive control (demo has no address guard: it connects).
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { createServer, type Server } from "node:net"
import { afterAll, expect } from "vitest"
import { WebhookDispatcher } from "../../src/Webhooks/Dispatcher.js"
import { WebhookRepo } from "../../src/Webhooks/Repo.js"
import { dialects } from "../helpers/databases.js"
import { attestMany, closeOpenDeliveries, insertEvent, newKey, register, webhookServiceLayer } from "../helpers/webhookFixtures.js"

/** A TCP listener on 127.0.0.1 that counts the connections it accepts and closes them. */
const listener = (): Promise<{ readonly server: Server; readonly port: number; readonly connections: () => number }> =>
  new Promise((resolve, reject) => {
    let n = 0
    const server = createServer((socket) => {
      n++
      socket.destroy()
    })
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      if (address === null || typeof address === "string") return reject(new Error("no port"))
      resolve({ server, port: address.port, connections: () => n })
    })
  })

const target = await listener()
afterAll(() => new Promise<void>((resolve) => target.server.close(() => resolve())))

/** One delivery of a t1_complete event to `url`, attempted once; the delivery as recorded. */
const deliverOnceTo = (url: string) =>
  Effect.gen(function*() {
    yield* closeOpenDeliveries
    const key = yield* newKey
    const w = yield* register(key.id, url, ["t1_complete"])
    const [a] = yield* attestMany(key, 1)
    yield* insertEvent(a!.seq)
    const d = yield* WebhookDispatcher
    yield* d.fanOutOnce
    yield* d.sendDueOnce
    const [delivery] = yield* Effect.orDie(Effect.flatMap(WebhookRepo, (r) => r.deliveries(w.id)))
    return delivery!
  })

const excerptOf = (id: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ response_excerpt: string | null }>`SELECT response_excerpt FROM webhook_deliveries WHERE id = ${id}`).pipe(
    Effect.map((rows) => rows[0]?.response_excerpt ?? null),
    Effect.orDie
  )

for (const dialect of await dialects()) {
  const ports = [target.port]
  layer(webhookServiceLayer(dialect, { mode: "production", webhookPorts: ports }), { timeout: Duration.seconds(60) })(
    `webhook delivery in production (${dialect})`,
    (it) => {
      it.scoped("a host name resolving to loopback is refused as the connection looks it up: no connection", () =>
        Effect.gen(function*() {
          const before = target.connections()
          const d = yield* deliverOnceTo(`https://localhost:${target.port}/hook`)
          expect(d).toMatchObject({ status: "retrying", attempts: 1, responseCode: null })
          expect(yield* excerptOf(d.id)).toMatch(/refusing non-public address (127\.0\.0\.1|::1) for localhost/)
          expect(target.connections()).toBe(before)
        }))

      it.scoped("a loopback IP address is refused before any connection", () =>
        Effect.gen(function*() {
          const before = target.connections()
          const d = yield* deliverOnceTo(`https://127.0.0.1:${target.port}/hook`)
          expect(d).toMatchObject({ status: "retrying", attempts: 1, responseCode: null })
          expect(yield* excerptOf(d.id)).toBe(`host 127.0.0.1 resolves to a non-public address (127.0.0.1)`)
          expect(target.connections()).toBe(before)
        }))

      it.scoped("a port outside ATTESTD_WEBHOOK_PORTS is refused", () =>
        Effect.gen(function*() {
          const d = yield* deliverOnceTo(`https://localhost:${target.port + 1}/hook`)
          expect(yield* excerptOf(d.id)).toMatch(/^port \d+ is not allowed/)
        }))
    }
  )

  layer(webhookServiceLayer(dialect, { webhookPorts: ports }), { timeout: Duration.seconds(60) })(
    `webhook delivery in demo mode, the control (${dialect})`,
    (it) => {
      it.scoped("the same webhook connects (demo has no address guard), so the listener counts what it is sent", () =>
        Effect.gen(function*() {
          const before = target.connections()
          const d = yield* deliverOnceTo(`https://localhost:${target.port}/hook`)
          expect(d).toMatchObject({ status: "retrying", attempts: 1 })
          expect(target.connections()).toBeGreaterThan(before)
        }))
    }
  )
}
