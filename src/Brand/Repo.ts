/** Brand configurations by slug. */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Effect, Schema } from "effect"
import { orUndefined } from "../Platform/Rows.js"
import { Brand } from "./Domain.js"

/** The configuration is stored as the JSON of the validated Brand. */
const BrandRow = Schema.Struct({ config: Schema.parseJson(Brand) })

export class BrandRepo extends Effect.Service<BrandRepo>()("Brand/BrandRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const put = (brand: Brand, now: string) =>
      sql`INSERT INTO brands (slug, config, updated_at) VALUES (${brand.slug}, ${JSON.stringify(brand)}, ${now})
        ON CONFLICT (slug) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at`
    const find = SqlSchema.findOne({
      Request: Schema.String,
      Result: BrandRow,
      execute: (slug) => sql`SELECT config FROM brands WHERE slug = ${slug}`
    })
    const get = (slug: string) => Effect.map(orUndefined(find(slug)), (row) => row?.config)
    return { put, get }
  })
}) {}
