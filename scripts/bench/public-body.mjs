#!/usr/bin/env node
// Issue 11 §2: what a stranger's large body costs, measured against a built
// tree (dist/ by default; BENCH_DIST=/path/to/other/dist for a before/after).
//
//   node scripts/bench/public-body.mjs
//   BENCH_DIST=/tmp/old/dist node scripts/bench/public-body.mjs
//
// On one SQLite server (workers off):
// 1. the answer to a 1 MB JSON array sent to POST /v1/verify, and to a 7 MB
//    body ({list_key, values: <7 MB string>}) sent to POST
//    /v1/derived-lists/{id}/match for a live and an unknown list, and a 3.9 MB
//    one (under the match limit) to the live list: status, bytes out, ms;
// 2. a legitimate POST /v1/attest's latency (median, p90 of BENCH_ATTESTS
//    sequential calls, default 60) alone, then while BENCH_ATTACKERS (2)
//    anonymous connections (from a child process of their own, so they do not
//    share the timed client's event loop) keep posting that 7 MB body to the live list's
//    match (then the 3.9 MB one); and the server's peak RSS during each phase.
import { execFile, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import http from "node:http"
import * as path from "node:path"
import { BIN, envInt, killAllChildren, randomHashHex, ROOT, snapshotBuild, startAttestd } from "./lib.mjs"
import { quantile } from "./stats.mjs"

const ATTESTS = envInt("BENCH_ATTESTS", 60)
const ATTACKERS = envInt("BENCH_ATTACKERS", 2)

snapshotBuild(process.env.BENCH_DIST ?? path.join(ROOT, "dist"))

const keysCreate = (env, scopes, org) =>
  new Promise((resolve, reject) => {
    const childEnv = { ...process.env, ...env }
    for (const [k, v] of Object.entries(childEnv)) if (v === undefined) delete childEnv[k]
    delete childEnv.PORT
    execFile(process.execPath, [BIN, "keys", "create", "--label", "bench", "--scopes", scopes, "--org", org], { env: childEnv }, (err, stdout) => {
      if (err) return reject(err)
      resolve(JSON.parse(stdout.trim().split("\n").reverse().find((l) => l.startsWith("{"))).key)
    })
  })

/** One request over a fresh connection; resolves with status, bytes out and time, or the socket error. */
const send = (base, method, pathname, body, headers = {}) =>
  new Promise((resolve) => {
    const started = performance.now()
    const url = new URL(pathname, base)
    const data = typeof body === "string" ? Buffer.from(body) : body
    const req = http.request(url, {
      method,
      agent: false,
      headers: { "content-type": "application/json", "content-length": String(data?.length ?? 0), ...headers }
    }, (res) => {
      let bytes = 0
      const parts = []
      res.on("data", (c) => {
        bytes += c.length
        if (parts.length < 4) parts.push(c)
      })
      res.on("end", () => resolve({ status: res.statusCode, bytesOut: bytes, ms: performance.now() - started, head: Buffer.concat(parts).toString("utf8").slice(0, 160) }))
      res.on("error", (e) => resolve({ status: res.statusCode, error: e.code ?? e.message, ms: performance.now() - started }))
    })
    req.on("error", (e) => resolve({ status: 0, error: e.code ?? e.message, ms: performance.now() - started }))
    if (data) req.end(data)
    else req.end()
  })

const rssOf = (pid) => {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m ? Number(m[1]) / 1024 : NaN
  } catch {
    return NaN
  }
}


/**
 * The attackers run in a child process of their own, so their uploads do not
 * share an event loop with the legitimate client being timed. It posts `size`
 * bytes ({list_key, values: "aaa…"}) to `target` over ATTACKERS connections in
 * a loop and prints how many requests it made when told to stop.
 */
const ATTACKER = `
const http = require("node:http")
const [target, listKey, size, n] = process.argv.slice(1)
const body = Buffer.from(JSON.stringify({ list_key: listKey, values: "a".repeat(Number(size)) }))
let stop = false, count = 0
process.on("message", () => { stop = true })
const once = () => new Promise((resolve) => {
  const req = http.request(target, { method: "POST", agent: false, headers: { "content-type": "application/json", "content-length": String(body.length) } }, (res) => { res.resume(); res.on("end", resolve); res.on("error", resolve) })
  req.on("error", resolve)
  req.end(body)
})
const loop = async () => { while (!stop) { await once(); count++ } }
Promise.all(Array.from({ length: Number(n) }, loop)).then(() => { process.send(count, () => process.exit(0)) })
process.send("ready")
`

