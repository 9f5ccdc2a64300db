"""`rmq-broker-sim --config FILE`: the broker's settings in a file of ``key=value`` lines, the
form of RocketMQ's broker.conf, so that a broker.conf can be brought over as it is.

A key is either one of the broker's flags without its dashes (``remoting-port=9876``,
``max-queues=1000000``, ``accept-state-loss=true``: every flag is a key, new ones too), or a
key of RocketMQ's broker.conf. RocketMQ's keys with a meaning here are read as the flag of
``ROCKETMQ_FLAGS`` (``listenPort`` is ``--remoting-port``); the others RocketMQ knows have no
effect here, and each is warned about in a line; a key neither knows is refused with the
closest key (a typing error). The file gives ``argv``, the flags it stands for: the command
line's flags follow them, so that a flag given on the command line wins.
"""

from __future__ import annotations

import argparse
import difflib
from dataclasses import dataclass, field
from pathlib import Path

# a file the broker cannot start with: its sentence names the line
from broker_sim.common.faults import BrokerConfigError
from broker_sim.rocketmq_keys import ROCKETMQ_BROKER_KEYS


@dataclass(frozen=True)
class RocketMQKey:
    """How a key of RocketMQ's broker.conf is read here: as ``flag``, its value translated by
    ``values`` when RocketMQ spells it otherwise (None: as written)."""

    flag: str
    values: dict | None = None


ROCKETMQ_FLAGS = {
    "storePathRootDir": RocketMQKey("--data-dir"),
    "bindAddress": RocketMQKey("--host"),
    # RocketMQ's broker serves its remoting protocol on listenPort (10911); here that is the
    # remoting door (a broker and its name server on one port), not our gRPC contract's --port.
    "listenPort": RocketMQKey("--remoting-port"),
    "brokerName": RocketMQKey("--broker-name"),
    "brokerClusterName": RocketMQKey("--cluster-name"),
    "namesrvAddr": RocketMQKey("--namesrv"),
    "flushDiskType": RocketMQKey("--flush", {"ASYNC_FLUSH": "async", "SYNC_FLUSH": "sync"}),
    "mappedFileSizeCommitLog": RocketMQKey("--segment-bytes"),
    "transactionCheckInterval": RocketMQKey("--transaction-check-interval-ms"),
    "transactionCheckMax": RocketMQKey("--transaction-check-max"),
    "metricsPromExporterPort": RocketMQKey("--metrics-port"),
    "autoCreateTopicEnable": RocketMQKey("--auto-create-topics"),
    "defaultTopicQueueNums": RocketMQKey("--default-topic-queues"),
}

# RocketMQ's keys for what this broker is, one master: the values it accepts (the others are
# refused), each with why it has no effect here (None: it is what this broker does).
ROCKETMQ_FIXED = {
    "brokerId": {"0": None},
    "brokerRole": {"ASYNC_MASTER": None,
                   "SYNC_MASTER": "this broker has no replicas to wait for: a write is acknowledged once stored "
                                  "(and on disk with flushDiskType=SYNC_FLUSH)"},
}

# aclEnable=true asks for the accounts of a plain_acl.yml: the file or the command line gives its
# path (RocketMQ reads $ROCKETMQ_HOME/conf/plain_acl.yml).
ACL_ENABLE = "aclEnable"

# Why some of RocketMQ's keys have no effect here; the others: "this broker has no such setting".
NO_EFFECT_WHY = {
    "brokerIP1": "the broker gives clients the address it listens on (host=, RocketMQ's bindAddress), or this "
                 "machine's when that is 0.0.0.0",
    "autoCreateSubscriptionGroup": "groups need no creation here",
    "deleteWhen": "the broker keeps every commitlog segment (no retention)",
    "fileReservedTime": "the broker keeps every commitlog segment (no retention)",
    "diskMaxUsedSpaceRatio": "disk-reserve= keeps room on the disk, in bytes (default 64m)",
    "storePathCommitLog": "the commitlog lives in the data directory (storePathRootDir, data-dir=)",
    "timerWheelEnable": "pop and delays need no timer wheel here",
    "metricsExporterType": "metrics are served in Prometheus' format when metricsPromExporterPort (metrics-port=) "
                           "is given, and not otherwise",
    "authenticationEnabled": "accounts come from a plain_acl.yml: aclEnable=true with acl-file=PATH",
    "authorizationEnabled": "accounts come from a plain_acl.yml: aclEnable=true with acl-file=PATH",
}

_BOOLEANS = {"true": True, "false": False}
_TYPE_WORDS = {int: "a whole number", float: "a number"}
_NOT_KEYS = {"help", "config"}


@dataclass
class BrokerConf:
    """What a config file says: ``argv``, the flags it stands for; ``warnings``, a sentence per
    RocketMQ key with no effect here; ``acl_enabled``, its aclEnable (None: not given)."""

    path: Path
    argv: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    acl_enabled: bool | None = None


