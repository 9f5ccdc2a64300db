"""ACLs on every door of a real broker process: signatures checked (RocketMQ's schemes), permissions
per topic and group, admin rights, replayed dates refused, transactions belonging to the account
that opened them; a refused request changes nothing."""

from __future__ import annotations

import re
import time
import uuid

import grpc
import pytest

from rmq_spark import (
    Admin,
    AuthenticationError,
    Credentials,
    LimitExceededError,
    Message,
    OffsetRange,
    PermissionDeniedError,
    Producer,
    RangeReader,
    Transactions,
    new_transaction_id,
)
from rmq_wire import signing
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc
from support.acl import ACL_FILE, config

DOORS = ["endpoint", "name_server"]


def connect(acl_broker, door: str) -> dict:
    return {door: getattr(acl_broker, door)}


def stored(acl_broker, topic: str = "orders") -> int:
    with Admin(acl_broker.endpoint, config("ops")) as admin:
        return sum(q.max_offset for q in admin.describe_topic(topic)[1])


def send_one(acl_broker, door: str, transport, topic: str = "orders", **options) -> None:
    with Producer(**connect(acl_broker, door), transport=transport, auto_batch=False, **options) as producer:
        producer.send(Message(topic, b"hello", tags="T"))


@pytest.mark.parametrize("door", DOORS)
def test_unsigned_wrongly_signed_and_unknown_clients_are_refused_and_nothing_is_stored(acl_broker, door):
    before = stored(acl_broker)
    refused = (AuthenticationError, PermissionDeniedError)  # remoting answers both with NO_PERMISSION
    for transport, says in ((None, "no"), (config("writer", "not-the-secret"), "does not match"),
                            (config("nobody", "nobody-secret"), "is not an account")):
        with pytest.raises(refused) as err:
            send_one(acl_broker, door, transport)
        assert says in str(err.value)
    assert stored(acl_broker) == before


@pytest.mark.parametrize("door", DOORS)
def test_each_account_does_what_its_permissions_grant(acl_broker, door):
    before = stored(acl_broker)
    send_one(acl_broker, door, config("writer"))
    send_one(acl_broker, door, config("writer"), topic="audit")
    with pytest.raises(PermissionDeniedError, match="may not (use|publish to) topic 'audit'.*grant it PUB"):
        send_one(acl_broker, door, config("writer2"), topic="audit")
    with pytest.raises(PermissionDeniedError):
        send_one(acl_broker, door, config("reader"))
    assert stored(acl_broker) == before + 1

    ranges = [OffsetRange("orders", q, 0, None) for q in range(4)]
    with RangeReader(**connect(acl_broker, door), transport=config("reader")) as reader:
        assert sum(b.num_rows for b in reader.read(ranges)) == before + 1
    with pytest.raises(PermissionDeniedError, match="may not (use|subscribe to) topic 'orders'"):
        with RangeReader(**connect(acl_broker, door), transport=config("writer")) as reader:
            list(reader.read(ranges))


@pytest.mark.parametrize("door", DOORS)
def test_topics_are_managed_by_admin_accounts_only(acl_broker, door):
    name = f"scratch-{uuid.uuid4().hex[:6]}"
    with Admin(**connect(acl_broker, door), transport=config("writer")) as writer:
        with pytest.raises(PermissionDeniedError, match="needs an admin account"):
            writer.create_topic(name, 2, "SimpleCQ")
        with pytest.raises(PermissionDeniedError, match="needs an admin account"):
            writer.delete_topic("orders")
    with Admin(**connect(acl_broker, door), transport=config("ops")) as ops:
        assert ops.describe_topic("orders")[0].queue_count == 4  # still there
        ops.create_topic(name, 2, "SimpleCQ")
        assert ops.delete_topic(name)


