/**
 * The import graph keeps its shape. No files import each other in a circle.
 * No folders of src/ import each other in a circle either (a failure names the
 * file imports that tie the circle). Browser code (src/Verify, src/Domain,
 * src/Client, web/) reaches no node:* module and no Buffer through any chain of
 * runtime imports. The platform, SQL and CLI packages are imported module by module, never
 * through their index: an index re-exports every module of its package (`export * as`), and
 * esbuild keeps them all in every bundle that imports it (the Swagger UI's 1.9 MB, undici and
 * ws were loaded by each CLI command). Reads the sources with TypeScript's parser: nothing is run.
 */
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { builtinModules } from "node:module"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")
const NODE_BUILTINS = new Set(builtinModules)
const PORTABLE = ["src/Verify/", "src/Domain/", "src/Client/", "web/"]

interface SourceFile {
  /** path from the repository root, with forward slashes */
  readonly path: string
  readonly text: string
}

const listTs = (dir: string): Array<string> =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listTs(`${dir}/${e.name}`) : e.name.endsWith(".ts") ? [`${dir}/${e.name}`] : []
  )

const readSources = (): Array<SourceFile> =>
  ["src", "web"].flatMap(listTs).map((path) => ({ path, text: readFileSync(join(ROOT, path), "utf8") }))

const parsed = new WeakMap<SourceFile, { readonly imports: Array<Import>; readonly buffers: Array<number> }>()

interface Import {
  /** a path from the repository root for a relative import, else the module name */
  readonly target: string
  readonly local: boolean
  /** erased from the JavaScript (`import type`, `export type`, every named import a type, `import("m").T`) */
  readonly typeOnly: boolean
}

/** A file's imports: static, re-exports, `import()` with a literal, and type-only ones (marked). */
const importsOf = (file: SourceFile): Array<Import> => {
  const cached = parsed.get(file)
  if (cached !== undefined) return cached.imports
  const source = ts.createSourceFile(file.path, file.text, ts.ScriptTarget.Latest, true)
  const found: Array<Import> = []
  const add = (specifier: ts.Node | undefined, typeOnly: boolean) => {
    if (specifier === undefined || !ts.isStringLiteral(specifier)) return
    const name = specifier.text
    const local = name.startsWith(".")
    const target = local
      ? relative(ROOT, resolve(ROOT, dirname(file.path), name)).split("\\").join("/").replace(/\.js$/, ".ts")
      : name
    found.push({ target, local, typeOnly })
  }
  const walk = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause
      const named = clause?.namedBindings
      const allTypes = clause !== undefined && (clause.isTypeOnly ||
        (clause.name === undefined && named !== undefined && ts.isNamedImports(named) && named.elements.length > 0 &&
          named.elements.every((e) => e.isTypeOnly)))
      add(node.moduleSpecifier, allTypes)
    } else if (ts.isExportDeclaration(node)) add(node.moduleSpecifier, node.isTypeOnly)
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node.arguments[0], false)
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) add(node.argument.literal, true)
    ts.forEachChild(node, walk)
  }
  walk(source)
  parsed.set(file, { imports: found, buffers: bufferUses(source) })
  return found
}

/**
 * `src/Auth/Http.ts` -> `src/Auth`, `web/verifier/main.ts` -> `web`. The files at
 * the top of src/ (Api.ts assembles every feature's contract and each feature's
 * handlers implement it; main.ts wires them) stand above the folders and are no
 * folder of their own.
 */
const folderOf = (path: string): string | undefined => {
  const parts = path.split("/")
  return parts[0] !== "src" ? parts[0] : parts.length > 2 ? `src/${parts[1]}` : undefined
}

interface Edge {
  readonly from: string
  readonly to: string
}

/** The circles of a graph: its strongly connected groups of two or more nodes (Tarjan). */
const circles = (edges: ReadonlyArray<Edge>): Array<Array<string>> => {
  const graph = new Map<string, Set<string>>()
  for (const { from, to } of edges) {
    if (!graph.has(from)) graph.set(from, new Set())
    if (!graph.has(to)) graph.set(to, new Set())
    graph.get(from)!.add(to)
  }
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const groups: Array<Array<string>> = []
  const visit = (v: string) => {
    index.set(v, index.size)
    low.set(v, index.get(v)!)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) === index.get(v)) {
      const group: Array<string> = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        group.push(w)
      } while (w !== v)
      if (group.length > 1) groups.push(group.sort())
    }
  }
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v)
  return groups
}

/** The file imports between two folders of src/ that lie on a circle of folders, by folder pair (`A -> B`). */
const folderTiesOnCircles = (edges: ReadonlyArray<Edge>): Map<string, Array<string>> => {
  const between = edges.flatMap((e) => {
    const from = folderOf(e.from)
    const to = folderOf(e.to)
    return from !== undefined && to !== undefined && from !== to ? [{ from, to, file: e }] : []
  })
  const groupOf = new Map(circles(between).flatMap((group, i) => group.map((folder) => [folder, i] as const)))
  const ties = new Map<string, Array<string>>()
  for (const { file, from, to } of between) {
    if (groupOf.get(from) === undefined || groupOf.get(from) !== groupOf.get(to)) continue
    const pair = `${from} -> ${to}`
    ties.set(pair, [...(ties.get(pair) ?? []), `${file.from} -> ${file.to}`])
  }
  return new Map([...ties].sort(([a], [b]) => a.localeCompare(b)))
}

/** Lines where a file names the identifier `Buffer` in code (comments and strings do not count). */
const bufferUses = (source: ts.SourceFile): Array<number> => {
  const lines: Array<number> = []
  const walk = (node: ts.Node) => {
    if (ts.isIdentifier(node) && node.text === "Buffer") lines.push(source.getLineAndCharacterOfPosition(node.getStart()).line + 1)
    ts.forEachChild(node, walk)
  }
  walk(source)
  return lines
}

