"""A real RocketMQ's ACL refusals, as one sentence of ours: which account was refused, why, and
what to do, in place of the broker's remark.

- RocketMQ 5 (ACL 2.0, ``authenticationEnabled`` / ``authorizationEnabled``) answers NO_PERMISSION
  with its AuthenticationException's or AuthorizationException's message: ``username cannot be
  null.``, ``User:bob is not found.``, ``check signature failed.``, ``User:alice has no permission
  to access Topic:orders from 127.0.0.1, no matched policies.``
- RocketMQ 4 (ACL 1.0, ``aclEnable`` and plain_acl.yml) refuses in an RPC hook whose AclException
  the remoting layer answers as SYSTEM_ERROR with Java text: ``org.apache.rocketmq.acl.common.
  AclException: No acl config for bob, org.apache.rocketmq.acl.plain.PlainPermissionManager.
  validate(PlainPermissionManager.java:667)``; its messages: ``No accessKey is configured``, ``No
  acl config for bob``, ``Check signature failed for accessKey=alice``, ``No default permission
  for topic:orders``, ``Need admin permission for request code=17, but accessKey=alice is not``.

A remark not among these (broker_sim's own sentences, or another refusal) is left as it is.
"""

from __future__ import annotations

import re

from rmq_spark.errors import AuthenticationError, PermissionDeniedError, RmqError

_UNSIGNED = ("the broker checks ACLs and the request was not signed: give the account's accessKey and secretKey "
             "(rmq-admin: --access-key and RMQ_SECRET_KEY)")
_WRONG_SECRET = "the signature does not match the secret key the broker holds for {0}: check secretKey"
_UNKNOWN = "access key {0!r} is not an account of the broker: check accessKey, or ask the broker's admin to create it"
_DISABLED = "account {0!r} is disabled on the broker: ask the broker's admin to enable it"
_DENIED = ("the account{0} may not use {1} {2!r}: ask the broker's admin to grant it (RocketMQ 5: mqadmin createAcl; "
           "RocketMQ 4: its topicPerms or groupPerms in plain_acl.yml)")
_ADMIN_ONLY = "account {0!r} is not an admin of the broker, and this request is for admins: use an admin account"

# (pattern of the broker's message, error class, our sentence of the pattern's groups)
_RULES = [
    # RocketMQ 5, ACL 2.0
    (r"username cannot be null", AuthenticationError, _UNSIGNED),
    (r"User:(.+?) is not found", AuthenticationError, _UNKNOWN),
    (r"User:(.+?) is disabled", AuthenticationError, _DISABLED),
    (r"User:(.+?) has no permission to access (Topic|Group|Cluster):(.*?) from ", PermissionDeniedError, _DENIED),
    # RocketMQ 4, ACL 1.0
    (r"No accessKey is configured", AuthenticationError, _UNSIGNED),
    (r"No acl config for (\S+?),? ", AuthenticationError, _UNKNOWN),
    (r"No PlainAccessResource for accessKey=(\S+?),? ", AuthenticationError, _UNKNOWN),
    (r"Check signature failed for accessKey=(\S+?),? ", AuthenticationError, _WRONG_SECRET),
    (r"Need admin permission for request code=\d+, but accessKey=(\S+?) is not", PermissionDeniedError, _ADMIN_ONLY),
]
_V4_DENIED = re.compile(r"No default permission for (topic|group):(\S+?),? ")


def acl_refusal(remark: str | None, what: str) -> RmqError | None:
    """Our error for a real RocketMQ's ACL refusal of ``what`` (``remark`` its answer's), or None
    if the remark is not one."""
    text = (remark or "") + " "
    if text.startswith("check signature failed"):  # RocketMQ 5 does not name the account
        return AuthenticationError(f"{what}: {_WRONG_SECRET.format('the access key given')}", reason=remark)
    for pattern, cls, sentence in _RULES:
        found = re.search(pattern, text)
        if found:
            parts = [part.lower() if part in ("Topic", "Group", "Cluster") else part for part in found.groups()]
            if sentence is _WRONG_SECRET:
                parts[0] = f"access key {parts[0]!r}"
            elif sentence is _DENIED:
                parts[0] = f" {parts[0]!r}"
            return cls(f"{what}: {sentence.format(*parts)}", reason=remark)
    found = _V4_DENIED.search(text)
    if found:  # ACL 1.0 names the resource only, as topic:NAME or group:NAME
        kind, name = found.groups()
        return PermissionDeniedError(f"{what}: {_DENIED.format('', kind, name)}", reason=remark)
    return None
