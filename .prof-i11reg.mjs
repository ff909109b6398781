import { readFileSync } from "node:fs"
import { parseImportLine } from "./dist/Attestations/Import.js"
const lines = readFileSync("/tmp/i11-10k.jsonl", "utf8").split("\n").filter(Boolean)
const now = BigInt(Date.now()) * 1000n
let t = performance.now()
for (const [i, l] of lines.entries()) parseImportLine(l, i + 1, now)
console.log("parse+verify", (performance.now() - t).toFixed(0), "ms")
