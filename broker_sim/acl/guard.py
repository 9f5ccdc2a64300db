"""The Guard: who sent a request (authentication, by RocketMQ's signatures) and whether that
account may do what the request asks (authorization, by the ACL file's permissions).

Each door says what a request needs as ``Demand``s (doors/remoting/acl.py, doors/grpc_acl.py,
doors/rocketmq_v2/acl.py) and asks the guard; a refusal is a BrokerFault (UNAUTHENTICATED or
PERMISSION_DENIED) that each door answers in its protocol, so nothing of the request happens.
The ACL file is read again when it changes (looked at no more than once a second); a file that
no longer parses leaves the accounts as they were, with an error in the log, and one whose
``accounts:`` is emptied revokes them all (every request is refused until accounts come back). Each door logs its
refusals with ``Guard.log_refusal`` (a warning with the account and client, at a bounded rate).
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from broker_sim.acl.config import Account, AclConfig, AclConfigError, Perm, load
from broker_sim.common.logs import ThrottledLog
from broker_sim.core import BrokerFault, Reason, refused
from broker_sim.store.errors import echo
from rmq_wire import record as fmt
from rmq_wire import signing

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW_S = 900  # a gRPC request's x-mq-date-time may be this far from the broker's clock
RELOAD_CHECK_S = 1.0
_HOW_TO_SIGN = ("give the client an account's access key and secret key (rmq_spark: Credentials, Spark options "
                "accessKey and secretKey, rmq-admin --access-key; RocketMQ's clients: AclClientRPCHook or "
                "SessionCredentials, the 5.x clients' Credentials)")


@dataclass(frozen=True)
class Demand:
    """What a request needs: ``perm`` (any of its flags) on a topic or group, or admin rights.
    ``label`` is how a refusal names the topic or group when its name is not the caller's to
    learn (say, "the topic of the message at commitlog offset 4096")."""

    kind: str  # "topic", "group", "sink" or "admin"
    name: str
    perm: Perm = Perm.DENY
    label: str = ""

    @staticmethod
    def topic(name: str, perm: Perm, label: str = "") -> "Demand":
        """A topic's demand; pop's and RocketMQ's retry and dead letter topics are their group's;
        the sink topic, which holds every account's committed sink batches, an admin's."""
        for prefix in (fmt.RETRY_TOPIC_PREFIX, fmt.DLQ_TOPIC_PREFIX):
            if name.startswith(prefix):
                return Demand("group", name[len(prefix):].split("+", 1)[0], Perm.SUB, label)
        if name == fmt.SINK_TOPIC:
            return Demand.admin(f"use topic {name}, which holds every account's committed sink batches")
        return Demand("topic", name, perm, label)

    @staticmethod
    def group(name: str) -> "Demand":
        return Demand("group", name, Perm.SUB)

    @staticmethod
    def sink(name: str, perm: Perm) -> "Demand":
        """A sink id's demand: PUB to commit under it, SUB to look its batches up."""
        return Demand("sink", name, perm)

    @staticmethod
    def admin(action: str) -> "Demand":
        return Demand("admin", action)


_VERBS = {Perm.PUB: "publish to", Perm.SUB: "subscribe to", Perm.PUB | Perm.SUB: "use"}
_GRANTS = {Perm.PUB: "PUB", Perm.SUB: "SUB", Perm.PUB | Perm.SUB: "PUB or SUB"}


