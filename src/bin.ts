#!/usr/bin/env node
/** The `attestd` executable: the commands of Cli.ts on this process's argv. */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { cli } from "./Cli.js"
import { LoggingLive } from "./Platform/Logging.js"

cli(process.argv).pipe(Effect.provide(NodeContext.layer), Effect.provide(LoggingLive({ toStderr: !["serve", "worker"].includes(process.argv[2] ?? "") })), NodeRuntime.runMain({ disableErrorReporting: false, disablePrettyLogger: true }))
