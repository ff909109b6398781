/** Every migration, in order. Keys are `<id>_<name>` as @effect/sql's Migrator expects. */
import foundation from "./0001_foundation.js"

export const migrations = {
  "0001_foundation": foundation
}
