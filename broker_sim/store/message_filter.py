"""Tag filtering, RocketMQ's MessageFilter: the tagsCode stored in SimpleCQ/BatchCQ units and
the "TagA || TagB" subscription expression. The one place for these rules in broker_sim."""

from __future__ import annotations

import struct

from rmq_wire import record as fmt

_TAGS_KEY = fmt.PROPERTY_TAGS.encode()

_tags_codes: dict[bytes, int] = {}


def tags_code(tags: bytes | None) -> int:
    """RocketMQ's tagsCode of a TAGS value (0 without tags), cached: it runs per record on dispatch."""
    if not tags:
        return 0
    code = _tags_codes.get(tags)
    if code is None:
        if len(_tags_codes) > 65536:
            _tags_codes.clear()
        code = _tags_codes[tags] = fmt.java_string_hash(tags.decode())
    return code


class TagFilter:
    """RocketMQ's tag subscription "TagA || TagB": a record passes when its TAGS property is one
    of the tags. The index unit's tags code is compared first, as RocketMQ's broker does, then
    the record's TAGS exactly, as its client does (hashes collide)."""

    def __init__(self, tags: list[str]):
        self.tags = {t.encode() for t in tags}
        self.codes = {fmt.java_string_hash(t) for t in tags}

    @classmethod
    def parse(cls, expression: str) -> "TagFilter | None":
        """None for everything ("", "*", as SubscriptionData); ValueError for an expression naming no tag."""
        text = expression.strip()
        if not text or text == "*":
            return None
        tags = [t for t in (t.strip() for t in text.split("||")) if t]
        if not tags:
            # the caller names the expression, cut to its own length rules
            raise ValueError('names no tag: write "TagA || TagB", or "*" for all')
        return cls(tags)

    def matches(self, batch) -> bool:
        """Whether a stored batch (tags_code, data: a view of its record) passes."""
        if batch.tags_code not in self.codes:
            return False
        return record_tags(batch.data) in self.tags


def record_tags(record) -> bytes | None:
    """The TAGS property of a stored record (a view of it), without decoding the rest."""
    (body_len,) = struct.unpack_from(">i", record, fmt.BODYLEN_AT)
    at = fmt.HEADER.size + body_len
    topic_len = record[at]
    return fmt.find_property(bytes(record[at + 3 + topic_len:]), _TAGS_KEY)