def test_group_offsets_need_the_groups_sub(acl_broker):
    with Admin(acl_broker.endpoint, config("reader")) as reader:
        reader.commit_group_offsets("billing", {("orders", 0): 0})
        with pytest.raises(PermissionDeniedError, match="group 'payroll'"):
            reader.commit_group_offsets("payroll", {("orders", 0): 0})
    with Admin(acl_broker.endpoint, config("writer")) as writer:
        with pytest.raises(PermissionDeniedError, match="group 'billing'"):
            writer.commit_group_offsets("billing", {("orders", 0): 5})


def test_a_call_signed_long_ago_is_refused_as_a_replay(acl_broker):
    channel = grpc.insecure_channel(acl_broker.endpoint)
    try:
        admin = pb_grpc.AdminStub(channel)
        old = signing.grpc_metadata(Credentials("ops", "ops-secret"), time.time() - 3600)
        with pytest.raises(grpc.RpcError) as err:
            admin.ListTopics(pb.ListTopicsRequest(), metadata=old, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert re.search(r"36\d\d s before the broker's clock", err.value.details())
        assert "replayed" in err.value.details()
        fresh = signing.grpc_metadata(Credentials("ops", "ops-secret"))
        assert admin.ListTopics(pb.ListTopicsRequest(), metadata=fresh, timeout=10).topics
    finally:
        channel.close()


def test_a_transaction_belongs_to_the_account_that_opened_it(acl_broker):
    before = stored(acl_broker)
    txn = new_transaction_id()
    with Producer(acl_broker.endpoint, transport=config("writer"), transaction_id=txn) as producer:
        producer.send(Message("orders", b"prepared", tags="T"))
        prepared = producer.prepared()
    with Transactions(acl_broker.endpoint, config("writer2")) as other:
        with pytest.raises(PermissionDeniedError, match="belongs to another account"):
            other.commit([prepared])
        with pytest.raises(PermissionDeniedError, match="belongs to another account"):
            other.rollback([prepared])
        assert [t.state.name for t in other.list([txn])] == ["UNKNOWN"]  # not shown to others
        with pytest.raises(PermissionDeniedError, match="belongs to another account"):
            with Producer(acl_broker.endpoint, transport=config("writer2"), transaction_id=txn) as intruder:
                intruder.send(Message("orders", b"smuggled", tags="T"))
    assert stored(acl_broker) == before
    with Transactions(acl_broker.endpoint, config("writer")) as owner:
        assert [t.state.name for t in owner.list([txn])] == ["OPEN"]
        owner.commit([prepared])
    assert stored(acl_broker) == before + 1


def test_sink_ids_are_the_acls_to_grant_and_their_first_committers_to_own(acl_broker):
    """Issue 29: an account granted nothing committed (sink, batch) of another's sink first; issue
    44: it may not use a sink id at all now (sink ids are granted as Kafka's transactional ids
    are), an account that may write owns the sinks it commits under first, a grant by name wins
    over that, and an admin lists sinks and releases one."""
    sink = f"alice-sink-{uuid.uuid4().hex[:8]}"
    before = stored(acl_broker)
    with Transactions(acl_broker.endpoint, config("stranger")) as stranger:  # may write nowhere: no sink
        with pytest.raises(PermissionDeniedError, match=f"may not publish to sink '{sink}': grant it PUB in the "
                                                        "ACL file's sinkPerms"):
            stranger.commit([], sink_id=sink, batch_id=0)
        with pytest.raises(PermissionDeniedError, match=f"may not use sink '{sink}'"):
            stranger.is_committed(sink, 0)
    with Transactions(acl_broker.endpoint, config("writer")) as owner:
        owner.commit([], sink_id=sink, batch_id=0)  # the sink is writer's from here on
    with Transactions(acl_broker.endpoint, config("writer2")) as other:  # may write too, but the sink is taken
        with pytest.raises(PermissionDeniedError, match=f"sink '{sink}' belongs to another account"):
            other.commit([], sink_id=sink, batch_id=1)
        with pytest.raises(PermissionDeniedError, match="belongs to another account"):
            other.sink_batch(sink, 1)
    txn = new_transaction_id()
    with Producer(acl_broker.endpoint, transport=config("writer"), transaction_id=txn) as producer:
        producer.send(Message("orders", b"exactly once", tags="T"))
        prepared = producer.prepared()
    with Transactions(acl_broker.endpoint, config("writer")) as owner:
        assert not owner.is_committed(sink, 1)
        result = owner.commit([prepared], sink_id=sink, batch_id=1)
        assert not result.sink_batch_replayed
        assert owner.sink_batch(sink, 1).transaction_ids == (txn,)
        owner.commit([], sink_id="orders-etl", batch_id=0)  # writer takes the sink etl is granted by name...
    assert stored(acl_broker) == before + 1
    with Transactions(acl_broker.endpoint, config("etl")) as etl:  # ...which is etl's all the same
        etl.commit([], sink_id="orders-etl", batch_id=1)
        assert etl.sink_batch("orders-etl", 0).committed
        with pytest.raises(PermissionDeniedError, match="may not publish to sink 'another-sink'"):
            etl.commit([], sink_id="another-sink", batch_id=0)
    with Transactions(acl_broker.endpoint, config("writer")) as owner:
        with pytest.raises(PermissionDeniedError, match="may not list the sinks: that needs an admin account"):
            owner.sinks()
    with Transactions(acl_broker.endpoint, config("ops")) as admin:
        listed = {s.sink_id: s for s in admin.sinks()}
        assert (listed[sink].owner, listed[sink].latest_batch_id, listed[sink].batches_kept) == ("writer", 1, 2)
        assert admin.release_sink(sink) == "writer"
        assert admin.release_sink(sink) is None  # released already
    with Transactions(acl_broker.endpoint, config("writer2")) as other:  # released: the next committer owns it
        other.commit([], sink_id=sink, batch_id=2)
        assert other.sink_batch(sink, 1).committed  # its batches stayed: replays are still recognised
    with Transactions(acl_broker.endpoint, config("ops")) as admin:
        assert {s.sink_id: s.owner for s in admin.sinks()}[sink] == "writer2"


def test_sinks_and_groups_per_account_are_bounded_and_a_sink_keeps_its_latest_batches(tmp_path, monkeypatch):
    from broker_sim.acl import Guard
    from broker_sim.broker import Broker
    from broker_sim.core.limits import ClientLimits
    from broker_sim.txn import state

    monkeypatch.setattr(state, "SINK_BATCHES_KEPT", 5)
    (tmp_path / "acl.yml").write_text(ACL_FILE)
    limits = ClientLimits(max_sinks_per_account=2, max_groups_per_client=2)
    with Broker(tmp_path / "data", "127.0.0.1", 0, acl=Guard(tmp_path / "acl.yml"), limits=limits) as broker:
        with Transactions(broker.endpoint, config("writer")) as writer:
            for batch in range(8):
                writer.commit([], sink_id="w1", batch_id=batch)
            writer.commit([], sink_id="w2", batch_id=0)
            with pytest.raises(LimitExceededError, match="account 'writer' owns 2 sinks, the broker's limit "
                                                         "\\(--max-sinks-per-account\\)"):
                writer.commit([], sink_id="w3", batch_id=0)
            assert writer.sink_batch("w1", 7).committed and not writer.sink_batch("w1", 2).committed
        with Transactions(broker.endpoint, config("ops")) as admin:
            assert {s.sink_id: s.batches_kept for s in admin.sinks()} == {"w1": 5, "w2": 1}
            Admin(broker.endpoint, config("ops")).create_topic("orders", 1, "BatchCQ")
        with Admin(broker.endpoint, config("reader")) as reader:  # SUB on orders and on its two groups
            for group in ("billing", "rocketmq-batch-reader"):
                reader.commit_group_offsets(group, {("orders", "", 0): 0})
        with Admin(broker.endpoint, config("ops")) as admin:  # an admin's groups count as well
            admin.commit_group_offsets("g1", {("orders", "", 0): 0})
            admin.commit_group_offsets("g2", {("orders", "", 0): 0})
            admin.commit_group_offsets("g1", {("orders", "", 0): 0})  # a group it made: no count
            with pytest.raises(LimitExceededError, match="made 2 consumer groups, its limit "
                                                         "\\(--max-groups-per-client\\)"):
                admin.commit_group_offsets("g3", {("orders", "", 0): 0})
            admin.commit_group_offsets("billing", {("orders", "", 0): 0})  # another's group: it exists


def test_the_v2_door_answers_with_rocketmqs_codes(acl_broker):
    channel = grpc.insecure_channel(acl_broker.endpoint)
    try:
        stub = v2_grpc.MessagingServiceStub(channel)

        def route(topic: str, credentials: Credentials | None):
            metadata = signing.grpc_metadata(credentials) if credentials else ()
            request = v2.QueryRouteRequest(topic=v2.Resource(name=topic))
            return stub.QueryRoute(request, metadata=metadata, timeout=10)

        assert route("orders", None).status.code == v2.UNAUTHORIZED
        assert route("audit", Credentials("reader", "reader-secret")).status.code == v2.FORBIDDEN
        answer = route("orders", Credentials("reader", "reader-secret"))
        assert answer.status.code == v2.OK and answer.message_queues
    finally:
        channel.close()


def test_route_lookups_stay_open_as_rocketmqs_name_server_leaves_them(acl_broker):
    with RemotingConnection(acl_broker.name_server, timeout_s=5) as connection:
        answer = connection.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, timeout_s=5)
        assert answer.code == ResponseCode.SUCCESS
        refused = connection.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}, timeout_s=5)
        assert refused.code == ResponseCode.NO_PERMISSION and "AccessKey" in refused.remark


