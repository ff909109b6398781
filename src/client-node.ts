/** `attestd/client/node`: Node-only helpers beside the portable client. */
import { createReadStream } from "node:fs"
import { Readable } from "node:stream"
import { hashStream } from "./Client/Hash.js"

/** Streamed SHA-256 (hex) of the file at `path`; the file is never held whole in memory. */
export const hashFile = (path: string): Promise<string> =>
  hashStream(Readable.toWeb(createReadStream(path)) as unknown as ReadableStream<Uint8Array>)
