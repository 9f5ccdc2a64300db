"""RocketMQ's request signatures, as its clients make them and its brokers check them; the SDK
signs with these and broker_sim checks with the same functions.

- Remoting (AclClientRPCHook): the ext fields ``AccessKey`` and, if any, ``SecurityToken`` are
  added; the values of all ext fields but ``Signature``, in the order of their sorted names, are
  joined, followed by the body; ``Signature`` is the base64 HMAC-SHA1 of that with the secret key.
  A request whose header says version V4_9_3 or older (ours say 0) leaves ``_UNIQUE_KEY_QUERY``
  out of what is signed: RocketMQ 5's brokers check it so (DefaultAuthenticationContextBuilder),
  and RocketMQ 4.9's leave it out whatever the version (PlainAccessValidator), so a query by
  unique key (QUERY_MESSAGE) signed with it is refused by both as a wrong signature.
- gRPC v2 (the proxy's and clients' ``authorization`` header): ``x-mq-date-time`` holds the time
  as ``yyyyMMddTHHmmssZ``; ``authorization`` is ``MQv2-HMAC-SHA1 Credential=AK,
  SignedHeaders=x-mq-date-time, Signature=HEX``, HEX the HMAC-SHA1 of the date-time text. Our own
  gRPC contract uses the same header.

The keys come as ``rmq_spark.Credentials`` (or anything with ``access_key``, ``secret_key`` and
``security_token``).
"""

from __future__ import annotations

import base64
import calendar
import functools
import hashlib
import hmac
import time
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:  # anything with access_key, secret_key and security_token
    from rmq_wire.types import Credentials

ACCESS_KEY = "AccessKey"
SECRET_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SCHEME = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
V4_9_3 = 399  # MQVersion.Version.V4_9_3.ordinal(): up to it, UNIQUE_KEY_QUERY is not signed


def remoting_content(fields: Mapping[str, str], body: bytes | None, version: int = 0) -> bytes:
    """What a remoting signature signs: the field values by sorted name, then the body
    (``version``: the request header's; up to V4_9_3 without UNIQUE_KEY_QUERY)."""
    skipped = (SIGNATURE, UNIQUE_KEY_QUERY) if version <= V4_9_3 else (SIGNATURE,)
    joined = "".join(str(fields[name]) for name in sorted(fields) if name not in skipped)
    return joined.encode() + (body or b"")


def remoting_signature(fields: Mapping[str, str], body: bytes | None, secret_key: str, version: int = 0) -> str:
    digest = hmac.new(secret_key.encode(), remoting_content(fields, body, version), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def sign_remoting(fields: dict, body: bytes | None, credentials: Credentials, version: int = 0) -> dict:
    """``fields`` with AccessKey, SecurityToken (if any) and Signature added (in place), for a
    request whose header says ``version`` (the SDK's say 0)."""
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        fields[SECRET_TOKEN] = credentials.security_token
    fields[SIGNATURE] = remoting_signature(fields, body, credentials.secret_key, version)
    return fields


def date_time(now_s: float | None = None) -> str:
    """``x-mq-date-time`` for ``now_s`` (seconds since the epoch, UTC)."""
    return time.strftime(DATE_TIME_FORMAT, time.gmtime(time.time() if now_s is None else now_s))


@functools.lru_cache(maxsize=1024)  # a client's signature changes once a second: a broker checks many alike
def grpc_signature(date_time_text: str, secret_key: str) -> str:
    return hmac.new(secret_key.encode(), date_time_text.encode(), hashlib.sha1).hexdigest()


def grpc_metadata(credentials: Credentials, now_s: float | None = None) -> tuple:
    """The ``x-mq-date-time`` and ``authorization`` metadata of one call."""
    stamp = date_time(now_s)
    authorization = (f"{SCHEME} Credential={credentials.access_key}, SignedHeaders={DATE_TIME}, "
                     f"Signature={grpc_signature(stamp, credentials.secret_key)}")
    return (DATE_TIME, stamp), (AUTHORIZATION, authorization)


@functools.lru_cache(maxsize=1024)  # the same header for a second
def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, hex signature) of an ``authorization`` value; ValueError saying what is wrong."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise ValueError(f"the authorization header's scheme is {scheme[:40]!r}: {SCHEME} is the one served")
    items = {}
    for item in rest.split(","):
        name, sep, text = item.strip().partition("=")
        if not sep:
            raise ValueError(f"the authorization header's item {item.strip()[:40]!r} is not NAME=VALUE")
        items[name] = text
    access_key = items.get("Credential", "").split("/")[0]
    signature = items.get("Signature", "")
    if not access_key or not signature:
        raise ValueError("the authorization header needs Credential=ACCESS_KEY and Signature=HEX")
    return access_key, signature


@functools.lru_cache(maxsize=1024)
def parse_date_time(text: str) -> float:
    """Seconds since the epoch of an ``x-mq-date-time`` (read as UTC); ValueError if malformed."""
    try:
        return float(calendar.timegm(time.strptime(text, DATE_TIME_FORMAT)))
    except (ValueError, OverflowError, TypeError):
        raise ValueError(f"x-mq-date-time {str(text)[:40]!r} is not yyyyMMddTHHmmssZ") from None
