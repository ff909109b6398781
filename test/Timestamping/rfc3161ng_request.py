"""Requests a token from URL with rfc3161ng (python3-rfc3161ng) and prints what it parsed.

rfc3161ng verifies only RSA tokens, so this asks for a granted reply and parses it;
the ECDSA signature is checked by the other clients of the suite.
"""
import sys

import rfc3161ng

timestamper = rfc3161ng.RemoteTimestamper(sys.argv[1], hashname="sha256", include_tsa_certificate=True)
reply = timestamper(data=b"attestd via rfc3161ng", nonce=424242, return_tsr=True)
token = reply.time_stamp_token
info = token.tst_info
print(
    "status", int(reply["status"]["status"]),
    "nonce", int(info["nonce"]),
    "serial", format(int(info["serialNumber"]), "x"),
    "policy", str(info["policy"]),
    "time", rfc3161ng.get_timestamp(token).isoformat(),
)
