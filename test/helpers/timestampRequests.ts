/** DER TimeStampReqs for the time-stamping authority's tests, and its replies read back. */
import { randomBytes } from "node:crypto"
import * as asn1js from "asn1js"
import * as pkijs from "pkijs"
import { OID, parseTimeStampResponse } from "../../src/Platform/Tsa/Rfc3161.js"

export const MD5_OID = "1.2.840.113549.2.5"

export interface RequestOptions {
  readonly version?: number
  readonly algorithm?: string
  readonly digest?: Uint8Array
  /** INTEGER content octets (two's complement), as sent. */
  readonly nonce?: Uint8Array
  readonly certReq?: boolean
  readonly policy?: string
  readonly extension?: boolean
}

/** A DER TimeStampReq (SHA-256 of 32 random bytes, certReq true unless told). */
export const timestampRequest = (o: RequestOptions = {}): Uint8Array =>
  new Uint8Array(
    new pkijs.TimeStampReq({
      version: o.version ?? 1,
      messageImprint: new pkijs.MessageImprint({
        hashAlgorithm: new pkijs.AlgorithmIdentifier({ algorithmId: o.algorithm ?? OID.sha256, algorithmParams: new asn1js.Null() }),
        hashedMessage: new asn1js.OctetString({ valueHex: o.digest ?? new Uint8Array(randomBytes(32)) })
      }),
      ...(o.policy !== undefined ? { reqPolicy: o.policy } : {}),
      ...(o.nonce !== undefined ? { nonce: new asn1js.Integer({ valueHex: o.nonce }) } : {}),
      certReq: o.certReq ?? true,
      ...(o.extension === true
        ? { extensions: [new pkijs.Extension({ extnID: "1.3.6.1.4.1.311.3.3.1", critical: false, extnValue: new asn1js.Null().toBER() })] }
        : {})
    }).toSchema().toBER()
  )

/** A TimeStampResp read with the service's own parser; throws when it is not one. */
export const readReply = (der: Uint8Array) => parseTimeStampResponse(der)
