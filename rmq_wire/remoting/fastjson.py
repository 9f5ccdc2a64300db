"""RocketMQ's JSON bodies as its Java side writes them (fastjson), which is not always JSON:
a map keyed by numbers comes out with bare keys (a route's ``brokerAddrs``: ``{0:"host:port"}``)
and a map keyed by objects with the objects as keys (``TopicStatsTable.offsetTable``:
``{{"brokerName":"a","queueId":0,"topic":"t"}:{...}}``).

``loads`` reads both: JSON proper at orjson's speed, and otherwise a small descent parser in
which a bare number key becomes its string (as JSON would have written it) and an object key
becomes a tuple of its sorted (name, value) items (hashable; ``dict(key)`` gives it back; arrays
inside it become tuples too).
"""

from __future__ import annotations

import json
import re

import orjson

_SCALAR = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
# RocketMQ's bodies nest a few levels; a peer's deeper nesting is refused before Python's stack is.
MAX_DEPTH = 100


def loads(body: bytes | str):
    """The value of a body RocketMQ wrote; ValueError saying where it is malformed."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray, memoryview)) else body
    value, end = _value(text, _skip(text, 0), 0)
    if _skip(text, end) != len(text):
        raise ValueError(f"unexpected text after the value at character {end}")
    return value


def _skip(text: str, at: int) -> int:
    return _SPACE.match(text, at).end()


def _value(text: str, at: int, depth: int):
    if at >= len(text):
        raise ValueError("the body ends where a value should start")
    char = text[at]
    if char in "{[" and depth >= MAX_DEPTH:
        raise ValueError(f"the body nests objects and arrays deeper than {MAX_DEPTH} levels at character {at}")
    if char == "{":
        return _object(text, at, depth + 1)
    if char == "[":
        return _array(text, at, depth + 1)
    try:
        return _SCALAR.raw_decode(text, at)
    except json.JSONDecodeError as err:
        raise ValueError(f"not a value at character {at}: {err.msg}") from None


def _object(text: str, at: int, depth: int):
    out = {}
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        return out, at + 1
    while True:
        key, at = _value(text, at, depth)
        at = _expect(text, _skip(text, at), ":")
        value, at = _value(text, _skip(text, at), depth)
        out[_as_key(key)] = value
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("}", at):
            return out, at + 1
        else:
            raise ValueError(f"expected ',' or '}}' at character {at}")


def _array(text: str, at: int, depth: int):
    out = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return out, at + 1
    while True:
        value, at = _value(text, at, depth)
        out.append(value)
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("]", at):
            return out, at + 1
        else:
            raise ValueError(f"expected ',' or ']' at character {at}")


def _expect(text: str, at: int, char: str) -> int:
    if not text.startswith(char, at):
        raise ValueError(f"expected {char!r} at character {at}")
    return at + 1


def _as_key(key):
    if isinstance(key, dict):
        return tuple(sorted(((name, _hashable(value)) for name, value in key.items()), key=_by_name))
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return str(key)
    if isinstance(key, str):
        return key
    raise ValueError(f"a map key of type {type(key).__name__}")


def _by_name(item) -> tuple:
    """An object key's items in name order; a name that is itself an object key (a tuple) sorts
    after the strings rather than being compared with them."""
    name = item[0]
    return isinstance(name, tuple), str(name)


def _hashable(value):
    """A value inside an object key: objects as sorted item tuples, arrays as tuples."""
    if isinstance(value, dict):
        return _as_key(value)
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    return value
