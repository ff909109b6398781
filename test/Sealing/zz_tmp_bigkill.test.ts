import { it, expect } from "vitest"
import { createDatabase } from "../helpers/databases.js"
import { freePort, startServe, createKeyCli, checkSealingInvariants, randomHex32, sleep, withDb } from "../helpers/process.js"
for (const d of ["sqlite", "pg"] as const) it(`big kill ${d}`, async () => {
  const db = await createDatabase(d)
  const env = { databaseUrl: db.url, dataDir: db.dataDir, port: await freePort(), sealInterval: "3s" }
  const key = await createKeyCli(env)
  for (let round = 0; round < 4; round++) {
    const p = await startServe(env)
    // fill a backlog
    const t0 = Date.now()
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let i = 0; i < 45; i++) {
        const r = await fetch(`${p.url}/v1/attest/batch`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: JSON.stringify({ hashes: Array.from({ length: 100 }, randomHex32) }) })
        await r.text()
      }
    }))
    const fill = Date.now() - t0
    // wait for the next 3s boundary, then kill a bit after it
    const now = Date.now(); const boundary = Math.ceil(now / 3000) * 3000
    const delay = boundary - now + Math.floor(Math.random() * 400)
    await sleep(delay)
    await p.kill("SIGKILL")
    const snap = await checkSealingInvariants(db.url)
    console.log(d, round, "fill", fill, "ms; after kill", delay - (boundary - now), "ms past boundary:", snap.attestations, "stored,", snap.byLevel.T0, "T0,", snap.batches, "batches", snap.violations.slice(0, 3))
    expect(snap.violations).toEqual([])
  }
  await db.drop()
}, 300000)