/** Each portable file's transitive imports that name node:* or Buffer, as `chain: problem`. */
const portabilityProblems = (files: ReadonlyArray<SourceFile>): Array<string> => {
  const byPath = new Map(files.map((f) => [f.path, f]))
  const problems = new Set<string>()
  for (const start of files.filter((f) => PORTABLE.some((p) => f.path.startsWith(p)))) {
    const seen = new Set<string>([start.path])
    const queue: Array<Array<string>> = [[start.path]]
    while (queue.length > 0) {
      const chain = queue.shift()!
      const file = byPath.get(chain[chain.length - 1]!)
      if (file === undefined) continue
      const runtime = importsOf(file).filter((i) => !i.typeOnly)
      for (const i of runtime.filter((i) => !i.local && (i.target.startsWith("node:") || NODE_BUILTINS.has(i.target)))) {
        problems.add(`${chain.join(" -> ")}: imports ${i.target}`)
      }
      for (const line of parsed.get(file)!.buffers) problems.add(`${chain.join(" -> ")}: uses Buffer on line ${line}`)
      for (const next of runtime.filter((i) => i.local).map((i) => i.target)) {
        if (!seen.has(next)) {
          seen.add(next)
          queue.push([...chain, next])
        }
      }
    }
  }
  return [...problems].sort()
}

/** Packages whose index re-exports every module (with their migrators, for the SQL drivers): imported by module path ("@effect/platform/HttpClient"). */
const BARRELS = new Set(["@effect/platform", "@effect/platform-node", "@effect/sql", "@effect/sql-pg", "@effect/sql-sqlite-node", "@effect/cli"])

/** Runtime imports of a BARRELS index, as `file -> package`. */
const barrelImports = (files: ReadonlyArray<SourceFile>): Array<string> =>
  files.flatMap((f) => importsOf(f).filter((i) => !i.typeOnly && BARRELS.has(i.target)).map((i) => `${f.path} -> ${i.target}`))

const sources = readSources()
const edges = sources.flatMap((f) => importsOf(f).filter((i) => i.local).map((i) => ({ from: f.path, to: i.target })))


describe("import structure", () => {
  it("reads the tree: every relative import names a source file that exists", () => {
    const paths = new Set(sources.map((f) => f.path))
    expect(sources.length).toBeGreaterThan(100)
    expect(edges.length).toBeGreaterThan(300)
    expect(edges.filter((e) => !paths.has(e.to)).map((e) => `${e.from} -> ${e.to}`)).toEqual([])
  })

  it("no files import each other in a circle", () => {
    expect(circles(edges)).toEqual([])
  })

  it("no folders of src/ import each other in a circle", () => {
    const ties = folderTiesOnCircles(edges)
    expect([...ties].map(([pair, imports]) => ({ pair, imports }))).toEqual([])
  })

  it("browser code (src/Verify, src/Domain, src/Client, web/) reaches no node:* module and no Buffer", () => {
    expect(portabilityProblems(sources)).toEqual([])
  })

  it("imports @effect/platform, platform-node, sql, sql-pg, sql-sqlite-node and cli by module, never through their index", () => {
    expect(barrelImports(sources)).toEqual([])
  })

  describe("the checks can fail", () => {
    it("finds an import of a package's index, and leaves module paths and type-only imports alone", () => {
      expect(barrelImports([
        { path: "src/A.ts", text: `import { HttpClient } from "@effect/platform"\nimport * as Command from "@effect/cli/Command"` },
        { path: "src/B.ts", text: `import type { HttpApp } from "@effect/platform"\nimport * as NodeContext from "@effect/platform-node/NodeContext"` }
      ])).toEqual(["src/A.ts -> @effect/platform"])
    })

    it("finds a circle of files", () => {
      const e = edges.find((e) => e.from.startsWith("src/Domain/"))!
      expect(circles([...edges, { from: e.to, to: e.from }])).toEqual([[e.from, e.to].sort()])
    })

    it("finds a new circle through folders and names the imports that tie it", () => {
      // Auth already reaches Domain; this import closes a circle
      const ties = folderTiesOnCircles([...edges, { from: "src/Domain/T0.ts", to: "src/Auth/Domain.ts" }])
      expect(ties.get("src/Domain -> src/Auth")).toEqual(["src/Domain/T0.ts -> src/Auth/Domain.ts"])
    })

    it("finds node:* and Buffer reached through an import chain, and ignores type-only imports", () => {
      const problems = portabilityProblems([
        { path: "src/Domain/A.ts", text: `import { b } from "./B.js"\nimport type { D } from "../Platform/D.js"\nexport const a = b` },
        { path: "src/Domain/B.ts", text: `import { c } from "../Platform/C.js"\nexport const b = c` },
        { path: "src/Platform/C.ts", text: `import { hash } from "node:crypto"\nexport const c = Buffer.from(hash)` },
        { path: "src/Platform/D.ts", text: `import { hash } from "node:crypto"\nexport type D = typeof hash` },
        { path: "web/x/main.ts", text: `// Buffer in a comment is fine\nexport const s = "node:fs and Buffer in a string"` }
      ])
      expect(problems).toEqual([
        "src/Domain/A.ts -> src/Domain/B.ts -> src/Platform/C.ts: imports node:crypto",
        "src/Domain/A.ts -> src/Domain/B.ts -> src/Platform/C.ts: uses Buffer on line 2",
        "src/Domain/B.ts -> src/Platform/C.ts: imports node:crypto",
        "src/Domain/B.ts -> src/Platform/C.ts: uses Buffer on line 2"
      ])
    })
  })
})
