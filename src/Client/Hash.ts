/** Streamed SHA-256 of a Blob or a web ReadableStream (portable; @noble/hashes). */
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex } from "../Domain/Bytes.js"

export const hashStream = async (stream: ReadableStream<Uint8Array>): Promise<string> => {
  const h = sha256.create()
  const reader = stream.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    h.update(value)
  }
  return bytesToHex(h.digest())
}

export const hashBlob = (blob: Blob): Promise<string> => hashStream(blob.stream() as ReadableStream<Uint8Array>)
