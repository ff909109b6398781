/** Handler of brand lookups. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { NotFound } from "../Domain/Errors.js"
import { BrandRepo } from "./Repo.js"

export const BrandLive = HttpApiBuilder.group(Api, "brand", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* BrandRepo
    return handlers.handle("brand", ({ path }) =>
      Effect.flatMap(Effect.orDie(repo.get(path.slug)), (b) =>
        b ? Effect.succeed(b) : Effect.fail(new NotFound({ message: `brand ${path.slug.slice(0, 80)} not found` }))))
  }))
