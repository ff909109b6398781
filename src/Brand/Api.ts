/** HTTP contract of white-label brands (public). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { NotFoundEnvelope } from "../Http/Envelope.js"
import { Brand } from "./Domain.js"

export class BrandApi extends HttpApiGroup.make("brand")
  .add(
    HttpApiEndpoint.get("brand", "/brand/:slug")
      .setPath(Schema.Struct({ slug: Schema.String }))
      .addSuccess(Brand)
      .annotate(OpenApi.Summary, "Brand configuration by slug (public); set with `attestd brand set SLUG --file brand.json`")
  )
  .addError(NotFoundEnvelope)
  .annotate(OpenApi.Title, "Brand")
{}