class Guard:
    """The accounts of the ACL file at ``path``, looked at again for changes every
    ``reload_check_s``. ``clock_s`` (seconds since the epoch) is injected by tests;
    ``max_clock_skew_s`` bounds how old (or early) a signed date may be."""

    def __init__(self, path, *, clock_s: Callable[[], float] = time.time, max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
                 reload_check_s: float = RELOAD_CHECK_S):
        self.path = Path(path)
        self.clock_s = clock_s
        self.max_clock_skew_s = max_clock_skew_s
        self.reload_check_s = reload_check_s
        self._lock = threading.Lock()
        self._stamp = _file_stamp(self.path)
        self._config = load(self.path)  # AclConfigError at start: the broker does not start
        self._checked = time.monotonic()
        self.refusal_log = ThrottledLog(log)  # a client with a wrong secret is refused at each request

    @property
    def config(self) -> AclConfig:
        """The accounts, read again first if the file changed."""
        if time.monotonic() - self._checked >= self.reload_check_s:
            self._reload_if_changed()
        return self._config

    def _reload_if_changed(self) -> None:
        with self._lock:
            self._checked = time.monotonic()
            stamp = _file_stamp(self.path)
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                self._config = load(self.path, allow_empty=True)
            except AclConfigError as err:
                log.error("ACL file changed but cannot be used; the accounts stay as they were: %s", err)
                return
            if not self._config.accounts:
                log.warning("ACL file %s read again: it lists no account, so every request is refused until one "
                            "is added", self.path)
                return
            log.info("ACL file %s read again: %d accounts", self.path, len(self._config.accounts))

    # --- authentication --------------------------------------------------------------------

    def remoting_account(self, fields: Mapping[str, str], body: bytes | None, version: int = 0) -> Account:
        """The account whose signature a remoting request carries (``version``: its header's, which
        decides whether _UNIQUE_KEY_QUERY is signed); UNAUTHENTICATED otherwise."""
        access_key = fields.get(signing.ACCESS_KEY)
        if not access_key:
            raise _unauthenticated(f"the request carries no AccessKey and this broker checks ACLs: {_HOW_TO_SIGN}")
        account = self._account(access_key)
        expected = signing.remoting_signature(fields, body, account.secret_key, version)
        if not hmac.compare_digest(expected.encode(), str(fields.get(signing.SIGNATURE, "")).encode()):
            raise _unauthenticated(f"the request's Signature does not match access key {echo(access_key)}: check "
                                   "its secret key")
        return account

    def grpc_account(self, metadata: Iterable[tuple[str, str]]) -> Account:
        """The account whose ``authorization`` a gRPC call carries; UNAUTHENTICATED otherwise."""
        headers = {key: value for key, value in metadata if isinstance(value, str)}
        authorization = headers.get(signing.AUTHORIZATION)
        if not authorization:
            raise _unauthenticated(f"the call carries no authorization header and this broker checks ACLs: "
                                   f"{_HOW_TO_SIGN}")
        try:
            access_key, signature = signing.parse_authorization(authorization)
            signed_s = signing.parse_date_time(headers.get(signing.DATE_TIME, ""))
        except ValueError as bad:
            raise _unauthenticated(f"{bad}: sign calls as RocketMQ's clients do") from None
        account = self._account(access_key)
        expected = signing.grpc_signature(headers[signing.DATE_TIME], account.secret_key)
        if not hmac.compare_digest(expected.encode(), signature.lower().encode()):
            raise _unauthenticated(f"the call's Signature does not match access key {echo(access_key)}: check its "
                                   "secret key")
        skew_s = self.clock_s() - signed_s
        if abs(skew_s) > self.max_clock_skew_s:
            raise _unauthenticated(
                f"the call was signed for {headers[signing.DATE_TIME]}, {abs(skew_s):.0f} s "
                f"{'before' if skew_s > 0 else 'after'} the broker's clock; at most {self.max_clock_skew_s:g} s is "
                "accepted, so that a recorded call cannot be replayed later. Sync the client's clock (RocketMQ's "
                "clients write their local time as UTC: run them with TZ=UTC)")
        return account

    def _account(self, access_key: str) -> Account:
        account = self.config.accounts.get(access_key)
        if account is None:
            raise _unauthenticated(f"access key {echo(access_key)} is not an account of this broker: check the "
                                   "access key, or add the account to the broker's ACL file")
        return account

    # --- refusals --------------------------------------------------------------------------

    def log_refusal(self, err: BaseException, what: str, *, account: str = "", client: str = "") -> None:
        """Log a request the ACLs refused (``err``: UNAUTHENTICATED or PERMISSION_DENIED; nothing
        else is logged here): a warning saying ``what`` was refused and why, with the access key
        it named (``account``, signed or not) and its ``client`` address as fields. At most 5
        lines per 10 s per kind and account (or client host, unsigned), then one counting the rest."""
        reason = getattr(err, "reason", None)
        if reason not in (Reason.UNAUTHENTICATED, Reason.PERMISSION_DENIED):
            return
        host = client.rsplit(":", 1)[0]
        self.refusal_log.warning("ACL refused %s: %s", what, err.message, key=(reason, account or host),
                                 extra={"account": account or None, "client": client or None, "reason": reason.value})

    # --- authorization ---------------------------------------------------------------------

    def authorize(self, account: Account, demands: Iterable[Demand]) -> None:
        """PERMISSION_DENIED, saying what to grant, unless ``account`` meets every demand."""
        if account.admin:
            return
        for demand in demands:
            if demand.kind == "admin":
                raise _denied(f"access key {echo(account.access_key)} may not {demand.name}: that needs an admin "
                              "account (admin: true in the ACL file)")
            if demand.kind == "topic":
                held, listing = account.topic_perm(demand.name), "topicPerms"
            elif demand.kind == "sink":
                held, listing = account.sink_perm(demand.name), "sinkPerms"
            else:
                held, listing = account.group_perm(demand.name), "groupPerms"
            if not held & demand.perm:
                what = demand.label or f"{demand.kind} {echo(demand.name)}"
                raise _denied(f"access key {echo(account.access_key)} may not {_VERBS[demand.perm]} {what}: grant it "
                              f"{_GRANTS[demand.perm]} in the ACL file's {listing}")


def claimed_access_key(metadata: Iterable[tuple[str, str]]) -> str:
    """The access key a gRPC call's authorization header names, whether its signature is right or
    not ("" when it names none)."""
    for key, value in metadata:
        if key == signing.AUTHORIZATION and isinstance(value, str):
            try:
                return signing.parse_authorization(value)[0]
            except ValueError:
                return ""
    return ""


def _file_stamp(path: Path) -> tuple:
    try:
        stat = os.stat(path)
    except OSError:
        return ()
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _unauthenticated(sentence: str) -> BrokerFault:
    return refused(Reason.UNAUTHENTICATED, sentence)


def _denied(sentence: str) -> BrokerFault:
    return refused(Reason.PERMISSION_DENIED, sentence)
