/**
 * The context an API group is built in. HttpApiBuilder gives every request to a group's
 * handlers the context its layer was built in, merged into the request's own: a copy of
 * that context per request. Built in the application's context, a group's holds every
 * service of the application (some sixty); built by `ownContext`, only those it names.
 */
import { Context, Effect, Layer } from "effect"

/** The services of `R` that `Tags` leave out, or never. */
type Missing<R, Tags extends ReadonlyArray<Context.Tag<any, any>>> = Exclude<R, Context.Tag.Identifier<Tags[number]>>

/**
 * `layer` (an API group) built in a context of only `tags`. Every service the layer
 * requires must be among them, which the type checks: one left out is an error naming it.
 * A service the group reads as optional (`Effect.serviceOption`) is not in its type and
 * must be named too; a tag the application does not provide is left out.
 */
export const ownContext = <A, E, R, const Tags extends ReadonlyArray<Context.Tag<any, any>>>(
  layer: Layer.Layer<A, E, R>,
  ...tags: Tags & ([Missing<R, Tags>] extends [never] ? unknown : { readonly missing: Missing<R, Tags> })
): Layer.Layer<A, E, R> => {
  // and the build's memo map, so that a layer provided inside the group's build is still built once
  const pick = Context.pick(Layer.CurrentMemoMap, ...tags)
  // locallyEffect's declared signature swaps the build effect's parameters: the function it
  // takes receives the layer's build (Effect<Context<A>, E, R>) and returns the same.
  const narrow = (build: Effect.Effect<Context.Context<A>, E, R>) => Effect.mapInputContext(build, (context: Context.Context<R>) => pick(context) as Context.Context<R>)
  return Layer.locallyEffect(layer, narrow as never)
}
