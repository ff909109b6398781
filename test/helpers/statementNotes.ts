/** A tracer that notes the SQL of each span @effect/sql opens (`db.query.text`), for tests that hold a statement sequence. */
import { Effect, Tracer } from "effect"

export const queryTextTracer = (note: (text: string) => void): Tracer.Tracer => {
  const native = Effect.runSync(Effect.tracer)
  return Tracer.make({
    span: (...args) => {
      const span = native.span(...args)
      const attribute = span.attribute.bind(span)
      span.attribute = (key, value) => {
        if (key === "db.query.text") note(String(value))
        attribute(key, value)
      }
      return span
    },
    context: native.context
  })
}
