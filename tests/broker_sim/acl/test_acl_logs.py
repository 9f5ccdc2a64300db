"""A request the ACLs refuse is logged as a warning naming what was refused and why, with its
account (the access key it named, signed or not) and, on the gRPC port, its client address as
fields; a client refused again and again is logged 5 times per 10 s, then counted."""

from __future__ import annotations

import logging
import time

import pytest

from broker_sim.acl import Guard
from broker_sim.common.logs import ThrottledLog
from broker_sim.doors.grpc_acl import DEMANDS, GrpcAdmission
from broker_sim.doors.grpc_common import RefusedRequest
from broker_sim.doors.remoting.acl import DEMANDS as REMOTING_DEMANDS
from broker_sim.doors.remoting.acl import OPEN_CODES, RemotingAdmission
from rmq_spark import Credentials
from rmq_wire import signing
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.remoting import RemotingCommand, RequestCode
from support.acl import ACL_FILE, SECRETS
from support.clock import Clock

LOGGER = "broker_sim.acl.guard"


class Context:
    """What the admission reads of a gRPC call's context."""

    def __init__(self, metadata=(), peer="ipv4:127.0.0.1:5555"):
        self.metadata, self._peer = tuple(metadata), peer

    def invocation_metadata(self):
        return self.metadata

    def peer(self):
        return self._peer


@pytest.fixture
def guard(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    return Guard(acl_file)


@pytest.fixture
def clock(guard):
    clock = Clock()
    guard.refusal_log = ThrottledLog(logging.getLogger(LOGGER), now=clock, background=False)
    return clock


def refusals(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def send(guard, credentials: Credentials | None, topic: str = "orders", peer: str = "ipv4:127.0.0.1:5555"):
    """A gRPC Send through the admission: the request its handler sees."""
    seen = []
    send = GrpcAdmission(guard, DEMANDS).guarded("Send", lambda request, context: seen.append(request), False)
    metadata = signing.grpc_metadata(credentials, time.time()) if credentials else ()
    send(pb.SendRequest(topic=topic), Context(metadata, peer))
    return seen[0]


def test_a_grpc_call_refused_names_its_account_and_client(guard, clock, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert isinstance(send(guard, Credentials("writer", "not-the-secret")), RefusedRequest)
        assert isinstance(send(guard, Credentials("reader", SECRETS["reader"])), RefusedRequest)
        assert not isinstance(send(guard, Credentials("writer", SECRETS["writer"])), RefusedRequest)
        assert isinstance(send(guard, None, peer="ipv6:[::1]:6000"), RefusedRequest)
    wrong, denied, unsigned = refusals(caplog)
    assert wrong.getMessage().startswith("ACL refused gRPC call Send from 127.0.0.1:5555: the call's Signature does "
                                         "not match access key 'writer'")
    assert (wrong.account, wrong.client, wrong.reason) == ("writer", "127.0.0.1:5555", "UNAUTHENTICATED")
    assert denied.getMessage().startswith("ACL refused gRPC call Send from 127.0.0.1:5555: access key 'reader' may "
                                          "not publish to topic 'orders'")
    assert (denied.account, denied.client, denied.reason) == ("reader", "127.0.0.1:5555", "PERMISSION_DENIED")
    assert (unsigned.account, unsigned.client, unsigned.reason) == (None, "[::1]:6000", "UNAUTHENTICATED")


def test_a_remoting_request_refused_names_its_code_and_account(guard, clock, caplog):
    admission = RemotingAdmission(guard, [*REMOTING_DEMANDS, *OPEN_CODES], lambda _offset: None)
    fields = signing.sign_remoting({"topic": "orders", "consumerGroup": "payroll"}, None,
                                   Credentials("reader", SECRETS["reader"]))
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(Exception, match="group 'payroll'"):
        admission(RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=fields))
    (line,) = refusals(caplog)
    assert line.getMessage().startswith("ACL refused remoting request PULL_MESSAGE: access key 'reader' may not ")
    assert (line.account, line.client, line.reason) == ("reader", None, "PERMISSION_DENIED")


def test_a_client_refused_again_and_again_is_logged_at_a_bounded_rate(guard, clock, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(20):
            send(guard, Credentials("reader", SECRETS["reader"]))
        send(guard, Credentials("writer2", SECRETS["writer2"]), topic="audit")  # another account: its own lines
        clock.now += 10
        send(guard, Credentials("reader", SECRETS["reader"]))
    lines = refusals(caplog)
    assert [line.account for line in lines] == ["reader"] * 5 + ["writer2", "reader", "reader"]
    assert lines[6].getMessage() == '15 more lines like "ACL refused %s: %s" were left out in the last 10 s'
    assert (lines[6].account, lines[6].client, lines[6].dropped) == ("reader", "127.0.0.1:5555", 15)