def keys(parser: argparse.ArgumentParser) -> dict:
    """{key: its action}: each long flag of ``parser`` without its dashes, --help and --config aside."""
    return {option[2:]: action for option, action in parser._option_string_actions.items()  # noqa: SLF001
            if option.startswith("--") and option[2:] not in _NOT_KEYS}


def annotate_help(parser: argparse.ArgumentParser) -> None:
    """Each flag's help names the RocketMQ key that stands for it in a config file."""
    actions = parser._option_string_actions  # noqa: SLF001
    for key, rocketmq in ROCKETMQ_FLAGS.items():
        action = actions[rocketmq.flag]
        action.help = f"{action.help} [broker.conf: {key}]"


def read(path: Path, parser: argparse.ArgumentParser) -> BrokerConf:
    """The settings of the file at ``path`` for ``parser``'s flags; BrokerConfigError when one is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM is no part of the first key
    except (OSError, UnicodeDecodeError) as err:
        raise BrokerConfigError(f"--config {path}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    ours = keys(parser)
    conf = BrokerConf(Path(path))
    given: dict[str, tuple[int, str]] = {}  # flag -> (line, key) that set it
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":  # Java properties' comments
            continue
        key, equals, value = (part.strip() for part in line.partition("="))
        where = f"{path} line {number}"
        if not equals or not key:
            raise BrokerConfigError(f"{where}: {line!r} is not a setting: write key=value (# starts a comment)")
        if key in ours:
            flag, action = "--" + key, ours[key]
        elif key in ROCKETMQ_FLAGS:
            flag = ROCKETMQ_FLAGS[key].flag
            action = ours[flag[2:]]
            value = _rocketmq_value(where, key, value)
        elif key == ACL_ENABLE:
            conf.acl_enabled = _boolean(where, key, value)
            continue
        elif key in ROCKETMQ_FIXED:
            accepted = ROCKETMQ_FIXED[key]
            if value not in accepted:
                raise BrokerConfigError(f"{where}: {key}={value}: this broker is one master ({key}="
                                  f"{' or '.join(accepted)}), it has no replicas: remove the line")
            if accepted[value] is not None:
                conf.warnings.append(f"{where}: {key}={value} has no effect here: {accepted[value]}")
            continue
        elif key in ROCKETMQ_BROKER_KEYS:
            why = NO_EFFECT_WHY.get(key, "this broker has no such setting")
            conf.warnings.append(f"{where}: {key} has no effect here: {why}")
            continue
        else:
            raise BrokerConfigError(f"{where}: {key!r} is not a setting{_did_you_mean(key, ours)}: a key is a flag of "
                              f"`rmq-broker-sim --help` without its dashes, or one of RocketMQ's broker.conf")
        if flag in given:
            first_line, first_key = given[flag]
            raise BrokerConfigError(f"{where}: {key} sets {flag} as line {first_line}'s {first_key} does: keep one")
        given[flag] = (number, key)
        conf.argv += _flag_argv(where, key, flag, action, value)
    if conf.acl_enabled is False and "--acl-file" in given:
        raise BrokerConfigError(f"{path}: aclEnable=false and acl-file are both given: remove one")
    return conf


def _rocketmq_value(where: str, key: str, value: str) -> str:
    values = ROCKETMQ_FLAGS[key].values
    if values is None:
        return value
    if value not in values:
        raise BrokerConfigError(f"{where}: {key}={value}: use {' or '.join(values)}")
    return values[value]


def _boolean(where: str, key: str, value: str) -> bool:
    if value.lower() not in _BOOLEANS:
        raise BrokerConfigError(f"{where}: {key}={value}: use true or false")
    return _BOOLEANS[value.lower()]


def _flag_argv(where: str, key: str, flag: str, action: argparse.Action, value: str) -> list:
    """The flags ``key=value`` stands for, its value checked as the flag checks it."""
    if action.nargs == 0:  # a switch (--accept-state-loss)
        return [flag] if _boolean(where, key, value) else []
    kind = action.type
    try:
        converted = kind(value) if kind is not None else value
    except argparse.ArgumentTypeError as err:
        raise BrokerConfigError(f"{where}: {key}={value}: {err}") from None
    except (TypeError, ValueError):
        raise BrokerConfigError(f"{where}: {key}={value}: {value!r} is not {_TYPE_WORDS.get(kind, 'a valid value')}") \
            from None
    if action.choices is not None and converted not in action.choices:
        raise BrokerConfigError(f"{where}: {key}={value}: use one of {', '.join(map(str, action.choices))}")
    return [flag, value]


def _did_you_mean(key: str, ours: dict) -> str:
    known = [*ours, *ROCKETMQ_BROKER_KEYS]
    by_case = {k.lower().replace("_", "-"): k for k in known}
    close = by_case.get(key.lower().replace("_", "-"))
    if close is None:
        matches = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        close = matches[0] if matches else None
    return f" (did you mean {close}?)" if close else ""
