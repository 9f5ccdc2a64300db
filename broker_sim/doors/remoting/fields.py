"""Reading a request's custom header (its extFields, all strings) as RocketMQ's header classes
declare them: required fields, numbers, booleans, and the short names of the v2 headers."""

from __future__ import annotations

from broker_sim.doors.remoting.errors import HeaderFieldError
from rmq_wire.remoting import RemotingCommand, RequestCode

# SendMessageRequestHeaderV2's one-letter names (RocketMQ shortens the hottest header).
SEND_V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
                 "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
                 "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
_REQUIRED = object()


class Fields:
    """The header fields of ``request``; a missing required or malformed field raises
    HeaderFieldError naming the field, the request and what to send."""

    def __init__(self, request: RemotingCommand, names: dict | None = None):
        ext = request.ext_fields
        self.values = {names.get(k, k): v for k, v in ext.items()} if names else ext
        self.code = request.code

    def text(self, name: str, default=_REQUIRED) -> str:
        value = self.values.get(name)
        if value is None:
            if default is _REQUIRED:
                raise HeaderFieldError(f"the {self._request()} header has no {name}: it is a required field")
            return default
        return value

    def integer(self, name: str, default=_REQUIRED) -> int:
        value = self.values.get(name)
        if value is None or value == "":
            if default is _REQUIRED:
                raise HeaderFieldError(f"the {self._request()} header has no {name}: it is a required number")
            return default
        try:
            return int(value)
        except ValueError:
            raise HeaderFieldError(f"the {self._request()} header's {name} is {value[:40]!r}, not a number") from None

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean: "true" as Java writes it, "1" as the C++ client does."""
        value = self.values.get(name)
        return default if value is None else value.lower() in ("true", "1")

    def _request(self) -> str:
        try:
            return RequestCode(self.code).name
        except ValueError:
            return f"request {self.code}"
