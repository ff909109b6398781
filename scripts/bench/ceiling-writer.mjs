// The ceiling server's writer thread (CEILING_SQLITE_WRITER=thread, an experiment): a connection of
// its own, one message per group's write (ceiling-write.mjs), answered with its rows or its error.
import { createRequire } from "node:module"
import { parentPort, workerData } from "node:worker_threads"
import { SQLITE_PRAGMAS, sqliteRun, writeGroup } from "./ceiling-write.mjs"

const Database = createRequire(import.meta.url)("better-sqlite3")
const db = new Database(workerData.path)
for (const p of SQLITE_PRAGMAS) db.pragma(p)
const run = sqliteRun(db)
parentPort.on("message", async ({ id, ...group }) => {
  try {
    parentPort.postMessage({ id, ...(await writeGroup(run, { ...group, isPg: false })) })
  } catch (e) {
    parentPort.postMessage({ id, error: String(e?.message ?? e) })
  }
})
