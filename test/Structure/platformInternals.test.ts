/**
 * Nothing in src/ patches node or the platform. A method replaced on a node
 * object (`incoming.destroy = …`, `socket.destroySoon = …`), a prototype
 * method called on another object (`NetServer.prototype.close.call(server)`)
 * or a private field read (`socket._httpMessage`) works until an upgrade turns
 * it off silently; the public APIs (events, `end`, `resume`, `setHeader`,
 * server options) say what they do. Read with TypeScript's parser, nothing is
 * run:
 *
 * - no assignment to a property named like a method of node's streams,
 *   sockets, servers or emitters;
 * - no `.prototype` outside type positions;
 * - no property whose name starts with `_` (but `_tag` and `_op`, the
 *   discriminants of Effect's data types, which their public types declare);
 * - none of node's undocumented fields named in the issue that asked for this
 *   (`shouldKeepAlive`; `connectionsCheckingInterval` is a server option, given
 *   to createServer, not a field to set).
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")

/** Methods of node's streams, sockets, servers and emitters: replacing one is a patch. */
const NODE_METHODS: ReadonlySet<string> = new Set([
  "addListener",
  "address",
  "close",
  "closeAllConnections",
  "closeIdleConnections",
  "connect",
  "cork",
  "destroy",
  "destroySoon",
  "emit",
  "end",
  "flushHeaders",
  "getHeader",
  "listen",
  "off",
  "on",
  "once",
  "pause",
  "pipe",
  "prependListener",
  "push",
  "read",
  "ref",
  "removeAllListeners",
  "removeHeader",
  "removeListener",
  "resume",
  "setEncoding",
  "setHeader",
  "setKeepAlive",
  "setNoDelay",
  "setTimeout",
  "uncork",
  "unpipe",
  "unref",
  "write",
  "writeContinue",
  "writeHead"
])

/** `_`-prefixed names that are public: the discriminants of Effect's data types. */
const PUBLIC_UNDERSCORE: ReadonlySet<string> = new Set(["_tag", "_op"])

/** Undocumented fields of node objects. */
const PRIVATE_FIELDS: ReadonlySet<string> = new Set(["shouldKeepAlive", "connectionsCheckingInterval"])

interface Finding {
  readonly line: number
  readonly what: string
}

const isAssignment = (node: ts.Node): node is ts.BinaryExpression =>
  ts.isBinaryExpression(node) && node.operatorToken.kind >= ts.SyntaxKind.FirstAssignment &&
  node.operatorToken.kind <= ts.SyntaxKind.LastAssignment

/** The name a property access or a literal element access reads, if any. */
const accessedName = (node: ts.Node): string | undefined => {
  if (ts.isPropertyAccessExpression(node)) return node.name.text
  if (ts.isElementAccessExpression(node) && ts.isStringLiteralLike(node.argumentExpression)) return node.argumentExpression.text
  return undefined
}

/** Whether `node` sits in a type (`typeof x.prototype`, a type annotation), where nothing runs. */
const inType = (node: ts.Node): boolean => {
  for (let n: ts.Node | undefined = node.parent; n !== undefined; n = n.parent) {
    if (ts.isTypeNode(n)) return true
    if (ts.isStatement(n) || ts.isClassElement(n)) return false
  }
  return false
}

/** The patches and private reads in one source text (see the file's comment for what counts). */
const patchesOf = (path: string, text: string): Array<Finding> => {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true)
  const found: Array<Finding> = []
  const lineOf = (node: ts.Node) => source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1
  const walk = (node: ts.Node) => {
    if (isAssignment(node)) {
      const name = accessedName(node.left)
      if (name !== undefined && NODE_METHODS.has(name)) found.push({ line: lineOf(node), what: `assigns .${name}` })
    }
    const name = accessedName(node)
    if (name !== undefined && !inType(node)) {
      if (name === "prototype") found.push({ line: lineOf(node), what: "uses .prototype" })
      else if (name.startsWith("_") && !PUBLIC_UNDERSCORE.has(name)) found.push({ line: lineOf(node), what: `reads .${name}` })
      else if (PRIVATE_FIELDS.has(name)) found.push({ line: lineOf(node), what: `uses .${name}` })
    }
    ts.forEachChild(node, walk)
  }
  walk(source)
  return found
}

const listTs = (dir: string): Array<string> =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listTs(`${dir}/${e.name}`) : e.name.endsWith(".ts") ? [`${dir}/${e.name}`] : []
  )

describe("no patched platform internals", () => {
  it("src/ replaces no method of a node object, calls no prototype method, reads no private field", () => {
    const found = listTs("src").flatMap((path) =>
      patchesOf(path, readFileSync(join(ROOT, path), "utf8")).map((f) => `${path}:${f.line} ${f.what}`)
    )
    expect(found).toEqual([])
  })

  it("the reader finds each kind of patch, and leaves public APIs and our own objects alone", () => {
    const text = [
      "incoming.destroy = ((e) => incoming) as typeof incoming.destroy",
      "socket.destroySoon = () => {}",
      "NetServer.prototype.close.call(server)",
      "const res = socket._httpMessage",
      "res.shouldKeepAlive = false",
      "server[\"_connections\"]++",
      "server.connectionsCheckingInterval = 10",
      "const s = createServer({ connectionsCheckingInterval: 10 }, handler)",
      "res.setHeader(\"connection\", \"close\")",
      "process.exitCode = 1",
      "server.maxConnections = 100",
      "options.fetch = async () => new Response()",
      "if (exit._tag === \"Success\") {}",
      "type M = typeof Map.prototype.get"
    ].join("\n")
    expect(patchesOf("example.ts", text)).toEqual([
      { line: 1, what: "assigns .destroy" },
      { line: 2, what: "assigns .destroySoon" },
      { line: 3, what: "uses .prototype" },
      { line: 4, what: "reads ._httpMessage" },
      { line: 5, what: "uses .shouldKeepAlive" },
      { line: 6, what: "reads ._connections" },
      { line: 7, what: "uses .connectionsCheckingInterval" }
    ])
  })
})
