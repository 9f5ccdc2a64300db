"""Reading the JSON bodies of requests (HeartbeatData, LockBatchRequestBody) as RocketMQ's
classes declare them: a field of another type than its class declares is refused with a
BrokerFault naming it, rather than failing somewhere inside the door."""

from __future__ import annotations

from broker_sim.core import BrokerFault, Reason, refused


def objects(body: dict, name: str, what: str) -> list[dict]:
    """The array of objects ``body[name]`` (absent or null: empty)."""
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _refused(f"the {what}'s {name} is not an array of objects: send it as RocketMQ's clients do")
    return value


def text(body: dict, name: str, what: str, default: str = "") -> str:
    """The string ``body[name]`` (absent or null: ``default``)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _refused(f"the {what}'s {name} is {_json_type(value)}, not a string")
    return value


def integer(body: dict, name: str, what: str, default: int) -> int:
    """The integer ``body[name]`` (absent or null: ``default``)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise _refused(f"the {what}'s {name} is {_json_type(value)}, not an integer")
    return value


def _json_type(value) -> str:
    """"a string", "an array", ... as JSON names the type of ``value``."""
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _refused(sentence: str) -> BrokerFault:
    return refused(Reason.INVALID_ARGUMENT, sentence)
