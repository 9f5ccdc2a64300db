"""Receipt handles: what an ack or a change of invisible time names, signed so that they
cannot be forged.

A handle carries the popped unit's key fields (orderly or not, visibility deadline, group,
topic, queue, offset) and the pop's nonce, followed by an HMAC-SHA256 tag (16 bytes) under a
broker secret kept in the data directory, as URL-safe base64. A handle whose record was acked,
revived, or moved by ChangeInvisibleDuration finds no record with its nonce: it has expired.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import struct
from pathlib import Path

from .errors import InvalidReceiptHandle
from .state import Checkpoint

VERSION = 1
_FIXED = struct.Struct(">BBqiqiiqB")  # version, flags, deadline, queue, offset, count, reconsume, nonce, group length
_TAG_BYTES = 16
_ORDERLY_FLAG = 1
SECRET_BYTES = 32


class ReceiptSigner:
    """Signs checkpoints into receipt handles and opens handles back into their fields."""

    def __init__(self, secret: bytes):
        if len(secret) < 16:
            raise ValueError("a receipt secret needs at least 16 bytes")
        self._secret = secret

    @classmethod
    def from_file(cls, path) -> "ReceiptSigner":
        """The signer of the secret in ``path``, made (random, mode 0600) on first use."""
        path = Path(path)
        try:
            secret = path.read_bytes()
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            secret = os.urandom(SECRET_BYTES)
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, secret)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"receipt secret {path} holds {len(secret)} bytes, not {SECRET_BYTES}: it is damaged; "
                             "remove it (handles given out so far then stop working)")
        return cls(secret)

    def sign(self, ck: Checkpoint) -> str:
        group = ck.group.encode()
        payload = b"".join((_FIXED.pack(VERSION, _ORDERLY_FLAG if ck.orderly else 0, ck.deadline_ms, ck.queue_id,
                                        ck.offset, ck.count, ck.reconsume_times, ck.nonce, len(group)),
                            group, ck.topic.encode()))
        tag = hmac.digest(self._secret, payload, "sha256")[:_TAG_BYTES]
        return base64.urlsafe_b64encode(payload + tag).decode()

    def open(self, handle: str) -> Checkpoint:
        """The checkpoint a handle names (pop time and failures unknown: 0); raises
        InvalidReceiptHandle for anything this broker did not sign."""
        try:
            raw = base64.urlsafe_b64decode(handle)
        except (binascii.Error, ValueError, TypeError):
            raise InvalidReceiptHandle("the receipt handle is not base64: pass the handle a pop returned, "
                                       "unchanged") from None
        if len(raw) < _FIXED.size + _TAG_BYTES:
            raise InvalidReceiptHandle(f"the receipt handle is {len(raw)} bytes, too short to be one: pass the handle "
                                       "a pop returned, unchanged")
        payload, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, hmac.digest(self._secret, payload, "sha256")[:_TAG_BYTES]):
            raise InvalidReceiptHandle("the receipt handle was not issued by this broker (its signature does not "
                                       "match): pass the handle a pop of this broker returned, unchanged")
        version, flags, deadline, queue_id, offset, count, reconsume, nonce, group_len = _FIXED.unpack_from(payload)
        if version != VERSION:
            raise InvalidReceiptHandle(f"receipt handle version {version} is not supported")
        rest = payload[_FIXED.size:]
        group, topic = rest[:group_len].decode(), rest[group_len:].decode()
        return Checkpoint(bool(flags & _ORDERLY_FLAG), deadline, group, topic, queue_id, offset, count, reconsume,
                          nonce, 0)
