// The baseline: a bare node:http server answering a fixed small JSON to every
// GET and POST (POST bodies are read to the end, not parsed). Run as its own
// process so it does not share an event loop with the load generator.
//   PORT=8081 node scripts/bench/bare-server.mjs
import { createServer } from "node:http"

const body = Buffer.from(JSON.stringify({ exists: true, hash_hex: "0".repeat(64), level: "T0" }))
const headers = { "content-type": "application/json", "content-length": String(body.length) }

const server = createServer((req, res) => {
  if (req.method === "GET" || req.method === "HEAD") {
    res.writeHead(200, headers)
    res.end(req.method === "HEAD" ? undefined : body)
    return
  }
  req.on("data", () => {})
  req.on("end", () => {
    res.writeHead(200, headers)
    res.end(body)
  })
})

server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? "127.0.0.1", () => {
  console.log(`bare server on ${JSON.stringify(server.address())}`)
})

const stop = () => server.close(() => process.exit(0))
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
