/**
 * ownContext (src/Server/GroupContext.ts): an API group's layer is built in a context of
 * only the services it names, so the context HttpApiBuilder merges into each of its
 * requests holds those and not the whole application's. Every service the layer requires
 * must be named: leaving one out is a type error.
 */
import { Context, Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { ownContext } from "../../src/Server/GroupContext.js"

class A extends Context.Tag("test/A")<A, string>() {}
class B extends Context.Tag("test/B")<B, string>() {}
class Optional extends Context.Tag("test/Optional")<Optional, string>() {}
class Seen extends Context.Tag("test/Seen")<Seen, ReadonlyArray<string>>() {}

/** A layer that requires A and reports the keys of the context it is built in. */
const reporting: Layer.Layer<Seen, never, A> = Layer.effect(
  Seen,
  Effect.map(Effect.context<A>(), (context) => [...context.unsafeMap.keys()].sort())
)

const seenWith = (layer: Layer.Layer<Seen, never, A>) =>
  Effect.runSync(Effect.provide(Seen, layer.pipe(Layer.provide(Layer.mergeAll(
    Layer.succeed(A, "a"),
    Layer.succeed(B, "b"),
    Layer.succeed(Optional, "o")
  )))))

describe("ownContext", () => {
  it("builds the layer in a context of the named services only", () => {
    const memoMap = Layer.CurrentMemoMap.key
    expect(seenWith(reporting)).toEqual([memoMap, "test/A", "test/B", "test/Optional"])
    // the build's memo map stays: a layer provided inside is built once
    expect(seenWith(ownContext(reporting, A))).toEqual([memoMap, "test/A"])
    // a service read as optional is named beside the required ones
    expect(seenWith(ownContext(reporting, A, Optional))).toEqual([memoMap, "test/A", "test/Optional"])
  })

  it("leaves out a named service the application does not provide", () => {
    const withoutOptional = Effect.runSync(Effect.provide(Seen, ownContext(reporting, A, Optional).pipe(Layer.provide(Layer.succeed(A, "a")))))
    expect(withoutOptional).toEqual([Layer.CurrentMemoMap.key, "test/A"])
  })

  it("refuses, as a type error, a list that leaves out a required service", () => {
    // @ts-expect-error A is required by the layer and not named
    const unnamed = () => ownContext(reporting, B)
    expect(typeof unnamed).toBe("function")
  })
})
