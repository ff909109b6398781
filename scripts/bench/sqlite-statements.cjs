// Preloaded (node --require) into an attestd server by scripts/bench/statements.mjs:
// wraps better-sqlite3 so that every statement the server runs is counted and timed
// (wall µs on the event loop, the driver call alone), and writes the tally to
// $BENCH_STATEMENTS_OUT when the process gets SIGUSR2. COMMIT durations are kept
// one by one for their percentiles (a WAL checkpoint lands inside some commits).
"use strict"
const { writeFileSync } = require("node:fs")
const Database = require("better-sqlite3")

const tally = new Map() // normalised SQL -> { n, us }
const commits = []

const normalise = (sql) => sql.replace(/\s+/g, " ").replace(/\((?:\?,\s*)*\?\)/g, "(…)").trim().slice(0, 100)
const note = (sql, us) => {
  const key = normalise(sql)
  const t = tally.get(key) ?? { n: 0, us: 0 }
  t.n++
  t.us += us
  tally.set(key, t)
  if (/^COMMIT\b/i.test(key)) commits.push(us)
}
const timed = (sql, f) => {
  const t0 = process.hrtime.bigint()
  try {
    return f()
  } finally {
    note(sql, Number(process.hrtime.bigint() - t0) / 1000)
  }
}

const prepare = Database.prototype.prepare
Database.prototype.prepare = function(sql, ...rest) {
  const statement = prepare.call(this, sql, ...rest)
  // run, all and get execute the statement before they return (iterate would only start it)
  for (const method of ["run", "all", "get"]) {
    const original = statement[method]
    statement[method] = function(...args) {
      return timed(sql, () => original.apply(this, args))
    }
  }
  return statement
}
const exec = Database.prototype.exec
Database.prototype.exec = function(sql) {
  return timed(sql, () => exec.call(this, sql))
}

process.on("SIGUSR2", () => {
  const out = process.env.BENCH_STATEMENTS_OUT
  if (!out) return
  writeFileSync(out, JSON.stringify({ statements: [...tally].map(([sql, t]) => ({ sql, ...t })), commits }))
})
