/**
 * Checks an operation makes before the edge reads its body, so a request that
 * will fail anyway (a public match against an unknown list) is answered
 * without reading and parsing megabytes. Keyed by OpenAPI operationId; each
 * gets the route's path parameters. A feature provides its gates as a layer.
 */
import { Context, type Effect } from "effect"
import type { ApiError } from "../Domain/Errors.js"

export type BodyGate = (params: Readonly<Record<string, string>>) => Effect.Effect<void, ApiError>

/** Every route's gate, by operationId; a server provides them (Census/ListGate.ts), a route without one has none. */
export class BodyGates extends Context.Tag("Http/BodyGates")<BodyGates, ReadonlyMap<string, BodyGate>>() {}