def test_the_acl_file_is_read_again_when_it_changes(acl_broker):
    original = acl_broker.acl_file.read_text()
    added = original + "  - accessKey: newcomer\n    secretKey: newcomer-secret\n    topicPerms: [orders=PUB]\n"
    try:
        with pytest.raises(AuthenticationError):
            send_one(acl_broker, "endpoint", config("newcomer", "newcomer-secret"))
        acl_broker.acl_file.write_text(added)
        _eventually(lambda: send_one(acl_broker, "endpoint", config("newcomer", "newcomer-secret")))
        acl_broker.acl_file.write_text("accounts: [this is: not valid")  # kept out: the accounts stay
        time.sleep(1.5)
        send_one(acl_broker, "endpoint", config("newcomer", "newcomer-secret"))
    finally:
        acl_broker.acl_file.write_text(original)
    _eventually(lambda: pytest.raises(AuthenticationError, send_one, acl_broker, "endpoint",
                                      config("newcomer", "newcomer-secret")))


def _eventually(attempt, timeout_s: float = 10):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except (AuthenticationError, pytest.fail.Exception):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_topics_listed_through_name_servers_are_those_the_account_may_use(acl_broker):
    """The broker keeps its topic config table for admins: a non-admin's list comes from the
    name server's topic names and each topic's own config, which the account may read only for
    a topic it may publish or subscribe to. An admin's list is the same through both doors."""
    with Admin(name_server=acl_broker.name_server, transport=config("ops")) as admin:
        everything = {t.name: t for t in admin.list_topics()}
    with Admin(acl_broker.endpoint, config("ops")) as admin:
        assert {(t.name, t.queue_count, t.queue_type) for t in admin.list_topics()} == {
            (t.name, t.queue_count, t.queue_type) for t in everything.values()}
    assert {"orders", "audit"} <= set(everything)
    for account, usable in (("reader", ["orders"]), ("writer2", ["orders"]), ("writer", ["audit", "orders"])):
        with Admin(name_server=acl_broker.name_server, transport=config(account)) as admin:
            assert [t for t in admin.list_topics() if t.name in everything] == [everything[n] for n in usable]
    for transport, says in ((config("stranger"), "may not"), (config("reader", "not-the-secret"), "does not match")):
        with Admin(name_server=acl_broker.name_server, transport=transport) as admin:
            with pytest.raises((AuthenticationError, PermissionDeniedError), match=says):
                admin.list_topics()
