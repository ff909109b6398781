/** White-label brand configuration: validated once, served as stored. */
import { Schema } from "effect"

export const BRAND_SLUG_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/
const COLOR = /^#[0-9a-fA-F]{6}$/

const Color = Schema.String.pipe(Schema.pattern(COLOR, { message: () => "colors are #rrggbb" }))

export const LogoUrl = Schema.String.pipe(
  Schema.maxLength(256 * 1024),
  Schema.filter((u) => {
    if (/^data:image\/(png|svg\+xml|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+$/.test(u)) return true
    try {
      return new URL(u).protocol === "https:" || "logo_url must be https:// or a data:image URL"
    } catch {
      return "logo_url must be https:// or a data:image URL"
    }
  })
)

export const Brand = Schema.Struct({
  slug: Schema.String.pipe(Schema.pattern(BRAND_SLUG_PATTERN, { message: () => `slug must match ${BRAND_SLUG_PATTERN.source}` })),
  display_name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  logo_url: Schema.NullOr(LogoUrl),
  colors: Schema.Struct({ primary: Color, secondary: Color, background: Color, text: Color })
}).annotations({ identifier: "Brand" })
export type Brand = typeof Brand.Type
