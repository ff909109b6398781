/**
 * Module-level state is declared. A binding at the top of a module is shared
 * by everything that imports it in one process: by two servers in one test
 * worker (the unit files share their workers, vitest.config.ts), by the CLI
 * and the server, by the sealer and the HTTP API. State there is a choice that
 * needs a reason, so every such binding in src/ is listed below with one, and
 * a new one fails this file until it is added (or moved into a service).
 *
 * What counts, read with TypeScript's parser (nothing is run): a top-level
 * `let` or `var`; a top-level `const` holding a new mutable collection (Map,
 * Set, WeakMap, WeakSet, an array literal or a typed array) unless its declared
 * type is Readonly or the array is `as const` (then the compiler keeps it
 * constant); and a top-level `const` whose properties are assigned or
 * incremented anywhere in its module. State
 * held in a closure returned by a call at the top level (`keepingLast` in
 * src/Domain/Time.ts) is not seen.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")

/**
 * "path name" → why sharing it across everything in the process is sound. Empty:
 * caches, limits, the simulated chain and the loggers' lines live in the
 * services and layers that own them.
 */
const DECLARED: Readonly<Record<string, string>> = {}

const MUTABLE_CLASSES = new Set([
  "Map",
  "Set",
  "WeakMap",
  "WeakSet",
  "Array",
  "Uint8Array",
  "Uint16Array",
  "Uint32Array",
  "Int8Array",
  "Int16Array",
  "Int32Array",
  "Float32Array",
  "Float64Array",
  "BigInt64Array",
  "BigUint64Array"
])

interface ModuleState {
  readonly name: string
  readonly line: number
  readonly kind: "let" | "collection" | "mutated object"
}

const isReadonlyType = (type: ts.TypeNode | undefined): boolean =>
  type !== undefined &&
  (ts.isTypeOperatorNode(type) && type.operator === ts.SyntaxKind.ReadonlyKeyword ||
    ts.isTypeReferenceNode(type) && /^Readonly/.test(type.typeName.getText()))

/** The target of `x.p = …`, `x.p += …`, `x.p++`, `x[k] = …`: the identifier x, if any. */
const assignedObject = (node: ts.Node): string | undefined => {
  let target: ts.Expression | undefined
  if (ts.isBinaryExpression(node) && node.operatorToken.kind >= ts.SyntaxKind.FirstAssignment &&
    node.operatorToken.kind <= ts.SyntaxKind.LastAssignment) {
    target = node.left
  } else if ((ts.isPostfixUnaryExpression(node) || ts.isPrefixUnaryExpression(node)) &&
    (node.operator === ts.SyntaxKind.PlusPlusToken || node.operator === ts.SyntaxKind.MinusMinusToken)) {
    target = node.operand
  }
  while (target !== undefined && (ts.isPropertyAccessExpression(target) || ts.isElementAccessExpression(target))) {
    const inner: ts.Expression = target.expression
    if (ts.isIdentifier(inner)) return inner.text
    target = inner
  }
  return undefined
}

/** The module-level state of one source text (see the file's comment for what counts). */
const moduleStateOf = (path: string, text: string): Array<ModuleState> => {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true)
  const found: Array<ModuleState> = []
  const objects = new Map<string, number>()
  const lineOf = (node: ts.Node) => source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1
  for (const statement of source.statements) {
    if (!ts.isVariableStatement(statement)) continue
    const constant = (statement.declarationList.flags & ts.NodeFlags.Const) !== 0
    for (const d of statement.declarationList.declarations) {
      if (!ts.isIdentifier(d.name)) continue
      const name = d.name.text
      const init = d.initializer
      if (!constant) {
        found.push({ name, line: lineOf(d), kind: "let" })
      } else if (init !== undefined && ts.isNewExpression(init) && ts.isIdentifier(init.expression) &&
        MUTABLE_CLASSES.has(init.expression.text) && !isReadonlyType(d.type)) {
        found.push({ name, line: lineOf(d), kind: "collection" })
      } else if (init !== undefined && ts.isArrayLiteralExpression(init) && !isReadonlyType(d.type)) {
        found.push({ name, line: lineOf(d), kind: "collection" })
      } else if (init !== undefined && ts.isObjectLiteralExpression(init)) {
        objects.set(name, lineOf(d))
      }
    }
  }
  const mutated = new Set<string>()
  const walk = (node: ts.Node) => {
    const name = assignedObject(node)
    if (name !== undefined && objects.has(name)) mutated.add(name)
    ts.forEachChild(node, walk)
  }
  walk(source)
  for (const name of mutated) found.push({ name, line: objects.get(name)!, kind: "mutated object" })
  return found
}

const listTs = (dir: string): Array<string> =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listTs(`${dir}/${e.name}`) : e.name.endsWith(".ts") ? [`${dir}/${e.name}`] : []
  )

describe("module-level state", () => {
  const found = listTs("src").flatMap((path) =>
    moduleStateOf(path, readFileSync(join(ROOT, path), "utf8")).map((s) => ({ ...s, key: `${path} ${s.name}`, path }))
  )

  it("every binding that holds state at the top of a module in src/ is declared with a reason", () => {
    const undeclared = found.filter((s) => DECLARED[s.key] === undefined).map((s) => `${s.path}:${s.line} ${s.name} (${s.kind})`)
    expect(undeclared).toEqual([])
  })

  it("every declared binding still exists (the list does not go stale)", () => {
    const present = new Set(found.map((s) => s.key))
    expect(Object.keys(DECLARED).filter((k) => !present.has(k))).toEqual([])
  })

  it("the reader finds each kind of state, and leaves constants and function-local state alone", () => {
    const text = [
      "let count = 0",
      "var legacy = 1",
      "const cache = new Map<string, number>()",
      "const table: ReadonlyMap<string, number> = new Map([[\"a\", 1]])",
      "const frozen: ReadonlySet<string> = new Set([\"a\"])",
      "const stats = { hits: 0 }",
      "const config = { depth: 2 }",
      "const shape = { n: 1 }",
      "export const hit = () => { stats.hits++; shape.n; let local = 0; const m = new Map(); local += m.size; return local }",
      "const reset = () => { config[\"depth\"] = 3 }",
      "const names = [\"a\"]",
      "const fixed: ReadonlyArray<string> = [\"a\"]",
      "const literal = [\"a\"] as const"
    ].join("\n")
    expect(moduleStateOf("example.ts", text)).toEqual([
      { name: "count", line: 1, kind: "let" },
      { name: "legacy", line: 2, kind: "let" },
      { name: "cache", line: 3, kind: "collection" },
      { name: "names", line: 11, kind: "collection" },
      { name: "stats", line: 6, kind: "mutated object" },
      { name: "config", line: 7, kind: "mutated object" }
    ])
  })
})
