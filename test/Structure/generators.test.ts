/**
 * Generator functions on the group paths are written once (src/Platform/Steps.ts
 * stepOf; README, Performance: "Generators made per call"). A generator function
 * created per call (an object literal's generator method, a generator function
 * expression handed to the program runners, one declared inside the Attestor's
 * `program`) kept what it closed over, a group's requests included, alive through
 * every scavenge. Read with TypeScript's parser; nothing is run.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const ROOT = resolve(import.meta.dirname, "../..")

const sources = (dir: string): Array<string> =>
  readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []
  )

/** The calls that take a program or a step's body: a generator function expression there is made per call. */
const RUNNERS = new Set(["runThen", "transaction", "stepOf", "waiting", "runNow"])

const isGenerator = (node: ts.Node): boolean =>
  (ts.isFunctionExpression(node) || ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.asteriskToken !== undefined

/** Each generator function made per call in `file`, as "file:line what". */
export const generatorsMadePerCall = (file: string, text: string): Array<string> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const found: Array<string> = []
  const at = (node: ts.Node, what: string) =>
    found.push(`${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1} ${what}`)
  const visit = (node: ts.Node, insideProgram: boolean) => {
    if (ts.isMethodDeclaration(node) && node.asteriskToken !== undefined && ts.isObjectLiteralExpression(node.parent)) {
      at(node, "a generator method in an object literal")
    }
    if (ts.isCallExpression(node)) {
      const callee = ts.isPropertyAccessExpression(node.expression) ? node.expression.name.text : ts.isIdentifier(node.expression) ? node.expression.text : ""
      if (RUNNERS.has(callee)) for (const arg of node.arguments) if (isGenerator(arg)) at(arg, `a generator function expression passed to ${callee}`)
    }
    if (insideProgram && isGenerator(node)) at(node, "a generator function inside the Attestor's program")
    const entersProgram = ts.isFunctionDeclaration(node) && node.name?.text === "program" && file.endsWith("Attestor.ts")
    ts.forEachChild(node, (child) => visit(child, insideProgram || entersProgram))
  }
  visit(source, false)
  return found
}

describe("generator functions on the group paths", () => {
  it("none is made per call in src/", () => {
    const found = sources("src").flatMap((file) => generatorsMadePerCall(file, readFileSync(join(ROOT, file), "utf8")))
    expect(found).toEqual([])
  })

  it("the check sees each pattern it forbids", () => {
    const text = [
      "const a = () => ({ *[Symbol.iterator]() { yield 1 } })",
      "runThen(function*(run) { yield 1 }, k)",
      "store.transaction(function*() { yield 1 })",
      "function* program() { function* inner() { yield 1 } }",
      "function* fine() { yield 1 }",
      "const b = stepOf(fine, 1)"
    ].join("\n")
    expect(generatorsMadePerCall("src/Attestations/Attestor.ts", text).map((s) => s.replace(/^[^ ]+ /, ""))).toEqual([
      "a generator method in an object literal",
      "a generator function expression passed to runThen",
      "a generator function expression passed to transaction",
      "a generator function inside the Attestor's program"
    ])
  })
})
