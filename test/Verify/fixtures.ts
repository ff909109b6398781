/**
 * Real evidence bundles for the verification cases (test/Verify/cases.ts):
 * an in-process server (sqlite, fast windows, demo TSA) anchoring through an
 * HTTP simulated calendar mined explicitly. The fixtures are plain JSON, so
 * the same cases can run in a browser.
 */
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { Duration } from "effect"
import { mineHeader } from "../../src/Domain/BitcoinHeader.js"
import { bytesToHex } from "../../src/Domain/Bytes.js"
import { type SimulatedCalendarServer, startSimulatedCalendarServer } from "../helpers/simulatedCalendarServer.js"
import { poll } from "../helpers/anchoring.js"
import { client, randomHash, startTestServer, type TestServer } from "../helpers/server.js"
import type { Fixtures } from "./cases.js"

export const FAST = {
  sealInterval: Duration.millis(300),
  anchorInterval: Duration.seconds(1),
  otsUpgradeInterval: Duration.millis(300)
}

export interface LiveFixtures {
  readonly fixtures: Fixtures
  readonly server: TestServer
  readonly calendar: SimulatedCalendarServer
  readonly close: () => Promise<void>
}

export const makeFixtures = async (): Promise<LiveFixtures> => {
  const calendar = await startSimulatedCalendarServer()
  const server = await startTestServer("sqlite", { ...FAST, otsCalendars: [calendar.url] })
  const { key } = await server.createKey()
  const api = client(server.url, key)
  const data = new TextEncoder().encode(`attestd verify fixture ${randomHash()}\n`)
  const hashHex = createHash("sha256").update(data).digest("hex")
  // three leaves, so that the batch proof has steps
  const created = await api.post("/v1/attest/batch", { hashes: [hashHex, randomHash(), randomHash()] })
  if (created.status !== 200) throw new Error(`attest: HTTP ${created.status}`)
  const id = (created.body.attestations as Array<{ id: string; hash_hex: string }>).find((a) => a.hash_hex === hashHex)!.id
  const pub = client(server.url)
  const evidence = async () => (await pub.get(`/v1/attestation/${id}/evidence`)).body
  const t1 = await poll("T1", async () => {
    const b = await evidence()
    return b.level === "T1" ? b : undefined
  }, 15_000)
  await poll("calendar submission", async () => {
    const r = await pub.get(`/v1/attestation/${id}/ots`)
    return r.status === 200 && r.body.ots_available === true
  }, 15_000)
  const block = calendar.mine()
  const t2 = await poll("T2", async () => {
    const b = await evidence()
    return b.level === "T2" ? b : undefined
  }, 15_000)
  // The block header: the server's own when it carries one, else a real 80-byte header mined over the block's merkle root.
  const header: string = typeof t2.t2.bitcoinBlockHeader === "string"
    ? t2.t2.bitcoinBlockHeader
    : bytesToHex(mineHeader({ prevBlockHash: "00".repeat(32), merkleRoot: block.merkleRoot, time: Math.floor(Date.now() / 1000) }))
  t2.t2.bitcoinBlockHeader = header
  const height = String(block.height)
  const t0 = { id: t2.id, hash_hex: t2.hash_hex, level: "T0", t0: t2.t0 }
  const keys = (await pub.get("/v1/keys")).body.keys
  const tsaCaPem = readFileSync(join(server.db.dataDir, "demo-tsa", "root.pem"), "utf8")
  return {
    fixtures: {
      dataHex: bytesToHex(data),
      t0,
      t1,
      t2,
      keys,
      tsaCaPem,
      height,
      bitcoinHeaders: { [height]: header },
      otsHeaders: { [height]: block.merkleRoot }
    },
    server,
    calendar,
    close: async () => {
      await server.close()
      await calendar.close()
    }
  }
}
