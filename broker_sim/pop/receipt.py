"""Receipt handles: what an ack or a change of invisible time names, signed so that they
cannot be forged.

A handle carries the popped unit's state-store key (kind, visibility deadline, group, topic,
queue, offset), the pop's nonce, count and reconsume times, and a keyed BLAKE2b tag (a MAC,
16 bytes) under a broker secret kept in the data directory, all as base64. Acking
needs no parsing: the key is in the handle. A handle whose record was acked, revived, or moved
by ChangeInvisibleDuration finds no record with its nonce: it has expired.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import struct
from binascii import a2b_base64, b2a_base64
from pathlib import Path
from typing import NamedTuple

from broker_sim.common.files import write_atomically
from broker_sim.pop.errors import InvalidReceiptHandle
from broker_sim.pop.state import PopCheckpoint, decode_key

VERSION = 1
_HEAD = struct.Struct(">Bqii")  # version, nonce, count, reconsume times
_TAG_BYTES = 16
_SMALLEST_KEY = 1 + 8 + 2 + 12  # kind, deadline, "@" twice, queue and offset
SECRET_BYTES = 32


class Receipt(NamedTuple):
    """What a handle names: the state-store key of its record and the pop's nonce."""

    key: bytes
    nonce: int
    count: int
    reconsume_times: int

    def belongs_to(self, group: bytes) -> bool:
        """Whether the key's group is ``group`` (its name as bytes followed by '@')."""
        return self.key.startswith(group, 9) and self.key[9 + len(group):10 + len(group)] == b"@"

    def describe(self) -> str:
        """"'topic' queue 3 offset 12", for sentences."""
        _orderly, _deadline, _group, topic, queue_id, offset = decode_key(self.key)
        return f"{topic!r} queue {queue_id} offset {offset}"


class ReceiptSigner:
    """Signs checkpoints into receipt handles and opens handles back into their keys."""

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
            secret = os.urandom(SECRET_BYTES)
            write_atomically(path, secret, mode=0o600)
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"receipt secret {path} holds {len(secret)} bytes, not {SECRET_BYTES}: it is damaged; "
                             "remove it (handles given out so far then stop working)")
        return cls(secret)

    def sign(self, key: bytes, ck: PopCheckpoint) -> str:
        """The handle of the record ``key`` holding ``ck``."""
        payload = _HEAD.pack(VERSION, ck.nonce, ck.count, ck.reconsume_times) + key
        tag = hashlib.blake2b(payload, key=self._secret, digest_size=_TAG_BYTES).digest()
        return b2a_base64(payload + tag, newline=False).decode()

    def open(self, handle: str) -> Receipt:
        """What a handle names; raises InvalidReceiptHandle for anything this broker did not sign."""
        try:
            raw = a2b_base64(handle)
        except (binascii.Error, ValueError, TypeError):
            raise InvalidReceiptHandle("the receipt handle is not base64: pass the handle a pop returned, "
                                       "unchanged") from None
        if len(raw) < _HEAD.size + _SMALLEST_KEY + _TAG_BYTES:
            raise InvalidReceiptHandle(f"the receipt handle is {len(raw)} bytes, too short to be one: pass the handle "
                                       "a pop returned, unchanged")
        payload, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, hashlib.blake2b(payload, key=self._secret, digest_size=_TAG_BYTES).digest()):
            raise InvalidReceiptHandle("the receipt handle was not issued by this broker (its signature does not "
                                       "match): pass the handle a pop of this broker returned, unchanged")
        version, nonce, count, reconsume = _HEAD.unpack_from(payload)
        if version != VERSION:
            raise InvalidReceiptHandle(f"receipt handle version {version} is not supported")
        return Receipt(payload[_HEAD.size:], nonce, count, reconsume)

