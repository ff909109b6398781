/**
 * The service's semver. A constant, not a read of package.json, so the contract
 * (src/Api.ts) and the clients stay portable (no node:*); test/Client/effectClient.test.ts
 * fails when it differs from package.json's version.
 */
export const PACKAGE_VERSION = "0.1.0"

/** Set by scripts/bundle.mjs (esbuild define) in the bundled CLI and the single executable. */
declare const __ATTESTD_VERSION__: string | undefined

export const SERVICE_VERSION: string = typeof __ATTESTD_VERSION__ === "string" ? __ATTESTD_VERSION__ : PACKAGE_VERSION
