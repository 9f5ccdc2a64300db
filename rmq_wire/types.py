"""The types both products speak in: a topic's queue type, an account's credentials, the ids of
an inner batch's messages, the rule for transaction and sink ids. ``rmq_spark.structs``
re-exports them."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmq_wire.errors import ConfigError

SECRET_KEY_VARIABLE = "RMQ_SECRET_KEY"
# Transaction and sink ids: the broker refuses others, the SDK checks them before sending.
TRANSACTION_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:@+=-]{1,255}$")
TRANSACTION_ID_RULE = "1 to 255 letters, digits or . _ : @ + = -"
MAX_OFFSETS_WAIT_MS = 30_000  # the longest a long-polling offsets request (GetOffsetsRequest.wait_ms) waits


@dataclass(frozen=True)
class Credentials:
    """An account's keys, for brokers that check ACLs (RocketMQ's SessionCredentials): every
    call is signed with them. The secret never shows in a ``repr``, so it stays out of logs and
    query plans."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str = field(default="", repr=False)

    def __post_init__(self):
        if not self.access_key or not self.secret_key:
            raise ConfigError("credentials need both an access key and a secret key")

    @classmethod
    def from_environment(cls, access_key: str) -> "Credentials":
        """``access_key`` with the secret of the environment variable RMQ_SECRET_KEY (kept out of
        command lines, which other users of the machine can see, and of options)."""
        secret_key = os.environ.get(SECRET_KEY_VARIABLE, "")
        if not secret_key:
            raise ConfigError(f"access key {access_key!r} needs its secret key: set the environment variable "
                              f"{SECRET_KEY_VARIABLE}")
        return cls(access_key, secret_key)


class QueueType(str, enum.Enum):
    """How a topic is indexed, fixed at creation: a unit per batch, or a unit per message."""

    BATCH_CQ = "BatchCQ"
    SIMPLE_CQ = "SimpleCQ"

    @classmethod
    def parse(cls, value: "QueueType | str") -> "QueueType":
        for member in cls:
            if value == member or str(value).lower() == member.value.lower():
                return member
        raise ConfigError(f"unknown queue type {value!r}; use BatchCQ or SimpleCQ")


class InnerBatchIds(Sequence):
    """The message ids of an inner batch's messages: its record's id with the message's index
    appended (``record_id-i``), made when asked for, so that an answer carries one id for
    the batch rather than a string per message."""

    __slots__ = ("record_id", "count")

    def __init__(self, record_id: str, count: int):
        self.record_id = record_id
        self.count = count

    def __len__(self) -> int:
        return self.count

    def at(self, indexes) -> list[str]:
        """The ids of the messages at ``indexes`` (each within the batch), made together."""
        record_id = self.record_id
        return [f"{record_id}-{i}" for i in indexes]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.at(range(*index.indices(self.count)))
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"message {index} of an inner batch of {self.count}")
        return f"{self.record_id}-{index}"

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return f"InnerBatchIds({self.record_id!r}, {self.count})"
