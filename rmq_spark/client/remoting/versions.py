"""Which RocketMQ a broker runs, as the broker itself says, and what its version lacks.

Every remoting answer carries in its header's ``version`` the version of the RocketMQ that
answered: the ordinal of RocketMQ's ``MQVersion.Version`` (4.9.7 answers 407). From 4.0.0 on the
ordinals are regular: each x.y.z is x.y.z-SNAPSHOT then x.y.z, with y and z from 0 to 9, so
4.0.0-SNAPSHOT is 212 and 5.0.0-SNAPSHOT 412. An answer with a smaller ordinal is not taken for
any version (broker_sim's remoting door echoes the request's, 0): such a broker is asked as if it
had every feature, and its own refusals say what it lacks.

What RocketMQ 4 lacks, read from 4.9.7's broker: topic attributes, so BatchCQ (its
UPDATE_AND_CREATE_TOPIC drops ``queue.type`` and makes a SimpleCQ topic without a word, which
is why a BatchCQ topic is refused here before it is asked for), and pop consumption (its
broker answers POP_MESSAGE with REQUEST_CODE_NOT_SUPPORTED). RocketMQ 5.0.0 to 5.1.2 pop, but ack
one message a request: BATCH_ACK_MESSAGE came with 5.1.3. Asked by calls.py (``Calls.require``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.errors import ConfigError

_V4_0_0_SNAPSHOT = 212  # MQVersion.Version.V4_0_0_SNAPSHOT.ordinal()
_V5_0_0_SNAPSHOT = 412
_V5_1_3_SNAPSHOT = 438

BATCH_CQ = "BatchCQ"
POP = "pop"
# feature -> (what it is, from which major, what to do instead)
_FEATURES = {
    BATCH_CQ: ("BatchCQ topics (queue.type=BatchCQ, RocketMQ 5.0 and later)",
               "create the topic as SimpleCQ (queue_type='SimpleCQ', rmq-admin topic create --type SimpleCQ), "
               "which the connector and the SDK read and write alike"),
    POP: ("pop consumption (POP_MESSAGE, RocketMQ 5.0 and later)",
          "read by offset instead: RangeReader, or the Spark source with a consumerGroup for the group's offsets"),
}


@dataclass(frozen=True)
class BrokerVersion:
    """A broker's RocketMQ version: ``ordinal`` as its answers carry it."""

    ordinal: int

    @property
    def name(self) -> str | None:
        """"4.9.7", "5.0.0-SNAPSHOT", ...; None for an ordinal below 4.0.0's (not a version here)."""
        if self.ordinal < _V4_0_0_SNAPSHOT:
            return None
        step, release = divmod(self.ordinal - _V4_0_0_SNAPSHOT, 2)
        major, rest = divmod(step, 100)
        return f"{4 + major}.{rest // 10}.{rest % 10}" + ("" if release else "-SNAPSHOT")

    @property
    def major(self) -> int | None:
        name = self.name
        return None if name is None else int(name.split(".")[0])

    @property
    def batch_ack(self) -> bool:
        """Whether the broker takes BATCH_ACK_MESSAGE: False only for one that says it is older
        than RocketMQ 5.1.3."""
        return not _V4_0_0_SNAPSHOT <= self.ordinal < _V5_1_3_SNAPSHOT

    def has(self, feature: str) -> bool:
        """False only for a feature RocketMQ 4 lacks on a broker that says it is RocketMQ 4."""
        if feature not in _FEATURES:
            raise ValueError(f"no feature {feature!r}; the features are {', '.join(_FEATURES)}")
        return not _V4_0_0_SNAPSHOT <= self.ordinal < _V5_0_0_SNAPSHOT


def refusal(feature: str, version: BrokerVersion, broker: str) -> ConfigError:
    """The error for ``feature`` asked of ``broker`` (its name and address), which runs ``version``."""
    what, instead = _FEATURES[feature]
    return ConfigError(f"{broker} runs RocketMQ {version.name}, which has no {what}: {instead}")
