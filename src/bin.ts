#!/usr/bin/env node
/** The `attestd` executable: the commands of Cli.ts on this process's argv. */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect } from "effect"
import { cli } from "./Cli.js"
import { LoggingLive } from "./Platform/Logging.js"

// The server logs every event; a one-shot command speaks through its own output, so its
// log shows warnings and errors only (ATTESTD_LOG_LEVEL still sets it).
const serving = ["serve", "worker"].includes(process.argv[2] ?? "")
const logging = serving
  ? LoggingLive({ toStderr: false })
  : LoggingLive({ toStderr: true }, { ...process.env, ATTESTD_LOG_LEVEL: process.env.ATTESTD_LOG_LEVEL ?? "warning" })

cli(process.argv).pipe(Effect.provide(NodeContext.layer), Effect.provide(logging), NodeRuntime.runMain({ disableErrorReporting: false, disablePrettyLogger: true }))