const startAttackers = (target, listKey, size) => {
  const child = spawn(process.execPath, ["-e", ATTACKER, target, listKey, String(size), String(ATTACKERS)], { stdio: ["ignore", "inherit", "inherit", "ipc"] })
  const ready = new Promise((resolve) => child.once("message", resolve))
  const stop = () => new Promise((resolve) => {
    child.once("message", resolve)
    child.send("stop")
  })
  return { ready, stop }
}

const latencyPhase = async (server, key, attack) => {
  let peak = rssOf(server.pid)
  const sampler = setInterval(() => (peak = Math.max(peak, rssOf(server.pid))), 50)
  const attackers = attack ? startAttackers(...attack) : undefined
  // let the attack reach its steady state before measuring
  if (attackers) {
    await attackers.ready
    await new Promise((r) => setTimeout(r, 1000))
  }
  const times = []
  for (let i = 0; i < ATTESTS; i++) {
    const r = await send(server.url, "POST", "/v1/attest", JSON.stringify({ hash_hex: randomHashHex() }), { authorization: `Bearer ${key}` })
    if (r.status !== 201) throw new Error(`attest answered ${r.status} ${r.error ?? r.head}`)
    times.push(r.ms)
  }
  const attacks = attackers ? await attackers.stop() : 0
  clearInterval(sampler)
  return { median_ms: +quantile(times, 0.5).toFixed(1), p90_ms: +quantile(times, 0.9).toFixed(1), peak_rss_mb: Math.round(peak), attack_requests: attacks }
}

const main = async () => {
  // The public rate limit off, to measure the route itself: "0" (the default
  // here) turns it off; BENCH_PUBLIC_RATE_LIMIT= (empty) leaves it unset, which
  // is "off" for builds older than the documented default limit.
  const limit = process.env.BENCH_PUBLIC_RATE_LIMIT ?? "0"
  const server = await startAttestd({
    name: "public-body",
    serveArgs: ["--no-workers"],
    env: { ATTESTD_PUBLIC_RATE_LIMIT: limit === "" ? undefined : limit }
  })
  try {
    const key = await keysCreate(server.env, "attest,census", "bench-org")
    const listRes = await fetch(`${server.url}/v1/derived-lists`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ hashes: [randomHashHex()], expires_in_hours: 1 })
    })
    const list = await listRes.json()
    if (listRes.status !== 201) throw new Error(`derived list: ${listRes.status} ${JSON.stringify(list)}`)
    const array1mb = JSON.stringify(Array.from({ length: 500_000 }, () => 0))
    const body7mb = JSON.stringify({ list_key: list.list_key, values: "a".repeat(7_000_000) })
    // the largest body the match route still reads (its limit is about 3.8 MiB)
    const body39 = JSON.stringify({ list_key: list.list_key, values: "a".repeat(3_900_000) })
    const single = {
      verify_1mb_array: await send(server.url, "POST", "/v1/verify", array1mb),
      match_live_7mb: await send(server.url, "POST", `/v1/derived-lists/${list.id}/match`, body7mb),
      match_unknown_7mb: await send(server.url, "POST", "/v1/derived-lists/dl_unknown/match", body7mb),
      match_live_3_9mb: await send(server.url, "POST", `/v1/derived-lists/${list.id}/match`, body39)
    }
    for (const r of Object.values(single)) delete r.head
    const alone = await latencyPhase(server, key, undefined)
    const matchUrl = `${server.url}/v1/derived-lists/${list.id}/match`
    const attacked = await latencyPhase(server, key, [matchUrl, list.list_key, 7_000_000])
    const attacked39 = await latencyPhase(server, key, [matchUrl, list.list_key, 3_900_000])
    const result = {
      dist: process.env.BENCH_DIST ?? "dist",
      bytes_in: { verify_1mb_array: array1mb.length, match_7mb: body7mb.length, match_3_9mb: body39.length },
      single,
      legit_attest: {
        alone,
        [`with_${ATTACKERS}_anonymous_7mb_matches`]: attacked,
        [`with_${ATTACKERS}_anonymous_3_9mb_matches`]: attacked39
      }
    }
    console.log(JSON.stringify(result, null, 2))
  } finally {
    await server.stop()
  }
}

main().catch((e) => {
  console.error(e)
  killAllChildren()
  process.exit(1)
})
