/** Brand configurations by slug. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Brand } from "./Domain.js"

export class BrandRepo extends Effect.Service<BrandRepo>()("Brand/BrandRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const put = (brand: Brand, now: string) =>
      sql`INSERT INTO brands (slug, config, updated_at) VALUES (${brand.slug}, ${JSON.stringify(brand)}, ${now})
        ON CONFLICT (slug) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at`
    const get = (slug: string) =>
      Effect.map(sql<{ config: string }>`SELECT config FROM brands WHERE slug = ${slug}`, (rows) =>
        rows[0] ? (JSON.parse(rows[0].config) as Brand) : undefined)
    return { put, get }
  })
}) {}
